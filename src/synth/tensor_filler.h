// Produces the bytes of one synthetic tensor, in any ggml type, fast enough to stream a 20 GB
// model at disk speed.
//
// Quantizing tens of billions of random floats would take hours, so large tensors are built
// from a pool of pre-quantized "units" (a few blocks of one row, drawn from the tensor's value
// distribution and quantized by ggml itself): each unit of the tensor is a pool unit picked at
// random. Every unit is a valid encoding of random values of the right magnitude, and the
// result depends only on the seed. Small tensors are quantized value by value.
//
// A matrix whose rows must differ (the output head: equal rows give exactly tied logits, and
// then "greedy" depends on how a sampler breaks ties) takes its first unit of row r from pool
// unit r of a pool with at least one unit per row, so no two rows are equal.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace epq {

struct ValueDist {
    float mean = 0.0f;
    float stddev = 1.0f;         // normal(mean, stddev); stddev 0 means the constant `mean`
    float lo = 0.0f, hi = 0.0f;  // if lo < hi: uniform(lo, hi) instead
    bool operator<(const ValueDist & o) const {
        return std::tie(mean, stddev, lo, hi) < std::tie(o.mean, o.stddev, o.lo, o.hi);
    }
};

class UnitPoolCache;

// Rewrites a tensor's drawn values (rows of n_per_row) before they are quantized: for tensors
// whose structure matters, not only their magnitude.
using ValueShaper = std::function<void(std::vector<float> & values, int64_t n_per_row)>;

class TensorFiller {
public:
    // n_per_row = ne[0]; nelements = total element count.
    TensorFiller(UnitPoolCache & pools, ggml_type type, int64_t n_per_row, int64_t nelements, const ValueDist & dist,
                 uint64_t seed, bool distinct_rows = false, const ValueShaper & shape = nullptr);

    uint64_t nbytes() const { return nbytes_; }
    // Bytes per unit: fill() is called with chunk sizes that are multiples of this.
    uint64_t unit_bytes() const { return unit_bytes_; }
    // Writes the next `n` bytes of the tensor (n a multiple of unit_bytes(), or the rest).
    void fill(uint8_t * dst, uint64_t n);

private:
    uint64_t nbytes_ = 0;
    uint64_t unit_bytes_ = 0;
    uint64_t pos_ = 0;
    std::vector<uint8_t> direct_;  // small tensors: the whole tensor, quantized up front
    const std::vector<uint8_t> * pool_ = nullptr;
    uint32_t pool_units_ = 0;
    uint64_t units_per_row_ = 0;  // set only for distinct rows
    uint64_t rng_state_[4] = {0, 0, 0, 0};
};

// Pools are shared by every tensor with the same type, unit and distribution (e.g. all the
// gate experts of a model), so each is quantized once.
class UnitPoolCache {
public:
    explicit UnitPoolCache(uint64_t seed) : seed_(seed) {}
    const std::vector<uint8_t> & get(ggml_type type, int64_t unit_elems, uint32_t n_units, const ValueDist & dist);

private:
    uint64_t seed_;
    std::map<std::tuple<int, int64_t, uint32_t, ValueDist>, std::unique_ptr<std::vector<uint8_t>>> pools_;
};

// Quantizes `values` (nrows x n_per_row) to `type` with ggml's own quantizers.
std::vector<uint8_t> quantize_values(ggml_type type, const std::vector<float> & values, int64_t n_per_row);

// Draws `n` values of `dist`.
std::vector<float> draw_values(const ValueDist & dist, size_t n, uint64_t seed);

}  // namespace epq
