// Routing traces: which experts the router picked, per token and layer, as a run saw them. A
// trace is what `epq simulate` replays to compare eviction policies without the model.
//
// Format (text, so it can be inspected and cut with the usual tools):
//   epq-trace 2
//   {"model": ..., "n_expert": N, "n_expert_used": K, "classes": [...], "layers": [...]}
//   <step> <token> <layer> <e1> ... <eK>        one line per (token, layer)
//   g <step> <layer> <e1> ... <eK>               the pager's guess of a layer's experts (format 2)
// A step is one batch: a decode step has one token, a prompt batch many with the same step. A
// guess is what decode prediction (--prefetch) read ahead for `layer` during the layer before
// it, in the same step: `epq simulate` replays it as the run did. Format 1 (no guesses) is read
// too.
#pragma once

#include "arena/slot_arena.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace epq {

struct TraceHeader {
    std::string model;  // the model's file name, for people
    std::string arch;   // general.architecture; empty in traces recorded before it was written
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    std::vector<SizeClassDemand> classes;               // ascending slot_bytes, as the pager plans them
    std::vector<std::pair<uint32_t, uint32_t>> layers;  // (layer number, size class) of every MoE layer
};

// Writes a trace as the run goes. Records go to a buffer that is written out in large pieces,
// so record() costs a few integer formats. Not synchronized: one writer per thread, or a lock
// around it.
class TraceWriter {
public:
    // Creates (truncates) `path` and writes the header; throws epq::Error if it cannot.
    TraceWriter(const std::string & path, const TraceHeader & h);
    ~TraceWriter();  // flushes; an error there is lost, so call flush() to see it
    TraceWriter(const TraceWriter &) = delete;
    TraceWriter & operator=(const TraceWriter &) = delete;

    void record(uint64_t step, uint64_t token, uint32_t layer, const int32_t * experts, size_t n);
    void record_guess(uint64_t step, uint32_t layer, const uint32_t * experts, size_t n);
    // Writes out the buffer; throws epq::Error when the write fails (a full disk).
    void flush();

private:
    struct Closer {
        void operator()(std::FILE * f) const { std::fclose(f); }
    };
    std::string path_;
    std::unique_ptr<std::FILE, Closer> file_;
    std::string buf_;
};

struct TraceRecord {
    uint64_t step = 0;
    uint64_t token = 0;
    uint32_t layer = 0;
    std::vector<uint32_t> experts;
};

struct TraceGuess {
    uint64_t step = 0;
    uint32_t layer = 0;
    std::vector<uint32_t> experts;
};

struct Trace {
    TraceHeader header;
    std::vector<TraceRecord> records;
    std::vector<TraceGuess> guesses;  // in the order they were made
};

// Reads and checks a whole trace; throws epq::Error naming the file (and line) of any problem.
Trace read_trace(const std::string & path);

}  // namespace epq
