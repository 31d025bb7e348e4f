#!/usr/bin/env bash
# bf16_bench.sh - dtm's bf16 steps against its f32 steps on the CPU (issue 22
# point 3): models/gpt.dtm at the issue's sizes, built with `precision f32`
# and `precision bf16`, trained in interleaved rounds on one rank (the
# pool's threads), the median step time of each run's last STEPS steps.
#
#   bench/bf16_bench.sh [DTMC]
#
# Environment: SIZES ("small medium", default both: d 256 x 4 layers x T
# 128 and d 512 x 8 layers x T 256, batch 8, 4 and 8 heads), ROUNDS
# (default 3), STEPS (default 6, after 2 warm-up steps), THREADS (default
# the cores).  bf16 GEMMs run on oneDNN when the build found it (-v says
# `bf16 on onednn`); the f32 master weights and AdamW state are as on GPUs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
dtmc=${1:-$root/build/dtmc}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
THREADS=${THREADS:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A cfg=(
	[small]="-D d=256 -D layers=4 -D ctx=128 -D batch=8 -D heads=4"
	[medium]="-D d=512 -D layers=8 -D ctx=256 -D batch=8 -D heads=8"
)
machine_line "threads $THREADS"
printf '%-8s %-6s %s\n' size prec "ms/step per round (median of the last $STEPS steps)"
for size in ${SIZES:-small medium}; do
	read -r -a args <<<"${cfg[$size]}"
	for p in f32 bf16; do
		"$dtmc" build "$root/models/gpt.dtm" "${args[@]}" --mesh dp=1 \
			--train precision=$p -o "$tmp/$size.$p" >/dev/null
	done
	declare -A all=()
	for _ in $(seq "$ROUNDS"); do
		for p in f32 bf16; do
			"$tmp/$size.$p" --steps $((STEPS + 2)) --threads "$THREADS" -q \
				--log "$tmp/log.jsonl" >/dev/null
			all[$p]+=" $(med "$tmp/log.jsonl" ms)"
		done
	done
	for p in f32 bf16; do
		printf '%-8s %-6s %s\n' "$size" "$p" "${all[$p]}"
	done
	m32=$(tr ' ' '\n' <<<"${all[f32]}" | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	m16=$(tr ' ' '\n' <<<"${all[bf16]}" | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	awk -v a="$m32" -v b="$m16" -v s="$size" \
		'BEGIN { printf "%-8s bf16 speed-up over f32 (medians of the rounds): %.2fx\n", s, a / b }'
	unset all
done
