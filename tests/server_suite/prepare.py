#!/usr/bin/env python3
"""Lays out what llama-server's own test suite needs, with no network: synthetic MoE models in
place of the Hugging Face models it asks for, in a local Hugging Face cache.

  prepare.py models EPQ WORK            synthesize the models once into WORK/models
  prepare.py tree   TREE WORK/RUN       a copy of the suite (tools/server/tests) to run in
  prepare.py cache  WORK/RUN            RUN/hf-cache: each repo the suite names, its files
                                        linked to the models

The suite starts every server with --hf-repo/--hf-file and, for its router tests, lists and
loads models from the cache (LLAMA_CACHE). llama.cpp reads the cache as common/hf-cache.cpp
lays it out:

  models--OWNER--NAME/refs/main                 a 40-hex commit
  models--OWNER--NAME/snapshots/COMMIT/FILE     a link to ../../blobs/BLOB
  models--OWNER--NAME/blobs/BLOB                here a link to the synthesized model

Online, llama.cpp first asks the hub for the repo's files and falls back to the cache when that
fails; with an --hf-repo file already in the cache it does not download (download.cpp skips
the ETag check for hub files). The router's DELETE /models removes snapshot links and the blobs
they point to: blobs are links of their own, so the models are never deleted, and each run gets
a fresh cache.

A router lists a cached model as REPO:TAG, the tag taken from the file name ("-F32.gguf"), so
the names keep the tags the suite uses ("ggml-org/test-model-stories260K:F32").
"""

import hashlib
import os
import shutil
import subprocess
import sys

# Every model the suite downloads, mapped to a synthetic MoE model: (synth arguments, note).
# Architectures differ between them so that the suite runs the pager over several. The
# vocabularies are those of the pinned tree (models/ggml-vocab-*.gguf).
MODELS = {
    # tinyllama2 (most tests): the suite checks BOS id 1, as in the llama SPM vocabulary.
    "qwen3moe-spm": ["--preset", "tiny-qwen3moe", "--vocab", "llama-spm"],
    # tinyllama_infill: /infill needs the FIM tokens, which DeepSeek Coder's vocabulary has.
    "deepseek2-fim": ["--preset", "tiny-deepseek2", "--vocab", "deepseek-coder"],
    # stories15m_moe (speculative decoding, LoRA): the same vocabulary as its draft.
    "olmoe-spm": ["--preset", "tiny-olmoe", "--vocab", "llama-spm"],
    # the draft model of test_speculative.py (downloaded by the suite into tests/tmp)
    "qwen3moe-spm-draft": ["--preset", "tiny-qwen3moe", "--vocab", "llama-spm", "--seed", "7"],
    # tinygemma3 (router tests): a hybrid recurrent model (context checkpoints).
    "qwen35moe": ["--preset", "tiny-qwen35moe"],
    # the split model of test_basic.py: cut into three files below.
    "gpt-oss-spm": ["--preset", "tiny-gpt-oss", "--vocab", "llama-spm"],
}

# (repo, file in the repo, model). The embedding and reranking models (BERT, Jina) and the
# vision model (Gemma 3 with its projector) have no MoE counterpart: they get a MoE decoder
# (mean-pooled for embeddings, no projector), and the tests that need more fail on stock
# llama-server as well.
REPOS = [
    ("ggml-org/test-model-stories260K", "stories260K-F32.gguf", "qwen3moe-spm"),
    ("ggml-org/test-model-stories260K-infill", "stories260K-infill-F32.gguf", "deepseek2-fim"),
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf", "olmoe-spm"),
    ("ggml-org/tinygemma3-GGUF", "tinygemma3-Q8_0.gguf", "qwen35moe"),
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf", "qwen3moe-spm-mean"),
    ("ggml-org/models", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf", "qwen3moe-spm"),
] + [
    ("ggml-org/models", f"tinyllamas/split/stories15M-q8_0-{i:05d}-of-00003.gguf", f"gpt-oss-spm-{i:05d}-of-00003")
    for i in (1, 2, 3)
]

# Files the suite fetches with download_file() into tests/tmp/NAME when they are not there.
DOWNLOADS = {"stories15M-q4_0.gguf": "qwen3moe-spm-draft"}


def model_path(work, name):
    return os.path.join(work, "models", name + ".gguf")


def synthesize(epq, work):
    os.makedirs(os.path.join(work, "models"), exist_ok=True)
    for name, args in MODELS.items():
        out = model_path(work, name)
        stamp = out + ".args"
        want = " ".join(args)
        if os.path.exists(out) and os.path.exists(stamp) and open(stamp).read() == want:
            continue
        subprocess.run([epq, "synth", *args, "-q", "-o", out], check=True)
        with open(stamp, "w") as f:
            f.write(want)
    split_gguf(model_path(work, "gpt-oss-spm"), 3)
    # the embedding model pools (mean), as BERT does: a decoder without pooling_type serves
    # /v1/embeddings only per token
    src, dst = model_path(work, "qwen3moe-spm"), model_path(work, "qwen3moe-spm-mean")
    if not os.path.exists(dst) or os.path.getmtime(dst) < os.path.getmtime(src):
        copy_gguf(src, dst, {"qwen3moe.pooling_type": 1})


def copy_gguf(src, dst, extra_kv=None, split=1):
    """Copies a GGUF with gguf-py (the pinned tree's): extra_kv added to its metadata (uint32
    values), and with split > 1 cut into that many files as llama-gguf-split does
    (split.no/count/tensors.count, the metadata in the first file: DST-0000i-of-0000n.gguf)."""
    import gguf  # the tree's gguf-py (PYTHONPATH, set by run.sh)

    reader = gguf.GGUFReader(src)
    per_file = (len(reader.tensors) + split - 1) // split if split > 1 else 0
    writer = gguf.GGUFWriter(dst, arch=None, split_max_tensors=per_file)
    writer.kv_data[0].clear()  # the constructor's architecture: copied below with the rest
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for key, value in (extra_kv or {}).items():
        writer.add_key_value(key, value, gguf.GGUFValueType.UINT32)
    for t in reader.tensors:
        # the file's bytes and type (as gguf-py's own gguf_new_metadata.py copies tensors)
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def split_gguf(path, n):
    stem = path[: -len(".gguf")]
    outs = [f"{stem}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    if all(os.path.exists(o) and os.path.getmtime(o) >= os.path.getmtime(path) for o in outs):
        return
    copy_gguf(path, path, split=n)  # the writer names the files DST-0000i-of-0000n.gguf
    assert all(os.path.exists(o) for o in outs), outs


def link(target, at):
    os.makedirs(os.path.dirname(at), exist_ok=True)
    if os.path.lexists(at):
        os.remove(at)
    os.symlink(target, at)


def make_cache(work, run):
    cache = os.path.join(run, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    for repo, file, model in REPOS:
        repo_dir = os.path.join(cache, "models--" + repo.replace("/", "--"))
        commit = hashlib.sha1(repo.encode()).hexdigest()
        os.makedirs(os.path.join(repo_dir, "refs"), exist_ok=True)
        with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
            f.write(commit)
        blob = hashlib.sha256((repo + "/" + file).encode()).hexdigest()
        link(os.path.abspath(model_path(work, model)), os.path.join(repo_dir, "blobs", blob))
        snap = os.path.join(repo_dir, "snapshots", commit, file)
        link(os.path.relpath(os.path.join(repo_dir, "blobs", blob), os.path.dirname(snap)), snap)
    print(cache)


def copy_tree(tree, work, run):
    """RUN/tree: the suite's directory copied (it writes into tests/tmp), and what its tests reach
    by relative path from there (../../../models/templates, ../../../tools/mtmd/test-1.jpeg)."""
    tree = os.path.abspath(tree)
    root = os.path.join(run, "tree")
    shutil.rmtree(root, ignore_errors=True)
    tests = os.path.join(root, "tools", "server", "tests")
    shutil.copytree(os.path.join(tree, "tools", "server", "tests"), tests,
                    ignore=shutil.ignore_patterns("tmp", "__pycache__", ".pytest_cache"))
    link(os.path.join(tree, "models"), os.path.join(root, "models"))
    # a copy, not a link: the server refuses a media file whose real path leaves --media-path
    os.makedirs(os.path.join(root, "tools", "mtmd"), exist_ok=True)
    shutil.copy(os.path.join(tree, "tools", "mtmd", "test-1.jpeg"), os.path.join(root, "tools", "mtmd"))
    os.makedirs(os.path.join(tests, "tmp"), exist_ok=True)
    for name, model in DOWNLOADS.items():
        link(os.path.abspath(model_path(work, model)), os.path.join(tests, "tmp", name))
    print(tests)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "models":
        synthesize(sys.argv[2], sys.argv[3])
    elif cmd == "tree":
        copy_tree(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "cache":
        make_cache(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")
