#include "verify/ref_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace epq::ref {

namespace {

float fp16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            exp = 127 - 15 + 1;
            while ((man & 0x400) == 0) {
                man <<= 1;
                --exp;
            }
            man &= 0x3FF;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_fp16(float f) {  // round to nearest even, as IEEE conversion does
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
    uint32_t man = x & 0x7FFFFF;
    if (((x >> 23) & 0xFF) == 0xFF) {
        return static_cast<uint16_t>(sign | 0x7C00 | (man ? 0x200 : 0));
    }
    if (exp >= 31) {
        return static_cast<uint16_t>(sign | 0x7C00);
    }
    if (exp <= 0) {
        if (exp < -10) {
            return static_cast<uint16_t>(sign);
        }
        man |= 0x800000;
        const uint32_t shift = static_cast<uint32_t>(14 - exp);
        uint32_t h = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) {
            ++h;
        }
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
    const uint32_t rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) {
        ++h;
    }
    return static_cast<uint16_t>(sign | h);
}

float bf16_to_f32(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) {
        return static_cast<uint16_t>((x >> 16) | 64);
    }
    return static_cast<uint16_t>((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

uint16_t u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

float e8m0_half(uint8_t e) {  // 2^(e-128): half the E8M0 scale, pairing with doubled FP4 values
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

const int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// K-quant 6-bit scale and min for sub-block j of a 12-byte packed array.
void scale_min_k4(int j, const uint8_t * q, uint8_t * d, uint8_t * m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void block_q4_0(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b));
    const uint8_t * qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
}

void block_q4_1(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b)), m = fp16_to_f32(u16(b + 2));
    const uint8_t * qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
        y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
}

void block_q5_0(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b));
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const uint8_t * qs = b + 6;
    for (int j = 0; j < 16; ++j) {
        const uint8_t h0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
        const uint8_t h1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
        y[j] = static_cast<float>(((qs[j] & 0x0F) | h0) - 16) * d;
        y[j + 16] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
    }
}

void block_q5_1(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b)), m = fp16_to_f32(u16(b + 2));
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    const uint8_t * qs = b + 8;
    for (int j = 0; j < 16; ++j) {
        const uint8_t h0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
        const uint8_t h1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
        y[j] = static_cast<float>((qs[j] & 0x0F) | h0) * d + m;
        y[j + 16] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
    }
}

void block_q8_0(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b));
    for (int j = 0; j < 32; ++j) {
        y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    }
}

void block_q2_k(const uint8_t * b, float * y) {
    const uint8_t * scales = b;
    const uint8_t * q = b + 16;
    const float d = fp16_to_f32(u16(b + 80)), dmin = fp16_to_f32(u16(b + 82));
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            uint8_t sc = scales[is++];
            float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
            for (int l = 0; l < 16; ++l) {
                *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l] >> shift) & 3)) - ml;
            }
            sc = scales[is++];
            dl = d * static_cast<float>(sc & 0xF);
            ml = dmin * static_cast<float>(sc >> 4);
            for (int l = 0; l < 16; ++l) {
                *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3)) - ml;
            }
            shift += 2;
        }
        q += 32;
    }
}

void block_q3_k(const uint8_t * b, float * y) {
    const uint8_t * hm = b;
    const uint8_t * q = b + 32;
    const float d_all = fp16_to_f32(u16(b + 108));
    uint32_t aux[4];
    std::memcpy(aux, b + 96, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            float dl = d_all * static_cast<float>(scales[is++] - 32);
            for (int l = 0; l < 16; ++l) {
                *y++ = dl * static_cast<float>(static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            }
            dl = d_all * static_cast<float>(scales[is++] - 32);
            for (int l = 0; l < 16; ++l) {
                *y++ =
                    dl * static_cast<float>(static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            }
            shift += 2;
            m = static_cast<uint8_t>(m << 1);
        }
        q += 32;
    }
}

void block_q4_k(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b)), dmin = fp16_to_f32(u16(b + 2));
    const uint8_t * scales = b + 4;
    const uint8_t * q = b + 16;
    int is = 0;
    for (int j = 0; j < 256; j += 64) {
        uint8_t sc, mn;
        scale_min_k4(is + 0, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l) {
            *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
        }
        for (int l = 0; l < 32; ++l) {
            *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
        q += 32;
        is += 2;
    }
}

void block_q5_k(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b)), dmin = fp16_to_f32(u16(b + 2));
    const uint8_t * scales = b + 4;
    const uint8_t * qh = b + 16;
    const uint8_t * ql = b + 48;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        uint8_t sc, mn;
        scale_min_k4(is + 0, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l) {
            *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        }
        for (int l = 0; l < 32; ++l) {
            *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
        ql += 32;
        is += 2;
        u1 = static_cast<uint8_t>(u1 << 2);
        u2 = static_cast<uint8_t>(u2 << 2);
    }
}

void block_q6_k(const uint8_t * b, float * y) {
    const uint8_t * ql = b;
    const uint8_t * qh = b + 128;
    const int8_t * sc = reinterpret_cast<const int8_t *>(b + 192);
    const float d = fp16_to_f32(u16(b + 208));
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int8_t q1 = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            const int8_t q2 = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            const int8_t q3 = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            const int8_t q4 = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            y[l + 0] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void block_iq4_nl(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b));
    const uint8_t * qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * kIq4nl[qs[j] & 0xf];
        y[j + 16] = d * kIq4nl[qs[j] >> 4];
    }
}

void block_iq4_xs(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b));
    const uint16_t scales_h = u16(b + 2);
    const uint8_t * scales_l = b + 4;
    const uint8_t * qs = b + 8;
    for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
        const float dl = d * static_cast<float>(ls - 32);
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * kIq4nl[qs[j] & 0xf];
            y[j + 16] = dl * kIq4nl[qs[j] >> 4];
        }
        y += 32;
        qs += 16;
    }
}

void block_mxfp4(const uint8_t * b, float * y) {
    const float d = e8m0_half(b[0]);
    const uint8_t * qs = b + 1;
    for (int j = 0; j < 16; ++j) {
        y[j] = kMxfp4[qs[j] & 0x0f] * d;
        y[j + 16] = kMxfp4[qs[j] >> 4] * d;
    }
}

// A byte holding trits (base 3) as a fraction of 256: multiplying by 3^n (mod 256) brings trit
// n to the top, and (q * 3) >> 8 reads it. Values are trit - 1 in {-1, 0, 1}, times d.
float trit(uint8_t byte, int n, float d) {
    static const uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    const auto q = static_cast<uint8_t>(byte * kPow3[n]);
    return static_cast<float>(((q * 3) >> 8) - 1) * d;
}

// TQ1_0: 48 bytes of 5 trits (the first 32 bytes cover 160 values, the next 16 cover 80), then 4
// bytes of 4 trits (16 values), then fp16 d.
void block_tq1_0(const uint8_t * b, float * y) {
    const uint8_t * qs = b;
    const uint8_t * qh = b + 48;
    const float d = fp16_to_f32(u16(b + 52));
    for (int j0 = 0, width = 32; j0 < 48; j0 += width, width = 16) {
        for (int n = 0; n < 5; ++n) {
            for (int m = 0; m < width; ++m) {
                *y++ = trit(qs[j0 + m], n, d);
            }
        }
    }
    for (int n = 0; n < 4; ++n) {
        for (int j = 0; j < 4; ++j) {
            *y++ = trit(qh[j], n, d);
        }
    }
}

// TQ2_0: 64 bytes of four 2-bit codes (value code - 1), each 32-byte half giving 4 runs of 32
// values (bits 0-1 of every byte, then 2-3, ...), then fp16 d.
void block_tq2_0(const uint8_t * b, float * y) {
    const float d = fp16_to_f32(u16(b + 64));
    for (int j = 0; j < 64; j += 32) {
        for (int l = 0; l < 4; ++l) {
            for (int m = 0; m < 32; ++m) {
                *y++ = static_cast<float>(((b[j + m] >> (2 * l)) & 3) - 1) * d;
            }
        }
    }
}

struct Format {
    int type;
    const char * name;
    int values, bytes;
    void (*dequant)(const uint8_t *, float *);
};

const Format kFormats[] = {
    {Q4_0, "q4_0", 32, 18, block_q4_0},       {Q4_1, "q4_1", 32, 20, block_q4_1},
    {Q5_0, "q5_0", 32, 22, block_q5_0},       {Q5_1, "q5_1", 32, 24, block_q5_1},
    {Q8_0, "q8_0", 32, 34, block_q8_0},       {Q2_K, "q2_K", 256, 84, block_q2_k},
    {Q3_K, "q3_K", 256, 110, block_q3_k},     {Q4_K, "q4_K", 256, 144, block_q4_k},
    {Q5_K, "q5_K", 256, 176, block_q5_k},     {Q6_K, "q6_K", 256, 210, block_q6_k},
    {IQ4_NL, "iq4_nl", 32, 18, block_iq4_nl}, {IQ4_XS, "iq4_xs", 256, 136, block_iq4_xs},
    {MXFP4, "mxfp4", 32, 17, block_mxfp4},    {TQ1_0, "tq1_0", 256, 54, block_tq1_0},
    {TQ2_0, "tq2_0", 256, 66, block_tq2_0},
};

// Names of the GGUF types the reference has no definition for (the grid-based i-quants need
// ggml's large codebooks), so that reports can say which one.
const char * unsupported_name(int type) {
    switch (type) {
        case 16: return "iq2_xxs";
        case 17: return "iq2_xs";
        case 18: return "iq3_xxs";
        case 19: return "iq1_s";
        case 21: return "iq3_s";
        case 22: return "iq2_s";
        case 29: return "iq1_m";
        case 40: return "nvfp4";
        case 41: return "q1_0";
        case 42: return "q2_0";
        default: return nullptr;
    }
}

const Format * find(int type) {
    for (const auto & f : kFormats) {
        if (f.type == type) {
            return &f;
        }
    }
    return nullptr;
}

}  // namespace

bool supported(int type) {
    return find(type) || type == F32 || type == F16 || type == BF16;
}

std::string type_name(int type) {
    if (const Format * f = find(type)) {
        return f->name;
    }
    switch (type) {
        case F32: return "f32";
        case F16: return "f16";
        case BF16: return "bf16";
        default: break;
    }
    if (const char * n = unsupported_name(type)) {
        return n;
    }
    return "type " + std::to_string(type);
}

int block_values(int type) {
    const Format * f = find(type);
    return f ? f->values : 1;
}

int block_bytes(int type) {
    if (const Format * f = find(type)) {
        return f->bytes;
    }
    return type == F32 ? 4 : 2;
}

void dequantize(int type, const uint8_t * src, float * dst, int64_t n) {
    if (type == F32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * 4);
        return;
    }
    if (type == F16 || type == BF16) {
        for (int64_t i = 0; i < n; ++i) {
            dst[i] = type == F16 ? fp16_to_f32(u16(src + 2 * i)) : bf16_to_f32(u16(src + 2 * i));
        }
        return;
    }
    const Format * f = find(type);
    if (!f) {
        throw std::runtime_error("no reference for " + type_name(type));
    }
    for (int64_t i = 0; i < n / f->values; ++i) {
        f->dequant(src + i * f->bytes, dst + i * f->values);
    }
}

int activation_type(int weight_type) {
    switch (weight_type) {
        case Q4_0:
        case Q5_0:
        case Q8_0:
        case IQ4_NL:
        case MXFP4: return Q8_0;
        case Q4_1:
        case Q5_1: return Q8_1;
        case Q2_K:
        case Q3_K:
        case Q4_K:
        case Q5_K:
        case Q6_K:
        case IQ4_XS:
        case TQ1_0:
        case TQ2_0: return Q8_K;
        case F16: return F16;
        case BF16: return BF16;
        default: return F32;
    }
}

namespace {

// Rounds to the nearest integer, ties either to even (the SIMD conversions) or away from zero
// (roundf, ggml's scalar code). Written out so that it does not depend on the FP environment.
float round_code(float v, bool half_to_even) {
    const float away = std::round(v);
    if (!half_to_even || std::fabs(v - std::trunc(v)) != 0.5f) {
        return away;
    }
    return 2.0f * std::round(v / 2.0f);  // v / 2 is exact here, and its nearest integer is half the even one
}

void put_u16(uint8_t * p, uint16_t v) {
    std::memcpy(p, &v, 2);
}

// One Q8_0/Q8_1 block of 32: d = amax / 127 and the int8 codes, as the backend computes them.
float q8_block(const float * x, const Q8Rounding & r, int8_t * q) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs(x[j]));
    }
    const float d = amax / 127.0f;
    float id = 0.0f;
    if (r.scale_127_over_amax) {
        id = amax != 0.0f ? 127.0f / amax : 0.0f;
    } else {
        id = d != 0.0f ? 1.0f / d : 0.0f;
    }
    for (int j = 0; j < 32; ++j) {
        // The SIMD pack instructions saturate to int8; in range either way, but say so.
        q[j] = static_cast<int8_t>(std::clamp(round_code(x[j] * id, r.half_to_even), -128.0f, 127.0f));
    }
    return d;
}

// Q8_0 (34-byte blocks: fp16 d, 32 codes) or Q8_1 (36: fp16 d, fp16 s, 32 codes).
void quantize_q8_0_1(bool with_sum, const float * x, int64_t n, const Q8Rounding & r, QuantizedActivation * out) {
    const size_t block = with_sum ? 36 : 34, qs = with_sum ? 4 : 2;
    out->bytes.assign(static_cast<size_t>(n / 32) * block, 0);
    for (int64_t b = 0; b < n / 32; ++b) {
        uint8_t * y = out->bytes.data() + static_cast<size_t>(b) * block;
        int8_t q[32];
        const float d = q8_block(x + b * 32, r, q);
        std::memcpy(y + qs, q, 32);
        put_u16(y, f32_to_fp16(d));
        const float dq = fp16_to_f32(f32_to_fp16(d));
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            out->values[static_cast<size_t>(b * 32 + j)] = static_cast<double>(q[j]) * dq;
            sum += q[j];
        }
        if (with_sum) {
            // s is the unrounded d times the code sum, in float, then stored as fp16.
            const uint16_t s = f32_to_fp16(d * static_cast<float>(sum));
            put_u16(y + 2, s);
            out->block_sums.push_back(fp16_to_f32(s));
        }
    }
}

// Q8_K (292-byte blocks: float d, 256 codes, 16 int16 sums of 16 codes).
void quantize_q8_k(const float * x, int64_t n, QuantizedActivation * out) {
    out->bytes.assign(static_cast<size_t>(n / 256) * 292, 0);
    for (int64_t b = 0; b < n / 256; ++b) {
        const float * xb = x + b * 256;
        uint8_t * y = out->bytes.data() + static_cast<size_t>(b) * 292;
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < 256; ++j) {
            if (std::fabs(xb[j]) > amax) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        if (amax == 0.0f) {
            continue;  // d = 0 and zero codes (values stay 0)
        }
        // The scale maps the signed extreme to -127 (so the largest code is +-127 exactly).
        const float iscale = -127.0f / max, d = 1.0f / iscale;
        std::memcpy(y, &d, 4);
        for (int j = 0; j < 256; ++j) {
            const int v = std::min(127, static_cast<int>(round_code(iscale * xb[j], true)));
            y[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(v));
            out->values[static_cast<size_t>(b * 256 + j)] = static_cast<double>(v) * d;
        }
        for (int g = 0; g < 16; ++g) {
            int16_t sum = 0;
            for (int j = 0; j < 16; ++j) {
                sum = static_cast<int16_t>(sum + static_cast<int8_t>(y[4 + g * 16 + j]));
            }
            std::memcpy(y + 260 + 2 * g, &sum, 2);
        }
    }
}

// F32, F16 or BF16: each value rounded on its own.
void quantize_float(int act, const float * x, int64_t n, QuantizedActivation * out) {
    out->bytes.resize(static_cast<size_t>(n) * (act == F32 ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
        if (act == F32) {
            std::memcpy(out->bytes.data() + 4 * i, x + i, 4);
            out->values[static_cast<size_t>(i)] = x[i];
            continue;
        }
        const uint16_t h = act == F16 ? f32_to_fp16(x[i]) : f32_to_bf16(x[i]);
        put_u16(out->bytes.data() + 2 * i, h);
        out->values[static_cast<size_t>(i)] = act == F16 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
}

}  // namespace

QuantizedActivation quantize_activation(int act, const float * x, int64_t n, const Q8Rounding & rounding) {
    QuantizedActivation out;
    out.type = act;
    out.values.assign(static_cast<size_t>(n), 0.0);
    if (act == F32 || act == F16 || act == BF16) {
        quantize_float(act, x, n, &out);
    } else if (act == Q8_0 || act == Q8_1) {
        quantize_q8_0_1(act == Q8_1, x, n, rounding, &out);
    } else if (act == Q8_K) {
        quantize_q8_k(x, n, &out);
    } else {
        throw std::runtime_error("no reference activation format " + type_name(act));
    }
    return out;
}

float round_to_fp16(float x) {
    return fp16_to_f32(f32_to_fp16(x));
}

double dot_row(int type, const uint8_t * row, const QuantizedActivation & act, int64_t n) {
    std::vector<float> w(static_cast<size_t>(n));
    dequantize(type, row, w.data(), n);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        s += static_cast<double>(w[i]) * act.values[static_cast<size_t>(i)];
    }
    if (act.type == Q8_1 && (type == Q4_1 || type == Q5_1)) {
        // ggml's Q4_1/Q5_1 x Q8_1 dot product is d*d8*sum(q*q8) + m*s per block: the min term
        // uses the stored (fp16) s, not d8 * sum(q8). Swap one for the other.
        const int bytes = block_bytes(type);
        for (int64_t b = 0; b < n / 32; ++b) {
            const double m = fp16_to_f32(u16(row + b * bytes + 2));
            double values = 0.0;
            for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
                values += act.values[static_cast<size_t>(j)];
            }
            s += m * (act.block_sums[static_cast<size_t>(b)] - values);
        }
    }
    return s;
}

}  // namespace epq::ref
