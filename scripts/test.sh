#!/usr/bin/env bash
# Quick start 2: set up, build and run the whole test suite, then again under ASan+UBSan, a
# minute of fuzzing, and the threaded parts under TSan. `--fast` skips the sanitizer builds.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
[[ ${1:-} == --fast ]] && fast=1
jobs=$(nproc 2>/dev/null || echo 2)

scripts/setup.sh build
# The OpenAI client tests drive epq serve with the official openai package, pinned by the lockfile.
(cd tests/clients && npm ci --no-audit --no-fund --loglevel=error)
# The chat page is tried in Debian's chromium, driven headless (the test skips without it).
if ! command -v chromium >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "test: installing chromium for the chat page's browser test"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
  else
    echo "test: chromium is missing, so the chat page's browser test will be skipped (sudo apt-get install chromium)"
  fi
fi
# The tests share the models they synthesize through <build>/tests/models (see
# tests/test_util.cpp); each stage removes them when it is done (several GB).
trap 'rm -rf build/tests/models build-asan/tests/models build-tsan/tests/models' EXIT
(cd build && ctest -j "$jobs" --output-on-failure)
rm -rf build/tests/models

if ((fast == 0)); then
  echo "test: ASan + UBSan build"
  scripts/setup.sh build-asan -DEPQ_SANITIZE="address;undefined"
  # Not repeated under ASan, to keep CI's time: the gates that differ only in the expert type
  # (the pager's code is the same for every type; the kernels are llama.cpp's, not instrumented
  # here), the architectures whose pager paths qwen3moe and gpt-oss (biases, its own activation)
  # already take, and the soak.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -j "$jobs" --output-on-failure \
       -E '^(Synth/EveryExpertType|Exactness/TypeGate)\.|^Soak\.|/"?(qwen35moe|olmoe|deepseek2)"?( |$)')
  rm -rf build-asan/tests/models
  echo "test: fuzzing GGUF parsing and the expert index (60 s, libFuzzer)"
  scripts/fuzz.sh 60
  echo "test: TSan build (ggml instrumented): the read pool, the synthesizer, the pager end to end, serve"
  scripts/setup.sh build-tsan -DEPQ_SANITIZE=thread
  # TSan slows ggml ten times over: one model family for the end-to-end tests, every thread of
  # the paging path (read pool, populate, prefetch, read-ahead, ggml's workers, serve's engine).
  # (ctest names parameterized tests "Suite.Test/name  # GetParam() = ...", hence "( |$)".)
  tsan='^(Synth|ReadPool|DirectReader|Mapping|ModelFile)\.|^Pager/PagerPrefill\..*/qwen3moe( |$)'
  tsan+='|^Faults/IoFaults\..*/(eio_once|short_reads)( |$)|^Serve/ServeBatch\..*/qwen3moe( |$)'
  tsan+='|^Serve\.(ClientThatGoesAway|SigtermEnds)'
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
     ctest -j "$jobs" --output-on-failure -R "$tsan")
fi
