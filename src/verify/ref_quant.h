// An independent scalar reference for GGUF block formats, written from their definitions:
// dequantization of weight blocks and the quantization ggml applies to activations before a
// dot product (Q8_0, Q8_1, Q8_K, F16, BF16). No ggml code is called here; the verify checks
// compare this against ggml.
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
// Quantizes n activations to `act_type` (Q8_0, Q8_1, Q8_K, F16, BF16 or F32) and returns the
// values the dot product will actually see.
std::vector<double> quantize_activation(int act_type, const float * x, int64_t n);

// sum_i w_i * a_i in double, w dequantized from one row of `type`.
double dot_row(int type, const uint8_t * row, const std::vector<double> & act, int64_t n);

}  // namespace epq::ref
