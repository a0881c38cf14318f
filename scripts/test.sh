#!/usr/bin/env bash
# Quick start 2: set up, build and run the whole test suite, then the sanitizer stages (ASan +
# UBSan, a minute of fuzzing, TSan; see "Sanitizer stages" in the README for what each runs and
# why). `--fast` skips them. Every stage's wall time is printed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
[[ ${1:-} == --fast ]] && fast=1
jobs=$(nproc 2>/dev/null || echo 2)

run_start=$SECONDS
stage_times=()
stage_name="" stage_start=0
# stage NAME COMMAND...: runs COMMAND as one stage and records how long it took. A failing
# command ends the script (set -e holds inside COMMAND too); `finish` then records the stage.
stage() {
  stage_name=$1 stage_start=$SECONDS
  shift
  echo "test: -- $stage_name"
  "$@"
  stage_times+=("$(printf '%-34s %6d s' "$stage_name" $((SECONDS - stage_start)))")
  stage_name=""
}
finish() {
  local rc=$?
  if [[ -n $stage_name ]]; then
    stage_times+=("$(printf '%-34s %6d s  FAILED' "$stage_name" $((SECONDS - stage_start)))")
  fi
  echo "test: stage times"
  for t in "${stage_times[@]}"; do
    echo "test:   $t"
  done
  echo "test:   $(printf '%-34s %6d s' total $((SECONDS - run_start)))"
  # The tests share the models they synthesize through <build>/tests/models (see
  # tests/test_util.cpp); they are removed when the run ends (several GB).
  rm -rf build/tests/models build-asan/tests/models build-tsan/tests/models build-vulkan/tests/models
  exit "$rc"
}
trap finish EXIT

# install_tool COMMAND PACKAGE TEST: installs PACKAGE from Debian's archive when COMMAND is
# missing (as root); otherwise says that TEST will be skipped.
install_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [[ $(id -u) -eq 0 ]]; then
    echo "test: installing $2 for $3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
  else
    echo "test: $1 is missing, so $3 will be skipped (sudo apt-get install $2)"
  fi
}

install_test_tools() {
  # The client tests drive epq serve with the openai, Anthropic and Vercel AI SDKs and puppeteer-core,
  # pinned by the lockfile.
  (cd tests/clients && npm ci --no-audit --no-fund --loglevel=error)
  # The replica test puts HAProxy in front of two servers (it skips without it).
  install_tool haproxy haproxy "the replica test"
  # llama.cpp's web UI and the pager's page are tried in Debian's chromium, driven headless (the test skips without it).
  install_tool chromium chromium "the web page's browser test"
}

regular_tests() {
  (cd build && ctest -j "$jobs" --output-on-failure --no-tests=error)
  rm -rf build/tests/models
}

# ASan + UBSan instrument epq's own code (llama.cpp is built as in the regular build, so ccache
# serves it). They run the tests of what epq owns in memory, threads and parsing: bad and fuzzed
# files, split files (every shard indexed and read, missing and foreign shards), MTP layers,
# 1 TB-class headers, the expert index, command lines and traces; the arena, mappings, the read
# pool and direct reads, I/O faults and a model file changed under the run; the pager end to end (chains,
# scratch, read-ahead, prefetch, repacking, both layouts) on qwen3moe and gpt-oss (biases, its
# own activation) and the sampled architectures of the gate; the verify checks; epq serve's own
# parts (its flags, the memory budget, the pager's routes, router children) with llama.cpp's
# server answering every API beside stock. The rest differ from these only in what llama.cpp
# computes (every expert type, every architecture, the synthesizer's quantizers), which ASan
# does not instrument here, and run in the regular stage.
asan_tests() {
  # (CMake's regular expressions allow only 9 groups, so the alternatives are spelled out; a
  # parameterized test's name goes on with "  # GetParam() = ...", hence a space after the parameter.)
  local asan='^BadFiles\.'
  asan+='|^ExpertIndex\.'
  asan+='|^Cli\.'
  asan+='|^SimTest\.'
  asan+='|^Simulate\.'
  asan+='|^SimReport\.'
  asan+='|^RoutingStats\.'
  asan+='|^ByteSize\.'
  asan+='|^ArenaPlan\.'
  asan+='|^SlotArena\.'
  asan+='|^ReplacementPolicy\.'
  asan+='|^RouteTrace\.'
  asan+='|^RoutingScript\.'
  asan+='|^RepackedExpertsBadFile\.(CutShort|NotOneAtAll|DamagedHeader|BytesThat)'
  asan+='|^Mapping\.'
  asan+='|^DirectReader\.'
  asan+='|^ReadPool\.'
  asan+='|^PrefetchAccount\.'
  asan+='|^ExpertActivity\.'
  asan+='|^MemoryBudget\.'
  asan+='|^ModelFile\.'
  asan+='|^PagerBadInput\.'
  asan+='|^VerifyExperts\.'
  asan+='|^Synth\.'
  asan+='|^Prefetch\.'
  asan+='|^Trace\.'
  asan+='|^Replay\.'
  asan+='|^KernelPaths\.'
  asan+='|^ReleaseBinary\.'
  asan+='|^Faults/IoFaults\.'
  asan+='|^Verify/VerifyFault\.'
  asan+='|^Verify/RefFormat\.'
  asan+='|^Pager/PagerGate\..*/gpt_oss '
  asan+='|^Pager/PagerPrefill\..*/qwen3moe '
  asan+='|^Pager/PagerPrefill\..*/gpt_oss '
  asan+='|^Memory/PagerScratch\..*/qwen3moe '
  asan+='|^Memory/PagerScratch\..*/gpt_oss '
  asan+='|^Verify/VerifyAll\..*/qwen3moe '
  asan+='|^Exactness/ArchGate\..*/gpt_oss '
  asan+='|^Exactness/ArchGate\..*/deepseek4 '
  asan+='|^Exactness/ArchGate\..*/llama4 '
  asan+='|^Exactness/ArchGate\..*/arctic '
  asan+='|^Exactness/ArchGate\..*/paddleocr '
  asan+='|^Exactness/TypeGate\..*/q4_K '
  asan+='|^Exactness/TypeGate\..*/iq4_xs '
  asan+='|^Exactness/TypeGate\..*/mxfp4 '
  asan+='|^Batch/BatchExact\..*/qwen35moe '
  asan+='|^ServeArgs\.'
  asan+='|^ServeBudget\.'
  asan+='|^Serve\.PagerViewBeside'
  asan+='|^Serve\.BadStarts'
  asan+='|^Serve\.RouterMode'
  asan+='|^Serve/ServeIdentity\..*/nr '
  asan+='|^Serve\.ExpertReadErrors'
  asan+='|^Serve\.GatedRequests'
  asan+='|^Serve\.ReadBoundSteps'
  asan+='|^Stream(Gate|Tuner)\.'
  asan+='|^SplitModel\.'
  asan+='|^DownloadedFileMtp\.'
  asan+='|^DownloadedFileScale\.'
  asan+='|^LayerSplit\.'
  asan+='|^RpcRun\.'
  asan+='|^Rpc/RpcSplit\..*/gpt_oss '
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/../tests/lsan.supp" UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -j "$jobs" --output-on-failure --no-tests=error -R "$asan")
  rm -rf build-asan/tests/models
}

# TSan instruments epq's code and ggml's CPU backend (its workers run beside the pager's
# threads) and slows that backend ten times over: one model family for the end-to-end tests,
# every thread of the paging path (read pool, populate, prefetch, read-ahead, ggml's workers,
# and llama-server's HTTP threads reading the pager's statistics while it computes).
# (ctest names parameterized tests "Suite.Test/name  # GetParam() = ...", hence "( |$)".)
tsan_tests() {
  local tsan='^(Synth|ReadPool|DirectReader|Mapping|ModelFile|StreamGate)\.|^Pager/PagerPrefill\..*/qwen3moe( |$)'
  tsan+='|^Faults/IoFaults\..*/(eio_once|short_reads)( |$)'
  tsan+='|^Serve\.PagerViewBeside'
  tsan+='|^RepackedExpertsBadFile\.CutShort'
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/../tests/tsan.supp" \
     ctest -j "$jobs" --output-on-failure --no-tests=error -R "$tsan")
  rm -rf build-tsan/tests/models
}

# The pager beside a GPU: llama.cpp's Vulkan backend (build-vulkan/), tested on Mesa's software
# Vulkan device (lavapipe) against stock llama.cpp with the same split (tests/test_devices.cpp).
# Where its packages cannot be installed (not root), the stage says so and is skipped.
vulkan_build() {
  if [[ $(id -u) -ne 0 ]] && ! dpkg -s libvulkan-dev spirv-headers mesa-vulkan-drivers >/dev/null 2>&1; then
    echo "test: SKIPPED the Vulkan stage: it needs libvulkan-dev spirv-headers mesa-vulkan-drivers (sudo apt-get install)"
    vulkan_skipped=1
    return 0
  fi
  scripts/setup.sh --vulkan build-vulkan
}
vulkan_tests() {
  if ((vulkan_skipped)); then
    echo "test: SKIPPED the Vulkan tests (no Vulkan build)"
    return 0
  fi
  (cd build-vulkan && GGML_VK_VISIBLE_DEVICES=0 ctest -j "$jobs" --output-on-failure --no-tests=error -R '^(Devices/)?GpuHybrid')
  rm -rf build-vulkan/tests/models
}
vulkan_skipped=0

stage "setup and build" scripts/setup.sh build
stage "test tools (npm, chromium, haproxy)" install_test_tools
stage "regular tests" regular_tests

if ((fast == 0)); then
  stage "ASan + UBSan build" scripts/setup.sh build-asan -DEPQ_SANITIZE="address;undefined"
  stage "ASan + UBSan tests" asan_tests
  stage "fuzzing (60 s, libFuzzer)" scripts/fuzz.sh 60
  stage "TSan build (ggml-cpu instrumented)" scripts/setup.sh build-tsan -DEPQ_SANITIZE=thread
  stage "TSan tests" tsan_tests
  stage "Vulkan build (llama.cpp's backend)" vulkan_build
  stage "Vulkan tests (lavapipe)" vulkan_tests
fi
