#!/usr/bin/env bash
# The long loopback load test of epq serve: 16 clients for 60 s (mixed chat/completions, short
# and long prompts, streams, aborts) against a server in a memory cgroup, by default the
# AddressSanitizer build. Passes when every request is accounted for, no slot stays busy, the
# server exits 0 on SIGTERM with no sanitizer report, and its peak memory stays under the cap.
#
#   scripts/serve_load.sh [--build DIR] [--cap SIZE] [--seconds N] [--clients N] [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-asan cap=2G seconds=60 clients=16 model=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) model=$1; shift ;;
  esac
done
[[ -x $build/bin/epq ]] || { echo "serve_load: $build/bin/epq missing: scripts/setup.sh $build -DEPQ_SANITIZE=\"address;undefined\"" >&2; exit 2; }
[[ -d tests/clients/node_modules/openai ]] || (cd tests/clients && npm ci --no-audit --no-fund --loglevel=error)
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
if [[ -z $model ]]; then
  model=$work/tiny.gguf
  "$build/bin/epq" synth --preset tiny-qwen3moe -o "$model" -q
fi

log=$work/serve.log
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  scripts/memcap.sh "$cap" -- "$build/bin/epq" serve -m "$model" --port 0 -t 2 -np 4 -c 8192 --metrics \
  >"$log" 2>&1 &
pid=$!
# llama-server prints its address once the model is loaded.
for _ in $(seq 600); do grep -q "listening on http://" "$log" && break; sleep 0.2; done
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -1)
[[ -n $port ]] || { cat "$log" >&2; echo "serve_load: server did not start" >&2; exit 1; }

echo "serve_load: $clients clients for ${seconds}s against $build/bin/epq serve (cap $cap), port $port"
status=0
node tests/clients/load.mjs "http://127.0.0.1:$port/v1" "$seconds" "$clients" || status=1
server_pid=$(pgrep -f -- "epq serve -m $model --port 0" | head -1)
kill -TERM "$server_pid"
wait "$pid" || { echo "serve_load: the server (or memcap) exited $?" >&2; status=1; }
grep -E "memcap:|ERROR: AddressSanitizer|runtime error|LeakSanitizer" "$log" || true
if grep -qE "ERROR: AddressSanitizer|runtime error:|LeakSanitizer" "$log"; then
  echo "serve_load: sanitizer report above" >&2
  status=1
fi
((status == 0)) && echo "serve_load: passed" || echo "serve_load: FAILED" >&2
exit $status
