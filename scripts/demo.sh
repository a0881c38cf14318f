#!/usr/bin/env bash
# Quick start 1: set up, build, and run epq on its built-in demo model (generated on first use).
# Extra arguments go to `epq demo` (e.g. -n 64 -p "Once upon a time").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/bin/epq demo "$@"
