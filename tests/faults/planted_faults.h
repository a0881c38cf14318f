// Faults planted in the paging path and under the expert reads, for tests only: this library is
// linked into the test executables (epq_tests, epq-faults), never into the release `epq`.
//
// In epq-faults they come from the environment, read once at start:
//   EPQ_FAULT=corrupt-slot|wrong-slot, EPQ_FAULT_AFTER=N (default 1): invert the first row of the
//     Nth expert that lands in the arena; or, from the Nth expert matmul on, read one selected
//     expert from the next slot. Every verify check must catch both.
//   EPQ_IO_FAULT=KIND[,after=N][,count=M]: from the Nth read system call (default 1), M calls
//     (0: every call from then on) misbehave: eio fails with EIO; short returns half of what was
//     asked (whole 4 KiB blocks); eintr fails every other call with EINTR; slow sleeps 5 ms first; einval fails
//     direct (O_DIRECT) reads with EINVAL, as a filesystem does that refuses their alignment.
//     The count defaults to 1 for eio and to 0 for the others. At exit, a line on stderr says how
//     many faults were planted in how many read calls.
#pragma once

#include <cstdint>
#include <string>

namespace epq::faults {

struct IoFault {
    enum class Kind { none, eio, short_read, eintr, slow, einval_direct };
    Kind kind = Kind::none;
    uint64_t after = 1;
    uint64_t count = 0;
};

// Parses an EPQ_IO_FAULT value; throws epq::Error naming what is wrong.
IoFault parse_io_fault(const std::string & spec);
// Replaces the reads' system call with one that plants `f` (Kind::none restores pread(2)), and
// resets the counts below.
void plant_io_fault(const IoFault & f);
// Read calls seen and faults planted since plant_io_fault.
uint64_t io_calls();
uint64_t io_faults_planted();

// Every pager created afterwards gets this fault ("" for none); throws epq::Error for an
// unknown kind.
void plant_pager_fault(const std::string & kind, uint64_t after);

// Both, from the environment variables above. Prints the problem and exits 2 on a bad value.
void plant_from_env();

}  // namespace epq::faults
