#!/usr/bin/env bash
# Fuzzes epq's GGUF handling (ggml's parser, GgufFile, ExpertIndex, SlotLayout, the inspect
# report and the arena plan: tests/fuzz/fuzz_gguf.cpp) with libFuzzer under ASan + UBSan for
# SECONDS (default 60), starting from the committed seed corpus and dictionary.
#
#   scripts/fuzz.sh [SECONDS]
#
# Builds only the fuzz target, with clang, in build-fuzz/ (its instrumentation differs from
# every other build). Exits non-zero on any finding: a crash, a sanitizer report, a leak, an
# exception other than epq::Error, a broken invariant, an input over the time or memory limits.
# The input that caused it is left in build-fuzz/fuzz-artifacts/ (run the target on it to
# reproduce). The corpus the run grows lives in a scratch directory: tests/fuzz/corpus is
# never modified.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]   (a whole number of seconds, default 60)" >&2
  exit 2
fi
build_dir=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)

install_pkgs() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "fuzz: $1. Install it, then run this again:" >&2
    echo "  sudo apt-get install -y ${*:2}" >&2
    exit 1
  fi
  echo "fuzz: installing ${*:2} ($1)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${@:2}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${@:2}" >/dev/null; }
}

# libFuzzer comes with clang; Debian ships its runtime (and the sanitizers') in
# libclang-rt-N-dev, which clang only recommends, so it is checked by linking a fuzzer.
if ! command -v clang >/dev/null 2>&1 || ! command -v clang++ >/dev/null 2>&1; then
  install_pkgs "clang is missing (libFuzzer needs it)" clang
fi
clang_major=$(clang -dumpversion | cut -d. -f1)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1; then
  install_pkgs "clang cannot link libFuzzer" "libclang-rt-$clang_major-dev"
fi
# Without llvm-symbolizer the sanitizers' stacks are bare addresses.
symbolizer=$(command -v llvm-symbolizer || true)
[[ -n $symbolizer ]] || symbolizer=$(command -v "llvm-symbolizer-$clang_major" || true)
[[ -n $symbolizer || ! -x /usr/lib/llvm-$clang_major/bin/llvm-symbolizer ]] ||
  symbolizer=/usr/lib/llvm-$clang_major/bin/llvm-symbolizer

# The llama.cpp checkout: from the main build's copy of the pinned package when there is one
# (no network), else the configure fetches it with npm as every build does.
cmake_args=()
npm_version=$(sed -n 's/^set(EPQ_LLAMA_NPM_VERSION "\(.*\)")$/\1/p' cmake/llama_pin.cmake)
tarball=build/_deps/node-llama-cpp-$npm_version.tgz
if [[ ! -f $build_dir/CMakeCache.txt && -f $tarball ]]; then
  cmake_args+=("-DEPQ_LLAMA_TARBALL=$PWD/$tarball")
fi

# As in scripts/setup.sh: ggml compiles through ccache when it is installed, with paths taken
# relative to the checkout so a fresh build-fuzz reuses earlier objects.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
start=$SECONDS
mkdir -p "$build_dir"
# RelWithDebInfo: optimised like the real build, with line numbers in the sanitizers' stacks.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DEPQ_FUZZ=ON -DEPQ_BUILD_TESTS=OFF "${cmake_args[@]}" \
  >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log" >&2
  echo "fuzz: cmake configure failed (log: $build_dir/configure.log; scripts/setup.sh installs the other dependencies)" >&2
  exit 1
}
cmake --build "$build_dir" --target fuzz_gguf -j "$jobs" >"$build_dir/build.log" 2>&1 || {
  tail -n 60 "$build_dir/build.log" >&2
  echo "fuzz: build failed (log: $build_dir/build.log)" >&2
  exit 1
}
echo "fuzz: built $build_dir/bin/fuzz_gguf in $((SECONDS - start)) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/epq-fuzz.XXXXXX")
trap 'rm -rf "$probe" "$work"' EXIT
cp tests/fuzz/corpus/* "$work/"
artifacts=$build_dir/fuzz-artifacts
mkdir -p "$artifacts"
log=$build_dir/fuzz.log

# halt_on_error: ggml-base's UBSan checks are compiled recoverable (see tests/fuzz/CMakeLists.txt),
# so a report there ends the run here instead of scrolling past.
ubsan="halt_on_error=1:print_stacktrace=1"
[[ ! -s tests/fuzz/ubsan.supp ]] || ubsan+=":suppressions=$PWD/tests/fuzz/ubsan.supp"
export UBSAN_OPTIONS=$ubsan
export ASAN_OPTIONS=detect_leaks=1
[[ -z $symbolizer ]] || export ASAN_SYMBOLIZER_PATH=$symbolizer UBSAN_SYMBOLIZER_PATH=$symbolizer

echo "fuzz: running for $seconds s (log: $log)"
rc=0
# -max_len 64 KiB: the seeds are below it, and larger inputs only slow the search down (the
# header is what matters). -timeout/-rss_limit_mb: an input that takes seconds or a GiB to
# reject is a finding too.
"$build_dir/bin/fuzz_gguf" "$work" -dict=tests/fuzz/gguf.dict -max_len=65536 \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
if ((rc != 0)); then
  # From the first report on: the sanitizer's or libFuzzer's message and the stack.
  awk '/ERROR: |runtime error|FINDING|deadly signal/ { on = 1 } on && n++ < 80' "$log" >&2
  echo "fuzz: FINDING after ${execs:-?} executions (exit $rc); full log: $log" >&2
  unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  [[ -z $unit ]] || echo "fuzz: reproduce with: $build_dir/bin/fuzz_gguf $unit" >&2
  exit 1
fi
echo "fuzz: ${execs:-?} executions in $seconds s (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?} inputs, no findings"
