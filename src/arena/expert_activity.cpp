#include "arena/expert_activity.h"

namespace epq {

ExpertActivity::ExpertActivity(size_t n_layers, uint32_t n_expert)
    : n_expert_(n_expert), used_(n_layers * n_expert, 0), read_(n_layers * n_expert, 0) {}

void ExpertActivity::next_batch() {
    ++batch_;
}

void ExpertActivity::used(size_t layer, uint32_t e) {
    used_[layer * n_expert_ + e] = batch_;
}

void ExpertActivity::read(size_t layer, uint32_t e) {
    read_[layer * n_expert_ + e] = batch_;
}

std::vector<std::string> ExpertActivity::cells(const std::function<bool(size_t, uint32_t)> & resident, uint64_t recent,
                                               uint64_t just_read) const {
    const size_t n_layers = n_expert_ ? used_.size() / n_expert_ : 0;
    // Within the last n batches, the current one included; batch numbers start at 1.
    auto within = [&](uint64_t at, uint64_t n) { return at != 0 && at + n > batch_; };
    std::vector<std::string> out(n_layers, std::string(n_expert_, '0'));
    for (size_t l = 0; l < n_layers; ++l) {
        for (uint32_t e = 0; e < n_expert_; ++e) {
            const size_t i = l * n_expert_ + e;
            char & c = out[l][e];
            if (within(read_[i], just_read)) {
                c = '3';
            } else if (resident(l, e)) {
                c = within(used_[i], recent) ? '2' : '1';
            }
        }
    }
    return out;
}

}  // namespace epq
