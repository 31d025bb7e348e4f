#!/usr/bin/env bash
# train.sh DTMC REFLOSS MODEL [dtmc options...]
#
# Builds models/MODEL.dtm with `dtmc build`, then checks:
#   1. the binary's step-1 loss equals the f64 reference (ir_eval on the same
#      Philox init and data) to 1e-5 relative;
#   2. the runtime allocates exactly the planned arena bytes (./NAME -v);
#   3. the loss falls over 50 steps;
#   4. 20 steps equal 10 steps + --resume to 20, loss for loss (the JSON text).
set -u
dtmc=$1 refloss=$2 model=$3
shift 3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_e2e_${model}_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($model): $*" >&2; exit 1; }

"$dtmc" build "models/$model.dtm" -o "$tmp/$model" --mesh dp=1 -v "$@" 2>"$tmp/build.txt" ||
	{ cat "$tmp/build.txt" >&2; fail "dtmc build failed"; }
grep -q "planned memory per arena" "$tmp/build.txt" || fail "build -v printed no arenas"

ref=$("$refloss" "models/$model.dtm" --mesh dp=1 "$@") || fail "reference loss failed"
"$tmp/$model" --steps 1 --log "$tmp/one.jsonl" -q -v 2>"$tmp/run1.txt" ||
	{ cat "$tmp/run1.txt" >&2; fail "step 1 failed"; }
got=$(sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$tmp/one.jsonl" | head -1)
echo "$model: step-1 loss $got, reference $ref"
awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b;
	exit !(d <= 1e-5 * s) }' || fail "step-1 loss $got differs from the reference $ref"

# planned == allocated for every arena
bad=$(awk '/arena .* planned/ { if ($4 != $7) print }' "$tmp/run1.txt")
grep -q "planned" "$tmp/run1.txt" || fail "./$model -v printed no arenas"
[ -z "$bad" ] || fail "allocated differs from planned: $bad"

"$tmp/$model" --steps 50 --log "$tmp/fifty.jsonl" -q || fail "50 steps failed"
first=$(sed -n '1s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/fifty.jsonl")
last=$(sed -n '$s/.*"loss":\([^,}]*\).*/\1/p' "$tmp/fifty.jsonl")
echo "$model: loss $first -> $last over 50 steps"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.9 * a) }' ||
	fail "the loss did not fall: $first -> $last"

# checkpoint/resume: the losses of steps 11..20 must be the same text
"$tmp/$model" --steps 20 --log "$tmp/full.jsonl" -q || fail "20 steps failed"
"$tmp/$model" --steps 10 --save "$tmp/ck" --log "$tmp/a.jsonl" -q || fail "10 steps + save failed"
"$tmp/$model" --steps 20 --resume "$tmp/ck" --log "$tmp/b.jsonl" -q || fail "resume failed"
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$@"; }
[ "$(losses "$tmp/full.jsonl" | wc -l)" -eq 20 ] || fail "the 20-step log has no 20 losses"
[ "$(losses "$tmp/a.jsonl" "$tmp/b.jsonl")" = "$(losses "$tmp/full.jsonl")" ] ||
	fail "10 + resume 10 differs from 20 uninterrupted steps"
echo "$model: 10 steps + resume 10 == 20 steps (identical losses)"
echo "ok"
