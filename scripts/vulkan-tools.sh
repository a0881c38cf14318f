#!/usr/bin/env bash
# Finds a shader compiler (glslc) and Vulkan headers new enough for the pinned llama.cpp's Vulkan
# backend, and prints the CMake options that point the build at them.
#
# The pinned tree compiles cooperative-matrix shaders unconditionally (GL_KHR_cooperative_matrix)
# and its host code uses Vulkan 1.3.268+ types (VK_EXT_layer_settings, VK_KHR_cooperative_matrix).
# Debian 12 ships glslc 2023.2 and Vulkan headers 1.3.239, which have neither. Where the system's
# tools pass both checks they are used as they are; otherwise this fetches Debian 13's glslc
# (with the C and C++ runtimes it was built against) and its Vulkan headers with apt-get download,
# which checks the archive's signatures, and unpacks them under PREFIX without installing
# anything: glslc then runs through Debian 13's own dynamic loader.
#
#   scripts/vulkan-tools.sh PREFIX      (prints -D options, one per line, on stdout)
set -euo pipefail

prefix=${1:?usage: scripts/vulkan-tools.sh PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# glslc passes when it compiles a shader that declares a cooperative matrix.
glslc_ok() {
  cat >"$work/coopmat.comp" <<'EOF'
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
void main() { coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> m; }
EOF
  "$1" -fshader-stage=compute --target-env=vulkan1.3 "$work/coopmat.comp" -o "$work/coopmat.spv" >/dev/null 2>&1
}

# The headers pass when vulkan.hpp declares what the pinned tree's host code uses.
headers_ok() {
  local inc=()
  [[ -n $1 ]] && inc=(-I "$1")
  printf '%s\n' '#include <vulkan/vulkan.hpp>' \
    'vk::LayerSettingEXT s; VkPhysicalDeviceCooperativeMatrixFeaturesKHR f;' >"$work/h.cpp"
  g++ -std=c++17 -fsyntax-only "${inc[@]}" "$work/h.cpp" >/dev/null 2>&1
}

glslc=""
if command -v glslc >/dev/null 2>&1 && glslc_ok "$(command -v glslc)"; then
  glslc=$(command -v glslc)
elif [[ -x $prefix/bin/glslc ]] && glslc_ok "$prefix/bin/glslc"; then
  glslc=$prefix/bin/glslc
fi
# headers: "system", a directory, or "" (none found yet).
headers=""
if headers_ok ""; then
  headers=system
elif [[ -d $prefix/usr/include/vulkan ]] && headers_ok "$prefix/usr/include"; then
  headers=$prefix/usr/include
fi

if [[ -z $glslc || -z $headers ]]; then
  need=()
  [[ -z $glslc ]] && need+=(glslc libshaderc1 libc6 libstdc++6 libgcc-s1)
  [[ -z $headers ]] && need+=(libvulkan-dev)
  echo "vulkan-tools: fetching ${need[*]} from Debian 13 (trixie) into $prefix" >&2
  apt_dir=$work/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o Dir::State::status=/dev/null -o APT::Sandbox::User=root -o Debug::NoLocking=1)
  apt-get "${apt_opts[@]}" update -qq >"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; echo "vulkan-tools: could not read Debian 13's package index" >&2; exit 1; }
  (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download "${need[@]}" >>"$work/apt.log" 2>&1) ||
    { cat "$work/apt.log" >&2; echo "vulkan-tools: apt-get download ${need[*]} failed" >&2; exit 1; }
  for deb in "$apt_dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$prefix/root"
  done
  if [[ -z $glslc ]]; then
    mkdir -p "$prefix/bin"
    cat >"$prefix/bin/glslc" <<EOF
#!/bin/sh
# Debian 13's glslc, run by Debian 13's dynamic loader with the runtimes it was built against.
exec "$prefix/root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$prefix/root/usr/lib/x86_64-linux-gnu" "$prefix/root/usr/bin/glslc" "\$@"
EOF
    chmod +x "$prefix/bin/glslc"
    glslc_ok "$prefix/bin/glslc" || { echo "vulkan-tools: Debian 13's glslc does not run here" >&2; exit 1; }
    glslc=$prefix/bin/glslc
  fi
  if [[ -z $headers ]]; then
    mkdir -p "$prefix/usr"
    rm -rf "$prefix/usr/include"
    cp -r "$prefix/root/usr/include" "$prefix/usr/include"
    headers_ok "$prefix/usr/include" || { echo "vulkan-tools: Debian 13's Vulkan headers do not compile here" >&2; exit 1; }
    headers=$prefix/usr/include
  fi
fi

echo "-DVulkan_GLSLC_EXECUTABLE=$glslc"
[[ $headers != system ]] && echo "-DVulkan_INCLUDE_DIR=$headers"
exit 0
