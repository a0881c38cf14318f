#include "synth/tensor_filler.h"

#include "util/rng.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>

namespace epq {

namespace {

// Units hold up to 256 elements: one K-quant super-block, or 8 blocks of a 32-element type.
int64_t unit_elements(ggml_type type, int64_t n_per_row) {
    const int64_t blck = ggml_blck_size(type);
    int64_t u = blck;
    while (u * 2 <= 256 && n_per_row % (u * 2) == 0) {
        u *= 2;
    }
    return u;
}

// The types llama-quantize refuses to write without an importance matrix (its
// tensor_requires_imatrix): ggml's own list plus IQ3_XXS, IQ2_S and IQ1_M, which ggml would
// quantize without one but no real file is made that way.
bool wants_imatrix(ggml_type type) {
    switch (type) {
        case GGML_TYPE_IQ3_XXS:
        case GGML_TYPE_IQ2_XXS:
        case GGML_TYPE_IQ2_XS:
        case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ1_M:
        case GGML_TYPE_IQ1_S: return true;
        default: return ggml_quantize_requires_imatrix(type);
    }
}

uint32_t pool_units_for(int64_t n_units) {
    uint32_t p = 256;
    while (p < 32768 && static_cast<int64_t>(p) * 16 < n_units) {
        p *= 2;
    }
    return p;
}

}  // namespace

std::vector<float> draw_values(const ValueDist & dist, size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (auto & x : v) {
        if (dist.lo < dist.hi) {
            x = static_cast<float>(dist.lo + (dist.hi - dist.lo) * rng.uniform());
        } else if (dist.stddev == 0.0f) {
            x = dist.mean;
        } else {
            x = static_cast<float>(dist.mean + dist.stddev * rng.normal());
        }
    }
    return v;
}

std::vector<uint8_t> quantize_values(ggml_type type, const std::vector<float> & values, int64_t n_per_row) {
    const int64_t nrows = static_cast<int64_t>(values.size()) / n_per_row;
    std::vector<uint8_t> out(ggml_row_size(type, n_per_row) * static_cast<size_t>(nrows));
    if (type == GGML_TYPE_F32) {
        std::memcpy(out.data(), values.data(), out.size());
        return out;
    }
    if (type == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t *>(out.data()),
                              static_cast<int64_t>(values.size()));
        return out;
    }
    if (type == GGML_TYPE_BF16) {
        ggml_fp32_to_bf16_row_ref(values.data(), reinterpret_cast<ggml_bf16_t *>(out.data()),
                                  static_cast<int64_t>(values.size()));
        return out;
    }
    // An imatrix is the per-column mean of the squared activations a weight meets. A synthetic
    // model's matrices read order-one activations with no column favoured (RMS-normed hidden
    // states, attention and SwiGLU outputs of N(0, 1/n) weights), so that mean is about 1 in
    // every column: all ones is what an imatrix run on these weights would measure.
    std::vector<float> imatrix;
    if (wants_imatrix(type)) {
        imatrix.assign(static_cast<size_t>(n_per_row), 1.0f);
    }
    // ggml_quantize_chunk runs ggml_quantize_init (the IQ grids) itself before quantizing.
    ggml_quantize_chunk(type, values.data(), out.data(), 0, nrows, n_per_row,
                        imatrix.empty() ? nullptr : imatrix.data());
    return out;
}

const std::vector<uint8_t> & UnitPoolCache::get(ggml_type type, int64_t unit_elems, uint32_t n_units,
                                                const ValueDist & dist) {
    auto key = std::make_tuple(static_cast<int>(type), unit_elems, n_units, dist);
    auto it = pools_.find(key);
    if (it != pools_.end()) {
        return *it->second;
    }
    uint64_t s = seed_ ^ hash_string(std::string(ggml_type_name(type)) + "/" + std::to_string(unit_elems) + "/" +
                                     std::to_string(n_units));
    s ^= static_cast<uint64_t>(dist.mean * 1e6f) * 0x9e37ULL + static_cast<uint64_t>(dist.stddev * 1e6f) * 0x85ebULL +
         static_cast<uint64_t>(dist.lo * 1e6f) * 0xc2b2ULL + static_cast<uint64_t>(dist.hi * 1e6f) * 0x27d4ULL;
    const auto values = draw_values(dist, static_cast<size_t>(unit_elems) * n_units, s);
    auto pool = std::make_unique<std::vector<uint8_t>>(quantize_values(type, values, unit_elems));
    return *(pools_[key] = std::move(pool));
}

TensorFiller::TensorFiller(UnitPoolCache & pools, ggml_type type, int64_t n_per_row, int64_t nelements,
                           const ValueDist & dist, uint64_t seed, bool distinct_rows, const ValueShaper & shape) {
    if (ggml_type_size(type) == 0 || ggml_blck_size(type) == 0 || n_per_row % ggml_blck_size(type) != 0) {
        throw Error(std::string("cannot store a row of ") + std::to_string(n_per_row) + " values as " +
                    ggml_type_name(type) + " (block size " + std::to_string(ggml_blck_size(type)) + ")");
    }
    nbytes_ = ggml_row_size(type, n_per_row) * static_cast<uint64_t>(nelements / n_per_row);
    const int64_t unit = unit_elements(type, n_per_row);
    const int64_t n_units = nelements / unit;
    const int64_t n_rows = nelements / n_per_row;
    uint32_t pool_units = pool_units_for(n_units);
    if (distinct_rows) {
        pool_units = std::max(pool_units, static_cast<uint32_t>(n_rows));
        units_per_row_ = static_cast<uint64_t>(n_per_row / unit);
    }
    if (shape || n_units <= static_cast<int64_t>(pool_units)) {
        auto values = draw_values(dist, static_cast<size_t>(nelements), seed);
        if (shape) {
            shape(values, n_per_row);
        }
        direct_ = quantize_values(type, values, n_per_row);
        unit_bytes_ = 1;
        return;
    }
    unit_bytes_ = ggml_row_size(type, unit);
    pool_ = &pools.get(type, unit, pool_units, dist);
    pool_units_ = pool_units;
    uint64_t s = seed;
    for (auto & w : rng_state_) {
        w = splitmix64(s);
    }
}

void TensorFiller::fill(uint8_t * dst, uint64_t n) {
    if (!direct_.empty()) {
        std::memcpy(dst, direct_.data() + pos_, n);
        pos_ += n;
        return;
    }
    // xorshift-style stepping inline: this loop is the synthesizer's hot path.
    const uint64_t first_unit = pos_ / unit_bytes_;
    uint64_t s0 = rng_state_[0], s1 = rng_state_[1];
    const uint8_t * pool = pool_->data();
    const uint64_t ub = unit_bytes_;
    for (uint64_t off = 0; off < n; off += ub) {
        uint64_t x = s0;
        const uint64_t y = s1;
        s0 = y;
        x ^= x << 23;
        s1 = x ^ y ^ (x >> 17) ^ (y >> 26);
        const uint64_t r = s1 + y;
        uint64_t pick = ((r >> 32) * pool_units_) >> 32;
        if (units_per_row_ != 0) {
            const uint64_t u = first_unit + off / ub;
            if (u % units_per_row_ == 0) {
                pick = u / units_per_row_;  // row r starts with pool unit r: rows differ
            }
        }
        std::memcpy(dst + off, pool + pick * ub, ub);
    }
    rng_state_[0] = s0;
    rng_state_[1] = s1;
    pos_ += n;
}

}  // namespace epq
