#!/usr/bin/env bash
# Runs a command inside a memory cgroup of a given size, as a small machine would run it: page
# cache counts against the limit. Reports the peak usage and whether the kernel OOM-killed it,
# and exits with the command's status (137 when OOM-killed).
#
#   scripts/memcap.sh 8G -- build/bin/epq run -m model.gguf -p "Hello" -n 64
#
# Needs root and a writable memory cgroup (v1 or v2). Without one it says so and exits 77
# (the conventional "skipped" status), running nothing.
set -uo pipefail

usage() { echo "usage: $0 SIZE -- COMMAND [ARGS...]   (SIZE like 8G, 512M)" >&2; exit 2; }
[[ $# -ge 3 && $2 == "--" ]] || usage
size=$1
shift 2

to_bytes() {
  local s=${1^^} n unit
  [[ $s =~ ^([0-9]+)([KMGT]?)(I?B)?$ ]] || return 1
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in
    K) n=$((n << 10)) ;; M) n=$((n << 20)) ;; G) n=$((n << 30)) ;; T) n=$((n << 40)) ;;
  esac
  echo "$n"
}
limit=$(to_bytes "$size") || { echo "memcap: bad size '$size' (use e.g. 8G or 512M)" >&2; exit 2; }

skip() { echo "memcap: skipped: $1" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "creating a memory cgroup needs root"

version=0
if v1_rel=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup) && [[ -n $v1_rel ]] &&
   [[ -w /sys/fs/cgroup/memory${v1_rel} ]]; then
  version=1
  parent=/sys/fs/cgroup/memory${v1_rel%/}
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  version=2
  v2_rel=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
  parent=/sys/fs/cgroup${v2_rel%/}
  [[ -w $parent ]] || skip "cgroup v2 directory $parent is not writable"
else
  skip "no writable memory cgroup (neither v1 nor v2) on this machine"
fi

cg="$parent/epq-memcap-$$"
mkdir "$cg" || skip "cannot create $cg"
cleanup() { rmdir "$cg" 2>/dev/null; }
trap cleanup EXIT

if ((version == 1)); then
  echo "$limit" >"$cg/memory.limit_in_bytes" || skip "cannot set the limit in $cg"
  [[ -w $cg/memory.memsw.limit_in_bytes ]] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
else
  echo "$limit" >"$cg/memory.max" || skip "cannot set the limit in $cg"
  echo 0 >"$cg/memory.swap.max" 2>/dev/null
fi

# The child moves itself into the cgroup, then becomes the command. SIGTERM and SIGINT sent to
# this script are passed on to it (a server under a cap is stopped through its wrapper).
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' memcap "$cg" "$@" <&0 &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -INT "$child" 2>/dev/null' INT
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break  # a signal ended the wait, not the child
done

if ((version == 1)); then
  peak=$(cat "$cg/memory.max_usage_in_bytes")
  ooms=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
else
  peak=$(cat "$cg/memory.peak" 2>/dev/null || echo 0)
  ooms=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.events")
fi
ooms=${ooms:-0}
oom="no"
if ((ooms > 0)); then
  oom="yes ($ooms kill(s))"
  ((status == 0)) && status=137
fi
printf 'memcap: limit %d MiB (cgroup v%d), peak %d MiB, OOM-killed: %s, exit status %d\n' \
  $((limit >> 20)) "$version" $((peak >> 20)) "$oom" "$status" >&2
exit "$status"
