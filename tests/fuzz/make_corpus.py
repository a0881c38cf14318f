#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus: small, valid GGUF files shaped like the MoE models epq pages.

    tests/fuzz/make_corpus.py [OUT_DIR]        (default: tests/fuzz/corpus next to this script)

The models `epq synth` makes are tens of MiB (real tokenizers, real widths); a fuzzer mutates
small inputs much faster, so these are written byte by byte with a few tensors of a few KiB
each. Every seed parses with ggml and, except the deliberately dense ones, passes
ExpertIndex::build: the fuzzer starts from inputs that reach the deepest code and mutates
outward. The tensor data is zeros (nothing here reads it). Output is deterministic, so
regenerating the corpus changes no file unless this script changed.

The files carry no .gguf extension: the repository ignores *.gguf (generated models).
"""

import os
import struct
import sys

# gguf_type (ggml/include/gguf.h)
U8, I8, U16, I16, U32, I32, F32V, BOOL, STR, ARR, U64, I64, F64 = range(13)

# ggml_type id -> (block size, bytes per block) (ggml/src/ggml.c type_traits)
F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ2_XXS, BF16, MXFP4 = 0, 1, 2, 8, 12, 14, 16, 30, 39
TYPES = {
    F32: (1, 4),
    F16: (1, 2),
    Q4_0: (32, 18),
    Q8_0: (32, 34),
    Q4_K: (256, 144),
    Q6_K: (256, 210),
    IQ2_XXS: (256, 66),
    BF16: (1, 2),
    MXFP4: (32, 17),
}

SEED_LIMIT = 64 * 1024


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?",
              U64: "<Q", I64: "<q", F64: "<d"}


def value(t, v):
    return gstr(v) if t == STR else struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    return gstr(key) + struct.pack("<I", t) + value(t, v)


def kv_array(key, t, values):
    out = gstr(key) + struct.pack("<IIQ", ARR, t, len(values))
    for v in values:
        out += value(t, v)
    return out


def nbytes(ggml_type, ne):
    blck, size = TYPES[ggml_type]
    assert ne[0] % blck == 0, (ggml_type, ne)
    n = ne[0] // blck * size
    for d in ne[1:]:
        n *= d
    return n


def gguf(kvs, tensors, alignment=32):
    """kvs: encoded key-value pairs; tensors: (name, ggml_type, ne) in file order."""
    header = b"GGUF" + struct.pack("<Iqq", 3, len(tensors), len(kvs))
    header += b"".join(kvs)
    data = b""
    for name, ggml_type, ne in tensors:
        header += gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dq" % len(ne), *ne)
        header += struct.pack("<iQ", ggml_type, len(data))
        data += bytes(nbytes(ggml_type, ne))
        data += bytes(-len(data) % alignment)
    if tensors:
        header += bytes(-len(header) % alignment)
    return header + data


def moe_keys(arch, layers, experts, used, int_type=U32, extra=()):
    return [kv("general.architecture", STR, arch), kv(arch + ".block_count", int_type, layers),
            kv(arch + ".expert_count", int_type, experts), kv(arch + ".expert_used_count", int_type, used),
            kv(arch + ".embedding_length", U32, 32)] + list(extra)


def experts(layer, ggml_type, n_embd, n_ff, n_expert, kinds=("gate", "up", "down")):
    out = []
    for kind in kinds:
        ne = [n_ff, n_embd, n_expert] if kind == "down" else [n_embd, n_ff * (2 if kind == "gate_up" else 1), n_expert]
        if kind == "down" and TYPES[ggml_type][0] > n_ff:
            ne = [n_embd, n_ff, n_expert]  # keep rows a whole number of blocks
        out.append(("blk.%d.ffn_%s_exps.weight" % (layer, kind), ggml_type, ne))
    return out


def seeds():
    s = {}

    # qwen3moe: router, norms, gate/up/down stacks in F32 over two layers.
    t = [("token_embd.weight", F32, [16, 8]), ("output_norm.weight", F32, [16])]
    for il in range(2):
        t += [("blk.%d.attn_norm.weight" % il, F32, [16]), ("blk.%d.ffn_gate_inp.weight" % il, F32, [16, 4])]
        t += experts(il, F32, 16, 8, 4)
    s["qwen3moe-f32-2layers"] = gguf(moe_keys("qwen3moe", 2, 4, 2), t)

    # olmoe with F16 experts and integer keys of other widths (writers differ).
    t = [("token_embd.weight", F16, [16, 8])] + experts(0, F16, 16, 8, 4)
    s["olmoe-f16-u8-keys"] = gguf(moe_keys("olmoe", 1, 4, 2, int_type=U8), t)
    s["olmoe-f16-i64-keys"] = gguf(moe_keys("olmoe", 1, 4, 1, int_type=I64), t)

    # Quantized experts: block types, rows of one block.
    s["qwen3moe-q8_0"] = gguf(moe_keys("qwen3moe", 1, 4, 2), experts(0, Q8_0, 32, 32, 4))
    s["qwen3moe-q4_k"] = gguf(moe_keys("qwen3moe", 1, 2, 1), experts(0, Q4_K, 256, 4, 2))
    s["qwen3moe-iq2_xxs"] = gguf(moe_keys("qwen3moe", 1, 2, 2), experts(0, IQ2_XXS, 256, 2, 2))

    # Two size classes: F32 experts in layer 0, Q6_K gate/up + Q8_0 down in layer 1.
    t = experts(0, F32, 16, 8, 4) + [("blk.1.ffn_gate_exps.weight", Q6_K, [256, 2, 4]),
                                     ("blk.1.ffn_up_exps.weight", Q6_K, [256, 2, 4]),
                                     ("blk.1.ffn_down_exps.weight", Q8_0, [32, 16, 4])]
    s["qwen3moe-two-size-classes"] = gguf(moe_keys("qwen3moe", 2, 4, 3), t)

    # An expert stride of exactly one page (F16 32 x 64): the slot layout keeps the file's
    # in-page offset, the direct-read path; alignment 64 moves the data section.
    t = [("blk.0.ffn_gate_exps.weight", F16, [32, 64, 4]), ("blk.0.ffn_down_exps.weight", F16, [64, 32, 4])]
    s["qwen3moe-page-stride"] = gguf(moe_keys("qwen3moe", 1, 4, 2, extra=[kv("general.alignment", U32, 64)]), t,
                                         alignment=64)

    # gpt-oss: MXFP4 experts with per-expert biases (2-D, dense) and a sliding-window array.
    t = [("token_embd.weight", Q8_0, [32, 4])]
    for il in range(2):
        t += experts(il, MXFP4, 32, 32, 4)
        t += [("blk.%d.ffn_gate_exps.bias" % il, F32, [32, 4]), ("blk.%d.ffn_up_exps.bias" % il, F32, [32, 4]),
              ("blk.%d.ffn_down_exps.bias" % il, F32, [32, 4])]
    extra = [kv_array("gpt-oss.attention.sliding_window_pattern", BOOL, [True, False]),
             kv("gpt-oss.expert_feed_forward_length", U32, 32)]
    s["gpt-oss-mxfp4-biases"] = gguf(moe_keys("gpt-oss", 2, 4, 2, extra=extra), t)

    # Fused gate_up stacks.
    t = experts(0, BF16, 16, 8, 4, kinds=("gate_up", "down"))
    s["fused-gate-up-bf16"] = gguf(moe_keys("qwen3moe", 1, 4, 2), t)

    # qwen35moe: recurrent layers as a BOOL array, a shared expert, experts only in some layers.
    t = [("blk.0.ffn_gate_shexp.weight", F32, [16, 8]), ("blk.0.ssm_a", F32, [4])]
    t += experts(0, F32, 16, 8, 4) + experts(3, Q4_0, 32, 8, 4)
    extra = [kv_array("qwen35moe.attention.recurrent_layers", BOOL, [True, True, True, False]),
             kv("qwen35moe.expert_shared_feed_forward_length", U32, 8)]
    s["qwen35moe-recurrent"] = gguf(moe_keys("qwen35moe", 4, 4, 2, extra=extra), t)

    # deepseek2: a dense leading layer, experts from layer 1, selection bias, a tokenizer.
    t = [("blk.0.ffn_gate.weight", F32, [16, 32]), ("blk.0.ffn_down.weight", F32, [32, 16])]
    t += [("blk.1.exp_probs_b.bias", F32, [4])] + experts(1, F32, 16, 8, 4)
    extra = [kv("deepseek2.leading_dense_block_count", U32, 1), kv("deepseek2.expert_shared_count", U32, 2),
             kv("deepseek2.expert_weights_scale", F32V, 2.5), kv("general.name", STR, "tiny"),
             kv("tokenizer.ggml.model", STR, "gpt2"),
             kv_array("tokenizer.ggml.tokens", STR, ["<s>", "</s>", "a", "b", "ab", " ", "\u00e9"]),
             kv_array("tokenizer.ggml.scores", F32V, [0.0, 0.0, -1.0, -1.0, -2.0, -3.0, -4.0]),
             kv_array("tokenizer.ggml.token_type", I32, [3, 3, 1, 1, 1, 1, 1]),
             kv_array("tokenizer.ggml.merges", STR, ["a b"]), kv("tokenizer.ggml.bos_token_id", U32, 0),
             kv("deepseek2.rope.freq_base", F64, 10000.0), kv("deepseek2.context_length", U64, 4096)]
    s["deepseek2-dense-lead-tokenizer"] = gguf(moe_keys("deepseek2", 2, 4, 2, extra=extra), t)

    # Minimal: one expert stack and the keys; and one with every key type in an array.
    s["minimal-one-stack"] = gguf(moe_keys("llama", 1, 2, 1), [("blk.0.ffn_down_exps.weight", F32, [4, 4, 2])])
    arrays = [kv_array("x.u8", U8, [1, 2]), kv_array("x.i8", I8, [-1]), kv_array("x.u16", U16, [7]),
              kv_array("x.i16", I16, [-7]), kv_array("x.u32", U32, [1]), kv_array("x.i32", I32, [-1]),
              kv_array("x.f32", F32V, [0.5]), kv_array("x.u64", U64, [1]), kv_array("x.i64", I64, [-1]),
              kv_array("x.f64", F64, [0.25]), kv_array("x.empty", STR, []), kv("x.bool", BOOL, True)]
    s["minimal-all-kv-types"] = gguf(moe_keys("llama", 1, 2, 2, extra=arrays),
                                     [("blk.0.ffn_up_exps.weight", F32, [4, 4, 2])])

    # Not MoE: a dense model, one with experts but no expert_count, and one with no tensors.
    t = [("token_embd.weight", F32, [16, 8]), ("blk.0.ffn_up.weight", F32, [16, 8]),
         ("blk.0.ffn_down.weight", F32, [8, 16])]
    s["dense-llama"] = gguf([kv("general.architecture", STR, "llama"), kv("llama.block_count", U32, 1)], t)
    s["moe-without-expert-count"] = gguf([kv("general.architecture", STR, "mixtral")], experts(0, F32, 4, 4, 2))
    s["no-tensors"] = gguf(moe_keys("qwen3moe", 1, 4, 2), [])
    s.update(regressions())
    return s


def header_only(kvs, tensors, tail=0):
    """A GGUF header whose tensor infos say whatever they are given, offsets all 0, then `tail`
    zero bytes: for shapes whose byte size no data could back."""
    out = b"GGUF" + struct.pack("<Iqq", 3, len(tensors), len(kvs)) + b"".join(kvs)
    for name, ggml_type, ne in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + struct.pack("<%dq" % len(ne), *ne)
        out += struct.pack("<iQ", ggml_type, 0)
    return out + bytes(-len(out) % 32) + bytes(tail)


def regressions():
    """Inputs that once got past epq's checks (see the comments): each must now be rejected
    with an epq::Error. Kept in the corpus so every fuzzing run tries them again."""
    s = {}
    # A layer number beyond int: std::stoi threw std::out_of_range out of ExpertIndex::build.
    t = [(n.replace("blk.0.", "blk.99999999999."), ty, ne) for n, ty, ne in experts(0, F32, 4, 4, 2)]
    s["regress-layer-number-beyond-int"] = gguf(moe_keys("qwen3moe", 1, 2, 1), t)
    # expert_count 2^32 + 2 over stacks of 2 experts, expert_used_count 2^32: both were cut to
    # 32 bits, giving an index of 2 experts with 0 used per token.
    keys = moe_keys("qwen3moe", 1, 2**32 + 2, 2**32, int_type=U64)
    s["regress-expert-count-beyond-32-bits"] = gguf(keys, experts(0, F32, 4, 4, 2))
    # An architecture name that is not UTF-8: epq inspect --json threw nlohmann's type_error 316.
    keys = [kv("general.architecture", STR, "QQQQ")] + moe_keys("QQQQ", 1, 2, 1)[1:]
    s["regress-architecture-not-utf8"] = gguf(keys, experts(0, F32, 4, 4, 2)).replace(b"QQQQ", b"qw\xffe")
    # 2^32 x 2^32 x 4 F32: ggml's element count wraps to 0 (signed overflow in ggml_nelements),
    # its overflow check is skipped and the byte size wraps to 0: an expert stack of 0 bytes.
    s["regress-shape-beyond-64-bits"] = header_only(moe_keys("qwen3moe", 1, 4, 2),
                                                    [("blk.0.ffn_gate_exps.weight", F32, [2**32, 2**32, 4])])
    # 2^64 - 32 bytes of experts in a 384-byte file: offset + size wrapped past 2^64 and the
    # truncation check passed.
    s["regress-size-wraps-past-file-end"] = header_only(moe_keys("qwen3moe", 1, 4, 1),
                                                        [("blk.0.ffn_up_exps.weight", F32, [2**59 - 1, 2, 4])], 64)
    # An expert stack of no elements next to a real one: experts of 0 bytes.
    t = [("blk.0.ffn_gate_exps.weight", F32, [0, 8, 4])] + experts(1, F32, 16, 8, 4)
    s["regress-empty-expert-stack"] = gguf(moe_keys("qwen3moe", 2, 4, 2), t)
    # A 60,000-byte key of an invalid type: ggml's error quotes it, and std::regex, matching the
    # message, recursed once per character until the stack overflowed (epq inspect: SIGSEGV).
    key = "tensor '" + "a" * 60000
    s["regress-long-key-in-parse-error"] = (b"GGUF" + struct.pack("<Iqq", 3, 0, 1) + gstr(key) +
                                            struct.pack("<I", 13))
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds().items()):
        assert len(data) <= SEED_LIMIT, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds()), out))


if __name__ == "__main__":
    main()
