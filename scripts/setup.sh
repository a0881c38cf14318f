#!/usr/bin/env bash
# Installs what epq needs from Debian's archive (as root), then configures and builds it.
# The first build fetches the pinned llama.cpp (npm package node-llama-cpp, see
# cmake/llama_pin.cmake) and builds ggml + libllama: about 5 minutes on 2 cores. Later builds
# are incremental.
#
#   scripts/setup.sh [BUILD_DIR] [extra cmake -D options...]
#   scripts/setup.sh --vulkan [BUILD_DIR] [...]   also llama.cpp's Vulkan backend (default dir:
#                                                 build-vulkan): -ngl puts layers on a GPU
set -euo pipefail
cd "$(dirname "$0")/.."

vulkan=0
if [[ ${1:-} == --vulkan ]]; then
  vulkan=1
  shift
fi
build_dir=${1:-build}
((vulkan)) && build_dir=${1:-build-vulkan}
shift || true

# Command -> Debian package, and packages found by dpkg.
# gnuplot draws `epq bench --plot`; node runs the OpenAI client tests.
declare -A cmd_pkg=([cmake]=cmake [g++]=g++ [make]=make [git]=git [npm]=npm [gnuplot]=gnuplot-nox [ccache]=ccache)
lib_pkgs=(libgtest-dev libcli11-dev)
# llama-server's own test suite (tests/server_suite/run.sh): pytest and what the suite imports
# (its requirements.txt, less openai, which Debian does not package).
lib_pkgs+=(python3-pytest python3-pytest-xdist python3-pytest-timeout python3-requests python3-aiohttp
           python3-numpy python3-prometheus-client python3-filelock python3-wget)

# The Vulkan build: the loader and headers, SPIR-V headers, and Mesa's drivers, whose software
# device (lavapipe) runs the GPU tests on a machine without a GPU. The shader compiler comes from
# scripts/vulkan-tools.sh (Debian 12's is too old for the pinned tree).
((vulkan)) && lib_pkgs+=(libvulkan-dev spirv-headers mesa-vulkan-drivers)

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
if ((vulkan)); then
  vk_opts=()
  mapfile -t vk_opts < <(scripts/vulkan-tools.sh "$build_dir/_deps/vulkan-tools")
  ((${#vk_opts[@]})) || { echo "setup: no shader compiler for the Vulkan backend" >&2; exit 1; }
  set -- -DEPQ_VULKAN=ON "${vk_opts[@]}" "$@"
  echo "setup: Vulkan backend on (${vk_opts[*]})"
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log" >&2
  echo "setup: cmake configure failed (log: $build_dir/configure.log)" >&2
  exit 1
}
echo "setup: building in $build_dir with $jobs jobs (the first build compiles llama.cpp: ~5 min)"
# The Vulkan build makes the command and the device tests (tests/test_devices.cpp); the regular
# build, everything.
targets=()
((vulkan)) && targets=(--target epq epq_device_tests)
cmake --build "$build_dir" -j "$jobs" "${targets[@]}" 2>&1 | grep -E "error|warning:|Error|\[100%\]" || true
test "${PIPESTATUS[0]}" -eq 0 || { echo "setup: build failed" >&2; exit 1; }
test -x "$build_dir/bin/epq" || { echo "setup: build failed: $build_dir/bin/epq missing" >&2; exit 1; }
echo "setup: built $build_dir/bin/epq"
