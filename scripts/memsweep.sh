#!/usr/bin/env bash
# Runs `epq run` on a model under memory cgroups of several sizes, at several prompt batch sizes
# (each prompt as long as its batch, one ubatch), and checks what a small machine needs: every
# run either finishes or is refused up front with a clear error (the arena cannot fit), none is
# OOM-killed, and none peaks above its cap. Prints one row per run and a summary.
#
#   scripts/memsweep.sh -m MODEL [--caps 512M,1G,2G] [--batches 1,32,512,2048] [-n 4] [-c 4096]
#
# EPQ=path/to/epq picks the binary (default build/bin/epq). Needs root and a memory cgroup
# (scripts/memcap.sh); without one it exits 77, like memcap.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" caps="512M,768M,1G,1536M,2G,4G" batches="1,32,512,2048" n=4 ctx=4096
epq=${EPQ:-build/bin/epq}
usage() {
  echo "usage: $0 -m MODEL [--caps LIST] [--batches LIST] [-n TOKENS] [-c CTX]" >&2
  exit 2
}
while (($#)); do
  case $1 in
    -m) model=${2:-} && shift 2 ;;
    --caps) caps=${2:-} && shift 2 ;;
    --batches) batches=${2:-} && shift 2 ;;
    -n) n=${2:-} && shift 2 ;;
    -c) ctx=${2:-} && shift 2 ;;
    *) usage ;;
  esac
done
[[ -n $model && -f $model ]] || usage
[[ -x $epq ]] || { echo "memsweep: $epq is not built (scripts/setup.sh build)" >&2; exit 1; }

# A prompt long enough for the largest batch: the book chapter, repeated.
text=$(mktemp "${TMPDIR:-/tmp}/epq-memsweep.XXXXXX")
trap 'rm -f "$text" "$text".err' EXIT
for _ in 1 2 3 4 5 6; do cat data/text/tale-of-two-cities-ch1.txt; done >"$text"

printf '%-8s %-6s %-10s %-10s %-6s %s\n' cap batch result peak oom detail
runs=0 done_=0 refused=0 bad=0
IFS=, read -r -a cap_list <<<"$caps"
IFS=, read -r -a batch_list <<<"$batches"
for cap in "${cap_list[@]}"; do
  for b in "${batch_list[@]}"; do
    runs=$((runs + 1))
    status=0
    scripts/memcap.sh "$cap" -- "$epq" run -m "$model" --replay "$text" --replay-prompt "$b" -b "$b" \
      -n "$n" -c "$ctx" -t 2 >/dev/null 2>"$text.err" || status=$?
    ((status == 77)) && { grep memcap "$text.err" >&2; exit 77; }
    line=$(grep '^memcap: limit' "$text.err" | tail -n 1)
    peak=$(sed -n 's/.*peak \([0-9]*\) MiB.*/\1/p' <<<"$line")
    limit=$(sed -n 's/^memcap: limit \([0-9]*\) MiB.*/\1/p' <<<"$line")
    oom=$(sed -n 's/.*OOM-killed: \([a-z]*\).*/\1/p' <<<"$line")
    err=$(grep -m1 '^epq: error: ' "$text.err" || true)
    if [[ $oom != no || $status -eq 137 || -z $peak || $peak -gt $limit ]]; then
      result=FAIL bad=$((bad + 1)) detail="exit $status: $(tail -n 3 "$text.err" | tr '\n' ' ')"
    elif ((status == 0)); then
      result=ok done_=$((done_ + 1))
      detail=$(grep -m1 '^epq: arena ' "$text.err" | sed 's/ (.*//')
    elif [[ $status -eq 1 && ($err == *"not enough memory for the arena"* || $err == *"does not fit"*) ]]; then
      result=refused refused=$((refused + 1)) detail=${err:0:160}
    else
      result=FAIL bad=$((bad + 1)) detail="exit $status: ${err:-$(tail -n 2 "$text.err" | tr '\n' ' ')}"
    fi
    printf '%-8s %-6s %-10s %-10s %-6s %s\n' "$cap" "$b" "$result" "${peak:-?} MiB" "${oom:-?}" "$detail"
  done
done
echo "memsweep: $runs runs: $done_ finished, $refused refused up front, $bad failed (OOM kill, peak above the cap or another error)"
((bad == 0 && done_ > 0))
