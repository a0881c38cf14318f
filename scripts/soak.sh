#!/usr/bin/env bash
# Soak: one long greedy generation split into segments, each a new `epq run` process with another
# arena size, eviction policy, prefetch mode, thread count and expert layout. A segment's prompt
# is the first prompt plus all the text generated before it, and the segment runs twice on it:
# through stock llama.cpp (--no-pager, with the segment's thread count and layout, since the
# layout changes stock's own kernels) and through the pager. The two runs' logits of every step
# must be byte-identical, and so must their text; stock's text is what the next prompt goes on
# with. A process that starts cold at another setting exercises what one long run cannot: arena
# sizes from constant eviction to holding everything, every run policy, both layouts, prefetch on, off
# and auto's trial, one and two threads, each against the long context the text has built.
#
#   scripts/soak.sh [-m MODEL] [--steps N] [--segment N]
#
# Without -m, a tiny model of --preset (default tiny-qwen3moe) is synthesized first. EPQ names the
# binary (default: this tree's build/bin/epq). The environment reaches every run, so
#   EPQ=build/bin/epq-faults EPQ_FAULT=corrupt-slot EPQ_FAULT_AFTER=50 scripts/soak.sh
# plants a fault in the pager (stock runs have none) and the soak must stop at a mismatch.
# Prints one line per segment and a summary; exits 1 at the first mismatch (naming the step and
# the commands that reproduce it, whose files are kept) and 2 on bad usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EPQ=${EPQ:-$here/../build/bin/epq}

usage() {
  cat >&2 <<EOF
usage: $0 [-m MODEL] [--steps N] [--segment N] [--preset NAME] [-p PROMPT] [-c CTX]
  -m, --model FILE   GGUF model (default: synthesize --preset)
  --preset NAME      epq synth preset used without -m (default tiny-qwen3moe)
  --steps N          decode steps in all, each one's logits compared (default 2000)
  --segment N        steps per segment, i.e. per pair of processes (default 100)
  -p, --prompt TEXT  the first segment's prompt
  -c, --ctx-size N   context of every run (default: room for the whole text, twice over)
environment: EPQ=path of the epq binary (default: build/bin/epq of this tree)
EOF
  exit 2
}

model="" preset=tiny-qwen3moe steps=2000 segment=100 ctx=""
prompt="It was the best of times, it was the worst of times, it was the age of wisdom"
while [[ $# -gt 0 ]]; do
  case $1 in
    -m | --model) model=${2:?}; shift 2 ;;
    --preset) preset=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --segment) segment=${2:?}; shift 2 ;;
    -p | --prompt) prompt=${2:?}; shift 2 ;;
    -c | --ctx-size) ctx=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "soak: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$steps" "$segment" ${ctx:+"$ctx"}; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "soak: '$n' is not a positive number" >&2; usage; }
done
[[ -x $EPQ ]] || { echo "soak: no epq binary at $EPQ (build it, or set EPQ=...)" >&2; exit 2; }
# The retokenized text can take more tokens than were generated: leave it twice the room.
ctx=${ctx:-$((2 * steps + 1024))}

work=$(mktemp -d "${TMPDIR:-/tmp}/epq-soak-XXXXXX")
keep_work=0
cleanup() { [[ $keep_work == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT

if [[ -z $model ]]; then
  model=$work/$preset.gguf
  "$EPQ" synth --preset "$preset" -o "$model" -q 2>"$work/synth.err" || { cat "$work/synth.err" >&2; exit 1; }
fi

# Prints the named top-level fields of a JSON file (or of stdin, for "-"), one per line.
json_fields() {
  python3 - "$@" <<'EOF'
import json, sys
src = sys.argv[1]
d = json.load(sys.stdin if src == "-" else open(src))
for key in sys.argv[2:]:
    v = d[key]
    print(str(v).lower() if isinstance(v, bool) else v)
EOF
}

# Arena sizes: the minimum (evicting all the time), half of every expert's slot (evicting now
# and then) and auto (on a machine with room to spare, every expert).
{ read -r min_arena; read -r all_slots; } < <("$EPQ" inspect --json "$model" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["min_arena_bytes"])
print(sum(c["slot_bytes"] * len(c["layers"]) for c in d["size_classes"]) * d["n_expert"])')
mid_arena=$((all_slots / 2 > 2 * min_arena ? all_slots / 2 : 2 * min_arena))
arenas=("$min_arena" "$mid_arena" auto)
arena_names=(min half auto)
policies=(forecast lru lfu 2q)
prefetches=(off on auto)
threads=(2 1)
layouts=(repacked -nr)

# Which step of a segment first differs between two logits files of rows of `row` bytes, how many
# rows differ, and the first differing logit.
first_difference() {
  python3 - "$@" <<'EOF'
import struct, sys
a, b, row = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), int(sys.argv[3])
rows = max(len(a), len(b)) // row
bad = [i for i in range(rows) if a[i * row:(i + 1) * row] != b[i * row:(i + 1) * row]]
i = bad[0]
ra, rb = a[i * row:(i + 1) * row], b[i * row:(i + 1) * row]
if len(ra) != len(rb):
    print(i, len(bad), f"stock has {len(a) // row} steps, epq {len(b) // row}")
else:
    j = next(j for j in range(0, row, 4) if ra[j:j + 4] != rb[j:j + 4])
    x, y = struct.unpack("<f", ra[j:j + 4])[0], struct.unpack("<f", rb[j:j + 4])[0]
    print(i, len(bad), f"token {j // 4}: stock {x!r}, epq {y!r}")
EOF
}

# A command as it can be pasted back, with the planted faults of the environment (epq-faults).
show_command() {
  local v
  printf ' '
  for v in EPQ_FAULT EPQ_FAULT_AFTER EPQ_IO_FAULT; do
    [[ -z ${!v:-} ]] || printf ' %s=%q' "$v" "${!v}"
  done
  printf ' %q' "$@"
  printf '\n'
}

echo "soak: $model, $steps steps in segments of $segment, context $ctx, binary $EPQ"
text=$work/text
printf '%s' "$prompt" >"$text"
done_steps=0 k=0 configs=()
start=$SECONDS
while ((done_steps < steps)); do
  n=$((steps - done_steps < segment ? steps - done_steps : segment))
  arena=${arenas[k % 3]} arena_name=${arena_names[k % 3]}
  policy=${policies[k % 4]}
  prefetch=${prefetches[(k + k / 3) % 3]}
  t=${threads[k / 2 % 2]}
  layout=${layouts[k / 4 % 2]}
  layout_flag=()
  if [[ $layout == -nr ]]; then layout_flag=(-nr); else layout_flag=(--repack); fi
  config="arena $arena_name, --policy $policy, --prefetch $prefetch, -t $t, ${layout}"
  [[ " ${configs[*]} " == *" $arena_name/$policy/$prefetch/$t/$layout "* ]] || configs+=("$arena_name/$policy/$prefetch/$t/$layout")

  seg=$work/seg$k
  cp "$text" "$seg.prompt"
  common=(run -m "$model" -f "$seg.prompt" -n "$n" -c "$ctx" -t "$t" "${layout_flag[@]}")
  stock_cmd=("$EPQ" "${common[@]}" --no-pager --logits-out "$seg.stock.logits" --stats-json "$seg.stock.json")
  paged_cmd=("$EPQ" "${common[@]}" --arena "$arena" --policy "$policy" --prefetch "$prefetch"
    --logits-out "$seg.epq.logits" --stats-json "$seg.epq.json")
  for side in stock epq; do
    if [[ $side == stock ]]; then cmd=("${stock_cmd[@]}"); else cmd=("${paged_cmd[@]}"); fi
    if ! "${cmd[@]}" >"$seg.$side.out" 2>"$seg.$side.err"; then
      keep_work=1
      echo "soak: segment $((k + 1)) ($config): the $side run failed:" >&2
      tail -n 20 "$seg.$side.err" >&2
      show_command "${cmd[@]}" >&2
      exit 1
    fi
  done

  { read -r generated; read -r stock_tps; read -r prompt_tokens; } < \
    <(json_fields "$seg.stock.json" generated_tokens decode_tokens_per_second prompt_tokens)
  { read -r paged; read -r epq_tps; read -r evictions; read -r arena_bytes; } < \
    <(json_fields "$seg.epq.json" paged decode_tokens_per_second evictions arena_bytes)
  # A row per step: one per generated token, and one more when the run stopped at end of text.
  rows=$((generated < n ? generated + 1 : generated))
  row_bytes=$(($(stat -c %s "$seg.stock.logits") / rows))
  if [[ $paged != true ]]; then
    keep_work=1
    echo "soak: segment $((k + 1)) ($config): epq did not page the experts: nothing was tested" >&2
    exit 1
  fi
  if ! cmp -s "$seg.stock.logits" "$seg.epq.logits"; then
    keep_work=1
    read -r i n_bad what < <(first_difference "$seg.stock.logits" "$seg.epq.logits" "$row_bytes")
    echo "segment $((k + 1)) steps $((done_steps + 1))-$((done_steps + rows)) ($config): LOGITS DIFFER"
    echo "soak: MISMATCH at step $((done_steps + i + 1)) of the run (step $((i + 1)) of segment $((k + 1)));" \
      "$n_bad of its $rows steps differ; first: $what" >&2
    echo "soak: reproduce (files kept in $work):" >&2
    show_command "${stock_cmd[@]}" >&2
    show_command "${paged_cmd[@]}" >&2
    exit 1
  fi
  if ! cmp -s "$seg.stock.out" "$seg.epq.out"; then
    keep_work=1
    echo "soak: segment $((k + 1)) ($config): same logits but different text: see $seg.stock.out and $seg.epq.out" >&2
    exit 1
  fi
  printf 'segment %d steps %d-%d (%s; arena %s B): identical after a %d-token prompt,' \
    $((k + 1)) $((done_steps + 1)) $((done_steps + rows)) "$config" "$arena_bytes" "$prompt_tokens"
  printf ' decode %.1f tok/s (stock %.1f), %s evictions\n' "$epq_tps" "$stock_tps" "$evictions"
  if ((generated == 0)); then
    keep_work=1
    echo "soak: segment $((k + 1)): stock ended the text at once, so the next prompt would be the same: pick another -p" >&2
    exit 1
  fi
  # stdout is the generated text and one newline.
  head -c -1 "$seg.stock.out" >>"$text"
  rm -f "$seg".*.logits
  done_steps=$((done_steps + rows))
  k=$((k + 1))
done
echo "soak: $done_steps steps in $k segments, every step's logits identical to stock" \
  "(${#configs[@]} configurations, $((SECONDS - start)) s)"
