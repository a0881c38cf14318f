#!/usr/bin/env bash
# Installs what epq needs from Debian's archive (as root), then configures and builds it.
# The first build fetches the pinned llama.cpp (npm package node-llama-cpp, see
# cmake/llama_pin.cmake) and builds ggml + libllama: about 5 minutes on 2 cores. Later builds
# are incremental.
#
#   scripts/setup.sh [BUILD_DIR] [extra cmake -D options...]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
shift || true

# Command -> Debian package, and packages found by dpkg.
# gnuplot draws `epq bench --plot`; node runs the OpenAI client tests.
declare -A cmd_pkg=([cmake]=cmake [g++]=g++ [make]=make [git]=git [npm]=npm [gnuplot]=gnuplot-nox [ccache]=ccache)
lib_pkgs=(libgtest-dev libcli11-dev)
# llama-server's own test suite (tests/server_suite/run.sh): pytest and what the suite imports
# (its requirements.txt, less openai, which Debian does not package).
lib_pkgs+=(python3-pytest python3-pytest-xdist python3-pytest-timeout python3-requests python3-aiohttp
           python3-numpy python3-prometheus-client python3-filelock python3-wget)

missing=()
for cmd in "${!cmd_pkg[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${cmd_pkg[$cmd]}")
done
for pkg in "${lib_pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages. Install them, then run this again:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
# llama.cpp compiles through ccache when it is installed. Address and undefined-behaviour
# sanitizers instrument epq's own code only, so llama.cpp is built the same way there as in a
# plain build and, with paths taken relative to the checkout, reuses the first build's objects.
# A thread-sanitizer build also instruments ggml's CPU backend and builds it without OpenMP
# (cmake/llama_cpp.cmake): ggml compiles once more, libllama comes from the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
mkdir -p "$build_dir"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log" >&2
  echo "setup: cmake configure failed (log: $build_dir/configure.log)" >&2
  exit 1
}
echo "setup: building in $build_dir with $jobs jobs (the first build compiles llama.cpp: ~5 min)"
cmake --build "$build_dir" -j "$jobs" 2>&1 | grep -E "error|warning:|Error|\[100%\]" || true
test "${PIPESTATUS[0]}" -eq 0 || { echo "setup: build failed" >&2; exit 1; }
test -x "$build_dir/bin/epq" || { echo "setup: build failed: $build_dir/bin/epq missing" >&2; exit 1; }
echo "setup: built $build_dir/bin/epq"
