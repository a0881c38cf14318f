// How many requests epq serve lets generate at once, and the queue the others wait in.
#include "sched/stream_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace epq;

TEST(StreamGate, FitsAsManyStreamsAsTheArenaHoldsWorkingSetsOf) {
    StreamFit f;
    f.n_parallel = 8;
    f.n_expert = 128;
    f.n_expert_used = 8;
    // One working set is 2 x 8 = 16 experts of a layer.
    f.slots_per_layer = 128;
    f.holds_everything = true;
    EXPECT_EQ(streams_that_fit(f).streams, 8);
    f.holds_everything = false;
    EXPECT_EQ(streams_that_fit(f).streams, 8);  // 128 / 16
    f.slots_per_layer = 41;
    EXPECT_EQ(streams_that_fit(f).streams, 2);  // 41 / 16, rounded down
    f.slots_per_layer = 12;
    EXPECT_EQ(streams_that_fit(f).streams, 1);  // never fewer than one
    EXPECT_NE(streams_that_fit(f).why.find("12 experts per layer of 128"), std::string::npos)
        << streams_that_fit(f).why;
    f.slots_per_layer = 10000;
    f.n_parallel = 3;
    EXPECT_EQ(streams_that_fit(f).streams, 3);  // never more than the slots
}

TEST(StreamGate, AdmitsAtMostItsCapacityInArrivalOrder) {
    StreamGate gate(2);
    auto a = gate.acquire();
    auto b = gate.acquire();
    ASSERT_TRUE(a && b);
    EXPECT_EQ(gate.counters().active, 2);

    // Three more arrive one after another; each must wait, and they are admitted in that order.
    std::mutex mu;
    std::vector<int> order;
    std::vector<StreamGate::Permit> held(3);
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) {
        waiters.emplace_back([&, i] {
            auto p = gate.acquire();
            std::lock_guard<std::mutex> lk(mu);
            order.push_back(i);
            held[static_cast<size_t>(i)] = std::move(p);
        });
        while (gate.counters().waiting != i + 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        EXPECT_TRUE(order.empty());
    }
    // Wait on what the admitted waiter recorded, not on the gate's queue: a waiter leaves the
    // queue before it records itself, and the next one must not be released until it has.
    const auto wait_recorded = [&](size_t n) {
        for (;;) {
            {
                std::lock_guard<std::mutex> lk(mu);
                if (order.size() == n) {
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    };
    a.reset();  // one place: the oldest waiter (0) gets it
    wait_recorded(1);
    EXPECT_EQ(gate.counters().waiting, 2);
    b.reset();
    wait_recorded(2);
    EXPECT_EQ(gate.counters().waiting, 1);
    EXPECT_EQ(gate.counters().active, 2);
    {
        std::lock_guard<std::mutex> lk(mu);
        held[0].reset();
    }
    waiters[0].join();
    waiters[1].join();
    waiters[2].join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
    const StreamGate::Counters c = gate.counters();
    EXPECT_EQ(c.admitted, 5u);
    EXPECT_EQ(c.waited, 3u);
    EXPECT_GT(c.wait_seconds, 0.0);
    EXPECT_EQ(c.active, 2);  // 1 and 2 still hold theirs
}

TEST(StreamGate, AWaiterThatGivesUpLeavesTheQueueToTheNext) {
    StreamGate gate(1);
    auto a = gate.acquire();
    std::atomic<bool> stop{false};
    StreamGate::Permit first, second;
    std::thread t1([&] { first = gate.acquire([&] { return stop.load(); }); });
    while (gate.counters().waiting != 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::thread t2([&] { second = gate.acquire(); });
    while (gate.counters().waiting != 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    stop = true;  // the first waiter's client went away
    t1.join();
    EXPECT_FALSE(first);
    EXPECT_EQ(gate.counters().waiting, 1);
    a.reset();
    t2.join();
    EXPECT_TRUE(second);
    EXPECT_EQ(gate.counters().admitted, 2u);
}

TEST(StreamGate, ACapacityChangeTakesNoPlaceAwayAndARaiseAdmitsWaiters) {
    StreamGate gate(3);
    auto a = gate.acquire();
    auto b = gate.acquire();
    gate.set_capacity(1);  // both keep generating; the next request waits until one ends
    EXPECT_EQ(gate.counters().capacity, 1);
    EXPECT_EQ(gate.counters().active, 2);
    StreamGate::Permit c;
    std::thread t([&] { c = gate.acquire(); });
    while (gate.counters().waiting != 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    a.reset();  // one generating, still at the capacity of one: c keeps waiting
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(gate.counters().waiting, 1);
    gate.set_capacity(99);  // clamped to the capacity the gate was made with; admits c
    t.join();
    EXPECT_TRUE(c);
    const StreamGate::Counters k = gate.counters();
    EXPECT_EQ(k.capacity, 3);
    EXPECT_EQ(k.max_capacity, 3);
    EXPECT_EQ(k.active, 2);
    gate.set_capacity(0);
    EXPECT_EQ(gate.counters().capacity, 1);
}

TEST(StreamGate, BusyTimeCountsOnlyWhileARequestGenerates) {
    StreamGate gate(2);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(gate.counters().busy_seconds, 0.0);  // nothing generated yet
    {
        auto a = gate.acquire();
        auto b = gate.acquire();  // overlapping requests count once
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        EXPECT_GE(gate.counters().busy_seconds, 0.03);  // counted while still running
    }
    const double busy = gate.counters().busy_seconds;
    EXPECT_GE(busy, 0.03);
    EXPECT_LT(busy, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(gate.counters().busy_seconds, busy);  // idle time is not counted
}
