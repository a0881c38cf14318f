// What the pager did with each expert lately, for people watching it (the serve page's heat
// map): when each (layer, expert) was last selected and last read, counted in batches. Pure
// bookkeeping, no llama.cpp; the pager updates it on its own thread and a snapshot is taken on
// that thread too, so nothing here is synchronized.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace epq {

class ExpertActivity {
public:
    ExpertActivity(size_t n_layers, uint32_t n_expert);

    void next_batch();                    // a batch reaches the first MoE layer
    void used(size_t layer, uint32_t e);  // selected in the current batch (layer: index among the MoE layers)
    void read(size_t layer, uint32_t e);  // read from the file in the current batch
    uint64_t batches() const { return batch_; }

    // One string per MoE layer, one character per expert: '0' not resident, '1' resident,
    // '2' resident and selected within the last `recent` batches, '3' read within the last
    // `just_read` batches (resident or not: it may have been evicted since).
    std::vector<std::string> cells(const std::function<bool(size_t layer, uint32_t e)> & resident, uint64_t recent = 16,
                                   uint64_t just_read = 2) const;

private:
    uint32_t n_expert_ = 0;
    uint64_t batch_ = 0;
    std::vector<uint64_t> used_, read_;  // [layer x expert]: the batch of the last use / read; 0: never
};

}  // namespace epq
