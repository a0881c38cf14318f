// An independent scalar reference for GGUF block formats, written from their definitions:
// dequantization of weight blocks and the quantization ggml's CPU backend applies to activations
// before a dot product (Q8_0, Q8_1, Q8_K, F16, BF16). No ggml code is called here; the verify
// checks and tests compare this against ggml.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epq::ref {

// ggml type ids (stable in the GGUF format).
enum Type : int {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

bool supported(int type);
std::string type_name(int type);
// Values per block and bytes per block.
int block_values(int type);
int block_bytes(int type);

// Dequantizes n values (a multiple of the block size) of `type` from `src`.
void dequantize(int type, const uint8_t * src, float * dst, int64_t n);

// The activation format ggml's CPU dot product pairs with a weight type.
int activation_type(int weight_type);

// The CPU backend's Q8_0/Q8_1 activation quantizer is not ggml's scalar `_ref` one on every
// target (ggml-cpu/arch/*/quants.c): the x86 AVX/AVX2 code multiplies by 127/amax instead of
// 1/(amax/127), and the x86 and ARM SIMD code rounds half to even where the scalar code rounds
// half away from zero. One code differing by one step is enough to fail a bit-exact comparison,
// so the reference takes which of the two definitions the running backend uses. (Q8_K is the
// scalar definition on every target.)
struct Q8Rounding {
    bool scale_127_over_amax = false;
    bool half_to_even = false;
};

// Activations quantized as the CPU backend does before a dot product.
struct QuantizedActivation {
    int type = F32;
    std::vector<uint8_t> bytes;      // ggml's block layout (Q8_0, Q8_1, Q8_K, F16, BF16, F32)
    std::vector<double> values;      // what the dot product multiplies the weights with
    std::vector<double> block_sums;  // Q8_1: each block's stored s (= d * sum of codes, as fp16)
};

// Quantizes n activations to `act_type` (Q8_0, Q8_1, Q8_K, F16, BF16 or F32).
QuantizedActivation quantize_activation(int act_type, const float * x, int64_t n, const Q8Rounding & rounding);

// The dot product of one row of `type` with activations as ggml's vec_dot defines it, in double:
// sum_i w_i * a_i, except that a Q4_1/Q5_1 block's min term uses the activation block's stored
// sum s (m * s) rather than the sum of its values.
double dot_row(int type, const uint8_t * row, const QuantizedActivation & act, int64_t n);

// Half-precision round trips (round to nearest even), for activation ops that go through fp16.
float round_to_fp16(float x);

}  // namespace epq::ref
