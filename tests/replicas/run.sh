#!/usr/bin/env bash
# Two `epq serve` replicas behind HAProxy on loopback, configured as the README's "Many users:
# replicas" section shows: a conversation's requests stay on one replica (where its prompt is
# cached), conversations spread over both, and when one replica stops the other serves every
# later request. Exit status 0 when all of that holds, 1 when something does not, 77 (skipped)
# when haproxy is not installed.
#
#   tests/replicas/run.sh BUILD_DIR
set -euo pipefail

build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
epq=$build/bin/epq
if ! command -v haproxy >/dev/null 2>&1; then
  echo "replicas: SKIPPED: haproxy is not installed (apt-get install haproxy)"
  exit 77
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "replicas: FAILED: $*" >&2
  for f in "$work"/*.log; do
    echo "--- $f (last lines)" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_healthy() {  # PORT WHAT
  for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.25
  done
  fail "$2 did not answer /health within 60 s"
}

"$epq" synth --preset tiny-qwen3moe -o "$work/model.gguf" >"$work/synth.log" 2>&1 || fail "epq synth"

lb_port=$(free_port)
declare -A replica_port replica_pid
for name in a b; do
  replica_port[$name]=$(free_port)
  "$epq" serve -m "$work/model.gguf" --host 127.0.0.1 --port "${replica_port[$name]}" -c 4096 -np 2 -t 1 \
    >"$work/replica-$name.log" 2>&1 &
  replica_pid[$name]=$!
  pids+=("$!")
done
for name in a b; do
  wait_healthy "${replica_port[$name]}" "replica $name"
done

sed -e "s/@LB_PORT@/$lb_port/" -e "s/@PORT_A@/${replica_port[a]}/" -e "s/@PORT_B@/${replica_port[b]}/" \
  "$here/haproxy.cfg.in" >"$work/haproxy.cfg"
haproxy -c -q -f "$work/haproxy.cfg" >"$work/haproxy-check.log" 2>&1 || fail "haproxy rejected the configuration"
haproxy -db -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 &
pids+=("$!")
wait_healthy "$lb_port" "haproxy"

# ask CONVERSATION_JSON_MESSAGES: one chat completion through the balancer; prints
# "<replica> <prompt tokens taken from the cache> <reply text>" (the reply as one line).
ask() {
  local body
  body=$(python3 -c 'import json, sys; print(json.dumps({"messages": json.loads(sys.argv[1]), "max_tokens": 8, "temperature": 0}))' "$1")
  curl -sf -D "$work/headers" -o "$work/reply.json" -H 'Content-Type: application/json' \
    --data-binary "$body" "http://127.0.0.1:$lb_port/v1/chat/completions" || return 1
  local replica
  replica=$(tr -d '\r' <"$work/headers" | awk -F': ' 'tolower($1) == "x-replica" { print $2 }')
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
text = r["choices"][0]["message"]["content"].replace("\n", " ")
print(sys.argv[2], r.get("timings", {}).get("cache_n", -1), text)' "$work/reply.json" "$replica"
}

# 1. One conversation, three turns: every turn on the replica of its first turn, and the later
#    turns find its earlier tokens in that replica's cache.
messages='[{"role": "user", "content": "Conversation one: tell me about the river."}]'
first_replica=""
for turn in 1 2 3; do
  out=$(ask "$messages") || fail "turn $turn of the conversation got no answer"
  read -r replica cached reply <<<"$out"
  [[ -n $replica ]] || fail "the balancer did not say which replica answered"
  [[ -z $first_replica ]] && first_replica=$replica
  [[ $replica == "$first_replica" ]] || fail "turn $turn went to replica $replica, the conversation started on $first_replica"
  if ((turn > 1)) && ((cached <= 0)); then
    fail "turn $turn found nothing of its conversation in replica $replica's cache (cache_n $cached)"
  fi
  echo "replicas: turn $turn on replica $replica, $cached prompt tokens from its cache"
  messages=$(python3 -c 'import json, sys; m = json.loads(sys.argv[1]); m += [{"role": "assistant", "content": sys.argv[2]}, {"role": "user", "content": "And then?"}]; print(json.dumps(m))' "$messages" "$reply")
done

# 2. Other conversations spread over both replicas.
declare -A used
for i in $(seq 1 8); do
  out=$(ask "[{\"role\": \"user\", \"content\": \"Conversation $i of many: a question.\"}]") ||
    fail "conversation $i got no answer"
  used[${out%% *}]=1
done
((${#used[@]} == 2)) || fail "eight conversations all went to one replica (${!used[*]})"
echo "replicas: eight conversations spread over replicas ${!used[*]}"

# 3. The conversation's replica stops; the other serves every later request, that conversation's
#    next turn included.
kill "${replica_pid[$first_replica]}"
wait "${replica_pid[$first_replica]}" 2>/dev/null || true
echo "replicas: stopped replica $first_replica"
for i in $(seq 1 6); do
  out=$(ask "$messages") || fail "request $i after replica $first_replica stopped got no answer"
  replica=${out%% *}
  [[ $replica != "$first_replica" ]] || fail "request $i after the stop claims the stopped replica"
  out=$(ask "[{\"role\": \"user\", \"content\": \"Conversation $i of many: a question.\"}]") ||
    fail "conversation $i after replica $first_replica stopped got no answer"
done
echo "replicas: after the stop, every request was served by the other replica"
echo "replicas: PASSED"
