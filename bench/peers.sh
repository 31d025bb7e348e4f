#!/usr/bin/env bash
# peers.sh - dtm against its peers on the CPU, the same GPT, the same cores
# (issue 22 point 5): per size, in interleaved rounds,
#   dtm f32, dtm bf16           (`dtmc build --mesh dp=1`, the pool's threads)
#   torch eager f32, torch.compile f32, torch eager bf16 (autocast, f32
#   master weights)             (bench/torch_gpt.py, PyTorch >= 2.0)
#   jax jit f32                 (bench/jax_gpt.py)
# each the median step of its run (STEPS timed after WARMUP), then per
# implementation the min and median over the rounds, dtm f32's ratio to it,
# and the sgemm-only bound: the step's FLOPs (inspect's 6N + 6LCT per
# token) at OpenBLAS sgemm's rate on the model's own GEMM shapes
# (bench/gemm_bench --gpt, time-weighted), and each step's share of it.
# The load average is printed with every round.
#
#   bench/peers.sh [DTMC]
#
# Environment: SIZES (default "small medium": d 256 x 4 layers x T 128 and
# d 512 x 8 layers x T 256, batch 8; "gpt2" adds GPT-2 small, d 768 x 12
# layers x T 1024, minutes a step here), ROUNDS (3), STEPS (5), WARMUP (2;
# torch.compile compiles in its first steps), THREADS (the cores),
# TORCH_PY (default ~/.cache/dtm-bench/torch-venv/bin/python, made with
# `python3 -m venv` and `pip install torch numpy` when missing), JAX_PY (default
# ~/.cache/dtm-bench/jax-venv/bin/python, which scripts/deps.sh makes).
# An implementation whose python is missing is left out, and said so; one whose
# every run fails (JAX on GPT-2 small here) is listed as failed, with the last
# lines its last run wrote to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
dtmc=${1:-build/dtmc}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-$(nproc)}
TORCH_PY=${TORCH_PY:-$HOME/.cache/dtm-bench/torch-venv/bin/python}
JAX_PY=${JAX_PY:-$HOME/.cache/dtm-bench/jax-venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --build build --target gemm_bench >/dev/null
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
declare -A cfg=(
	[small]="d=256 layers=4 ctx=128 batch=8 heads=4"
	[medium]="d=512 layers=8 ctx=256 batch=8 heads=8"
	[gpt2]="d=768 layers=12 ctx=1024 batch=8 heads=12 vocab=50304"
)
impls=(dtm-f32 dtm-bf16)
# PyTorch 2.x from PyPI into a venv outside the repository, as train_bench.sh
# makes JAX's (the CUDA wheel: about 3 GB with its dependencies, used on the CPU)
if [ "$TORCH_PY" = "$HOME/.cache/dtm-bench/torch-venv/bin/python" ] && [ ! -x "$TORCH_PY" ]; then
	echo "(creating ~/.cache/dtm-bench/torch-venv: pip install torch numpy)"
	{ python3 -m venv "$HOME/.cache/dtm-bench/torch-venv" &&
		"$TORCH_PY" -m pip install -q torch numpy; } >"$tmp/pip.log" 2>&1 ||
		echo "(pip install torch failed; PyPI unreachable? $(tail -1 "$tmp/pip.log"))"
fi
if [ -x "$TORCH_PY" ] && "$TORCH_PY" -c 'import torch, sys; sys.exit(not hasattr(torch, "compile"))' 2>/dev/null; then
	impls+=(torch-eager torch-compile torch-bf16)
else
	echo "(PyTorch >= 2.0 not found at $TORCH_PY: torch left out)"
fi
if [ -x "$JAX_PY" ] && "$JAX_PY" -c 'import jax' 2>/dev/null; then
	impls+=(jax-jit)
else
	echo "(JAX not found at $JAX_PY: jax left out; scripts/deps.sh makes it)"
fi
machine_line "threads $THREADS; torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -)"

# run IMPL SIZE: one run's median ms per step on stdout
run() {
	local impl=$1 size=$2 defs=() d
	for d in ${cfg[$size]}; do defs+=(-D "$d"); done
	case $impl in
	dtm-f32 | dtm-bf16)
		"$tmp/$size.${impl#dtm-}" --steps $((STEPS + WARMUP)) --threads "$THREADS" -q \
			--log "$tmp/log.jsonl" >/dev/null
		sed -n 's/.*"ms":\([^,}]*\).*/\1/p' "$tmp/log.jsonl" | tail -n "$STEPS" | sort -g |
			awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }' ;;
	torch-*)
		local extra=()
		[ "$impl" = torch-compile ] && extra=(--compile)
		[ "$impl" = torch-bf16 ] && extra=(--precision bf16)
		"$TORCH_PY" bench/torch_gpt.py --dtmc "$dtmc" --threads "$THREADS" --steps "$STEPS" \
			--warmup "$WARMUP" "${extra[@]}" "${defs[@]}" 2>"$tmp/$impl.err" | tail -1 |
			python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["ms_per_step"])' \
				2>/dev/null ;;
	jax-jit)
		"$JAX_PY" bench/jax_gpt.py --dtmc "$dtmc" --steps "$STEPS" --warmup "$WARMUP" \
			"${defs[@]}" 2>"$tmp/$impl.err" | tail -1 |
			python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["ms_per_step"])' \
				2>/dev/null ;;
	esac
}

stat() { # min and median of the numbers on stdin
	sort -g | awk '{ v[NR] = $1 } END { printf "%.1f %.1f", v[1], v[int((NR + 1) / 2)] }'
}

for size in ${SIZES:-small medium}; do
	defs=()
	for d in ${cfg[$size]}; do defs+=(-D "$d"); done
	for p in f32 bf16; do
		"$dtmc" build models/gpt.dtm "${defs[@]}" --mesh dp=1 --train precision=$p \
			-o "$tmp/$size.$p" >/dev/null
	done
	# the bound: FLOPs per step at sgemm's rate on the model's shapes
	ins=$("$dtmc" inspect models/gpt.dtm "${defs[@]}" --mesh dp=1)
	fpt=$(sed -n 's/.* \([0-9.e+]*\) FLOPs per token.*/\1/p' <<<"$ins")
	cfgj=$(python3 bench/gptcfg.py "$dtmc" models/gpt.dtm ${cfg[$size]})
	read -r B T D F V H <<<"$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]);
f = c["params"]["layer.0.wfc"]["shape"][1] if "layer.0.wfc" in c["params"] else 4 * c["d"]
print(c["batch"], c["ctx"], c["d"], f, c["vocab"], c["heads"])' "$cfgj")"
	# (the best column: the faster of OpenBLAS's and oneDNN's sgemm per shape)
	rate=$(build/bench/gemm_bench --threads "$THREADS" --gpt "$B,$T,$D,$F,$V,$H" |
		sed -n 's/^all (time-weighted) *[0-9.]* *[0-9.]* *[0-9.]* *\([0-9.]*\).*/\1/p')
	bound=$(awk -v f="$fpt" -v n=$((B * T)) -v r="$rate" 'BEGIN { printf "%.1f", f * n / (r * 1e9) * 1e3 }')
	echo
	echo "$size: ${cfg[$size]} ($((B * T)) tokens a step); sgemm on its shapes $rate GFLOP/s:" \
		"bound $bound ms a step"
	declare -A all=()
	for r in $(seq "$ROUNDS"); do
		echo "  round $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
		for impl in "${impls[@]}"; do
			ms=$(run "$impl" "$size") || ms=
			all[$impl]+="$ms "
		done
	done
	ref=$(tr ' ' '\n' <<<"${all[dtm-f32]}" | sed '/^$/d' | stat | cut -d' ' -f2)
	printf '  %-14s %10s %10s %14s %12s\n' impl min_ms median_ms "/ dtm f32" "bound share"
	for impl in "${impls[@]}"; do
		if [ -z "$(tr -d ' ' <<<"${all[$impl]}")" ]; then
			printf '  %-14s %10s %10s %14s %12s\n' "$impl" failed - - -
			# why: the last lines its last run wrote to stderr
			[ -s "$tmp/$impl.err" ] && tail -n 3 "$tmp/$impl.err" | sed 's/^/    | /'
			continue
		fi
		read -r mn md <<<"$(tr ' ' '\n' <<<"${all[$impl]}" | sed '/^$/d' | stat)"
		awk -v i="$impl" -v mn="$mn" -v md="$md" -v ref="$ref" -v b="$bound" 'BEGIN {
			printf "  %-14s %10.1f %10.1f %13.2fx %11.0f%%\n", i, mn, md, md / ref, 100 * b / md }'
	done
	unset all
done
