#!/usr/bin/env bash
# attn_bench.sh - dtm's CPU attention kernels (bench/attn_bench.c) against
# PyTorch's (bench/attn_torch.py: scaled_dot_product_attention and the
# explicit softmax(QK^T/sqrt(hd) + mask) V) on the same shapes, threads and
# cores (issue 17 point 5).
#
#   bench/attn_bench.sh [B,H,T,HD[,KVH] ...]     # default 2,8,512,64 2,8,2048,64
#
# Environment: BF16=1 (both sides on bf16 tensors), THREADS (default: the
# cores), MIN_MS (default 300), BUILD
# (default build), TORCH_PY: the python with PyTorch (default
# ~/.cache/dtm-bench/torch-venv/bin/python when it exists, else
# /usr/bin/python3, whose Debian torch 1.13 has no
# scaled_dot_product_attention: only the explicit form is timed then).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
THREADS=${THREADS:-$(nproc)}
MIN_MS=${MIN_MS:-300}
BUILD=${BUILD:-build}
venv_py=$HOME/.cache/dtm-bench/torch-venv/bin/python
TORCH_PY=${TORCH_PY:-$([ -x "$venv_py" ] && echo "$venv_py" || echo /usr/bin/python3)}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=("2,8,512,64" "2,8,2048,64")
log=$(mktemp /tmp/dtm_attn_bench.XXXXXX)
trap 'rm -f "$log"' EXIT
if ! cmake --build "$BUILD" -j "$(nproc)" --target attn_bench >"$log" 2>&1; then
	cat "$log" >&2
	exit 1
fi

# the same cores for both
pin=()
if [ "$THREADS" -lt "$(nproc)" ] && command -v taskset >/dev/null 2>&1; then
	pin=(taskset -c "0-$((THREADS - 1))")
fi
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

machine_line "threads $THREADS"
prec=()
[ "${BF16:-0}" = 1 ] && prec=(--bf16)
"${pin[@]}" "$BUILD/bench/attn_bench" --threads "$THREADS" --min-ms "$MIN_MS" "${prec[@]}" "${shapes[@]}"
echo
"${pin[@]}" "$TORCH_PY" bench/attn_torch.py --threads "$THREADS" --min-ms "$MIN_MS" "${prec[@]}" \
	"${shapes[@]}"
echo "(fwd: forward only; fwdbwd: forward then backward; GF/s: nominal FLOPs, see attn_bench.c;"
echo " load at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
