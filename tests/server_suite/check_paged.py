#!/usr/bin/env python3
"""Does epq serve page the suite's models? A suite run that served them unpaged would only test
llama.cpp. Run from the suite's directory (its utils.py), with the suite's environment.

1. The suite's own tinyllama2 preset (through launcher.py), one completion, then the pager's
   counters at /epq/stats: the model must be paged and experts read. Exit 1 if not.
2. A router (the suite's router preset) loading that model from the cache: its child, started
   with --hf-repo, must page it too (it says so on its log). Exit 1 if not.
"""

import os
import sys
import time

sys.path.insert(0, os.getcwd())  # the suite's directory
from utils import ServerPreset  # noqa: E402

MODEL = "ggml-org/test-model-stories260K:F32"


def say(line):
    print("server suite: " + line, file=sys.stderr)


def single():
    server = ServerPreset.tinyllama2()
    server.start()
    try:
        server.make_request("POST", "/completion", data={"prompt": "Hello", "n_predict": 8})
        stats = server.make_request("GET", "/epq/stats").body
    finally:
        server.stop()
    pager = stats.get("pager", {})
    say(f"epq pager check: paged={stats.get('paged')} bytes_read={pager.get('bytes_read')} "
        f"evictions={pager.get('evictions')} {stats.get('not_paged', '')}".rstrip())
    return bool(stats.get("paged")) and pager.get("bytes_read", 0) > 0


def router():
    server = ServerPreset.router()
    server.log_path = os.path.abspath("router-check.log")
    server.start()
    try:
        server.make_request("POST", "/models/load", data={"model": MODEL})
        deadline = time.time() + 60
        while time.time() < deadline:
            models = server.make_request("GET", "/models").body.get("data", [])
            if any(m["id"] == MODEL and m["status"]["value"] == "loaded" for m in models):
                break
            time.sleep(0.1)
    finally:
        server.stop()
    # a paged model's child says so on its log, which the router prefixes with the child's port
    paged = any("epq: " in line and "of experts paged" in line for line in open(server.log_path, errors="replace"))
    say(f"epq router check: the router's child for {MODEL} is " + ("paged" if paged else "NOT paged"))
    return paged


if __name__ == "__main__":
    ok = single()
    ok = router() and ok
    sys.exit(0 if ok else 1)
