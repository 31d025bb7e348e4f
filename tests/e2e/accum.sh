#!/usr/bin/env bash
# accum.sh DTMC MODEL - gradient accumulation (passes/microbatch.c) trains
# like one step over the whole batch: models/MODEL.dtm built with
# --train microbatches=M (2 and 4) on one device and under DDP (dp=4 with
# M=2, dp=2 with M=4), trained 10 steps, logs the same per-step loss (the
# mean over the whole batch) and global grad norm as the M=1 one-device
# run, to 1e-5 relative.
set -u
dtmc=$1 model=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_accum_${model}_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($model): $*" >&2; exit 1; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"; }
runs="one:dp=1:1 one_m2:dp=1:2 one_m4:dp=1:4 dp4_m2:dp=4:2 dp2_m4:dp=2:4"
for r in $runs; do
	IFS=: read -r name mesh M <<<"$r"
	"$dtmc" build "models/$model.dtm" -o "$tmp/$name" --mesh "$mesh" --train "microbatches=$M" \
		2>"$tmp/$name.txt" || { cat "$tmp/$name.txt" >&2; fail "build $mesh M=$M failed"; }
	"$tmp/$name" --steps 10 --seed 0 --log "$tmp/$name.jsonl" -q || fail "$mesh M=$M: training failed"
	[ "$(losses "$tmp/$name.jsonl" | wc -l)" -eq 10 ] || fail "$mesh M=$M: no 10 losses"
done
for r in $runs; do
	IFS=: read -r name mesh M <<<"$r"
	[ "$name" = one ] && continue
	paste <(losses "$tmp/one.jsonl") <(losses "$tmp/$name.jsonl") | awk -v what="$mesh M=$M" '
		function rel(a, b,  d, s) { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a
		                            return s > 0 ? d / s : d }
		{ r = rel($2, $5); g = rel($3, $6); if (r > w) w = r; if (g > gw) gw = g
		  if (!(r <= 1e-5 && g <= 1e-5)) { print what ": step " $1 ": " $2 " " $3 " vs " $5 " " $6; bad = 1 } }
		END { printf "%s: max rel diff vs M=1: loss %.3g, grad_norm %.3g\n", what, w, gw; exit bad }' ||
		fail "$mesh M=$M: losses differ from M=1"
done
echo ok
