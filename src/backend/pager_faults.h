// The seam through which a test build plants faults in the paging path, to prove that every
// verify check catches them. The release binary installs none: the faults themselves live in
// tests/faults, linked only into the test executables, so no environment variable or flag can
// switch them on in `epq`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace epq {

class PagerFaults {
public:
    virtual ~PagerFaults() = default;
    // An expert's bytes just landed in its slot; `first_row` (`row_bytes` long) is the first
    // row of its first matrix. A fault may damage them.
    virtual void landed(uint8_t * first_row, size_t row_bytes) = 0;
    // The slot an expert matmul is about to read, among `n_slots`; a fault may name another.
    virtual uint32_t slot(uint32_t slot, uint32_t n_slots) = 0;
};

using PagerFaultsFactory = std::unique_ptr<PagerFaults> (*)();
// Every pager created afterwards gets the factory's faults (nullptr: none, the default).
void set_pager_faults_factory(PagerFaultsFactory factory);
std::unique_ptr<PagerFaults> make_pager_faults();

}  // namespace epq
