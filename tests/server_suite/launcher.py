#!/usr/bin/env python3
"""The server binary llama-server's test suite starts (LLAMA_SERVER_BIN_PATH points here).

The suite names its models with --hf-repo REPO[:TAG] [--hf-file FILE]. This maps them to
-m FILE, the file found in the local Hugging Face cache (LLAMA_CACHE, laid out by
prepare.py), and runs SERVER_SUITE_CMD (the server and its first arguments, shell-quoted) with
every other argument untouched. A repo that is not in the cache is passed on as it is, so the
server reports it missing as it would offline.

Why -m and not the cache alone: both servers resolve --hf-repo from the same cache, but epq
serve sets its pager up from the model path before llama.cpp's server library resolves
--hf-repo, so a model named by repo is served unpaged (see README). A router's children are
started by the server itself, from its cache, and do not come through here.
"""

import os
import re
import shlex
import sys


def cached_files(cache, repo):
    repo_dir = os.path.join(cache, "models--" + repo.replace("/", "--"))
    try:
        with open(os.path.join(repo_dir, "refs", "main")) as f:
            commit = f.read().strip()
    except OSError:
        return None, []
    snap = os.path.join(repo_dir, "snapshots", commit)
    files = []
    for dirpath, _, names in os.walk(snap):
        for n in names:
            files.append(os.path.relpath(os.path.join(dirpath, n), snap))
    return snap, sorted(files)


def is_model(path):
    name = os.path.basename(path)
    return path.endswith(".gguf") and not any(k in name for k in ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"))


def first_split(path):
    m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", path)
    return m is None or int(m.group(1)) == 1


def resolve(cache, repo_tag, hf_file):
    """The file llama.cpp's common/download.cpp would pick (find_best_model), or None."""
    repo, _, tag = repo_tag.partition(":")
    snap, files = cached_files(cache, repo)
    if snap is None:
        return None
    if hf_file:
        return os.path.join(snap, hf_file) if hf_file in files else None
    for t in [tag] if tag else ["Q4_K_M", "Q8_0"]:
        for f in files:
            if is_model(f) and first_split(f) and re.search(re.escape(t) + r"[.-]", f, re.IGNORECASE):
                return os.path.join(snap, f)
    if not tag:
        for f in files:
            if is_model(f) and first_split(f):
                return os.path.join(snap, f)
    return None


def main():
    args = sys.argv[1:]
    repo = hf_file = None
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-hf", "-hfr", "--hf-repo") and i + 1 < len(args):
            repo = args[i + 1]
            i += 2
        elif a in ("-hff", "--hf-file") and i + 1 < len(args):
            hf_file = args[i + 1]
            i += 2
        else:
            rest.append(a)
            i += 1
    path = resolve(os.environ.get("LLAMA_CACHE", "tmp"), repo, hf_file) if repo else None
    if path:
        rest = ["-m", path] + rest
    else:
        rest = args  # nothing to map: exactly what the suite passed
    cmd = shlex.split(os.environ["SERVER_SUITE_CMD"])
    os.execv(cmd[0], cmd + rest)


if __name__ == "__main__":
    main()
