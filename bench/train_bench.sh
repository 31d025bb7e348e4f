#!/usr/bin/env bash
# train_bench.sh - tokens/s of training models/gpt.dtm (its default size, f32,
# AdamW with clipping, the model's batch shape) with dtm, PyTorch eager and
# JAX jit on the CPU, on the same cores; then dtm's GEMM path against
# OpenBLAS sgemm on the model's GEMM shapes (bench/gemm_bench).
#
#   bench/train_bench.sh [-D name=value ...]
# Environment: THREADS (default: all cores), STEPS (timed steps, default
# 50), BUILD (CMake build dir, default build), JAX_VENV (default
# ~/.cache/dtm-bench/jax-venv; created with `pip install jax[cpu]` when
# missing; never inside the repository).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-50}
JAX_VENV=${JAX_VENV:-$HOME/.cache/dtm-bench/jax-venv}
defs=("$@")
model=models/gpt.dtm
work=$(mktemp -d /tmp/dtm_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

if ! { cmake -S . -B "$BUILD" && cmake --build "$BUILD" -j "$(nproc)" --target dtmc gemm_bench; } \
	>"$work/cmake.log" 2>&1; then
	cat "$work/cmake.log" >&2
	exit 1
fi
dtmc=$BUILD/dtmc

# the same cores for everyone
pin=()
if [ "$THREADS" -lt "$(nproc)" ] && command -v taskset >/dev/null 2>&1; then
	pin=(taskset -c "0-$((THREADS - 1))")
fi
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores online;" \
	"threads $THREADS; $STEPS timed steps after 5 warm-up steps"
cfg=$(python3 bench/gptcfg.py "$dtmc" "$model" "${defs[@]}")
shape=$(python3 -c 'import json,sys; c=json.loads(sys.stdin.read());
print(c["batch"], c["ctx"], c["d"], 4 * c["d"] if "layer.0.wfc" not in c["params"] else c["params"]["layer.0.wfc"]["shape"][1], c["vocab"], c["heads"], c["layers"])' <<<"$cfg")
read -r B T D F V H L <<<"$shape"
echo "model: $model ${defs[*]} (batch $B, ctx $T, d $D, ffn $F, vocab $V, heads $H, layers $L)"
echo

dflags=()
for d in "${defs[@]}"; do dflags+=(-D "$d"); done

# --- dtm ---
dtm_tps=""
if "$dtmc" build "$model" --mesh dp=1 "${dflags[@]}" -o "$work/gpt" >"$work/build.log" 2>&1; then
	"${pin[@]}" "$work/gpt" --steps $((STEPS + 5)) --threads "$THREADS" --log "$work/dtm.jsonl" -q
	dtm_tps=$(python3 - "$work/dtm.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print(statistics.median(r["tokens_per_s"] for r in rows[5:]))
PY
)
	echo "dtm:     $(printf '%.0f' "$dtm_tps") tokens/s"
else
	echo "dtm:     not measured (dtmc build failed: $(head -1 "$work/build.log"))"
fi

# --- PyTorch (Debian's python3-torch on /usr/bin/python3, OpenBLAS) ---
torch_tps=""
if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
	out=$("${pin[@]}" /usr/bin/python3 bench/torch_gpt.py --dtmc "$dtmc" --threads "$THREADS" \
		--steps "$STEPS" "${dflags[@]}")
	torch_tps=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$out")
	blas=$(python3 -c 'import json,sys; print(" ".join(json.loads(sys.argv[1])["blas"]))' "$out")
	echo "pytorch: $(printf '%.0f' "$torch_tps") tokens/s (torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), BLAS: $blas)"
	case $blas in
	*openblas*) ;;
	*) echo "  warning: PyTorch is not using OpenBLAS; see bench/README.md" ;;
	esac
else
	echo "pytorch: not measured (/usr/bin/python3 cannot import torch: apt-get install python3-torch)"
fi

# --- JAX (jit, CPU, from PyPI into a venv outside the repository) ---
jax_tps=""
if [ ! -x "$JAX_VENV/bin/python" ] || ! "$JAX_VENV/bin/python" -c 'import jax' >/dev/null 2>&1; then
	echo "(creating $JAX_VENV with pip install jax[cpu])"
	if ! { python3 -m venv "$JAX_VENV" && "$JAX_VENV/bin/pip" install -q 'jax[cpu]'; } >"$work/pip.log" 2>&1; then
		echo "jax:     not measured (pip install jax[cpu] failed; PyPI unreachable? $(tail -1 "$work/pip.log"))"
	fi
fi
if "$JAX_VENV/bin/python" -c 'import jax' >/dev/null 2>&1; then
	out=$("${pin[@]}" "$JAX_VENV/bin/python" bench/jax_gpt.py --dtmc "$dtmc" --steps "$STEPS" "${dflags[@]}")
	jax_tps=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$out")
	echo "jax:     $(printf '%.0f' "$jax_tps") tokens/s (jax $("$JAX_VENV/bin/python" -c 'import jax; print(jax.__version__)'), jit, CPU)"
fi

if [ -n "$dtm_tps" ]; then
	echo
	[ -n "$torch_tps" ] && python3 -c 'import sys; print(f"dtm / pytorch = {float(sys.argv[1]) / float(sys.argv[2]):.2f}x   (target >= 2x)")' "$dtm_tps" "$torch_tps"
	[ -n "$jax_tps" ] && python3 -c 'import sys; print(f"dtm / jax     = {float(sys.argv[1]) / float(sys.argv[2]):.2f}x")' "$dtm_tps" "$jax_tps"
fi

echo
"${pin[@]}" "$BUILD/bench/gemm_bench" --threads "$THREADS" --min-ms 100 --gpt "$B,$T,$D,$F,$V,$H"
