#!/usr/bin/env bash
# ckpt_tools.sh DTMC - `dtmc ckpt info|merge|split` with the Python
# safetensors package (issue 20 points 3 and 5), on models/gpt.dtm in bf16
# with f32 master weights, saved at step 4 on dp=2 x tp=2 (ZeRO-1):
#   1. info names the step, the mesh and what each rank file holds;
#   2. merge writes one file of whole tensors that the safetensors package
#      loads (the JAX venv of scripts/deps.sh: bf16 as bf16): params bf16,
#      master copies and optimizer state f32, each param its master copy
#      rounded to bf16, the step in the metadata;
#   3. Python saves what it loaded to a new file; split cuts it for pp=2 x
#      dp=2 (4 micro-batches); resuming there gives, bit for bit, the
#      losses of resuming on pp=2 x dp=2 from the original checkpoint
#      (which reshards on load): the same state either way;
#   4. merge --params, saved again without metadata (a state dict as
#      PyTorch writes one), then split: the optimizer state starts at zero
#      (and the tool says so), the run starts at step 0 from those weights;
#      a file without a param of the
#      model is refused naming it; exit 1 and nothing written on errors.
set -u
dtmc=$1
py=${JAX_VENV:-$HOME/.cache/dtm-bench/jax-venv}/bin/python
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_ckpttools_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (ckpt tools): $*" >&2; exit 1; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
"$py" -c 'import safetensors.flax' 2>/dev/null ||
	fail "no safetensors in $py: run scripts/deps.sh (it installs JAX and safetensors there)"
src=models/gpt.dtm
"$dtmc" build "$src" --mesh dp=2,tp=2 --train zero=1 --train precision=bf16 -o "$tmp/a" ||
	fail "build dp2 x tp2"
"$dtmc" build "$src" --mesh pp=2,dp=2,tp=1 --train microbatches=4 --train precision=bf16 \
	-o "$tmp/b" || fail "build pp2 x dp2"
"$tmp/a" --steps 4 --save "$tmp/ck" -q || fail "4 steps + save"

# 1. info
"$dtmc" ckpt info "$tmp/ck" >"$tmp/info.txt" || fail "ckpt info"
grep -q "step 4, seed 0, model gpt" "$tmp/info.txt" || fail "info: $(head -2 "$tmp/info.txt")"
grep -q "mesh: pp=1 x dp=2 x tp=2, 4 rank files" "$tmp/info.txt" || fail "info: no mesh line"
grep -qE '^  rank00001.safetensors \(pp=0, dp=0, tp=1\): [0-9]+ tensors, [0-9]+ bytes: wte\[128, 64\]' \
	"$tmp/info.txt" || fail "info: rank 1's file: $(grep rank00001 "$tmp/info.txt" | cut -c1-120)"
echo "ckpt tools: info: $(sed -n 2p "$tmp/info.txt")"

# 2. merge, read in Python
"$dtmc" ckpt merge "$tmp/ck" -o "$tmp/merged.safetensors" || fail "ckpt merge"
"$py" - "$tmp/merged.safetensors" "$tmp/py.safetensors" <<'PY' || fail "Python's check of the merged file"
import sys
import jax.numpy as jnp
from safetensors import safe_open
from safetensors.flax import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
t = load_file(src)
with safe_open(src, framework="flax") as f:
    meta = f.metadata()
assert meta["step"] == "4" and meta["model"] == "gpt", meta
w = t["wte"]
assert w.dtype == jnp.bfloat16 and w.shape == (256, 64), (w.dtype, w.shape)
m = t["opt.master.wte"]
assert m.dtype == jnp.float32, m.dtype
assert bool((m.astype(jnp.bfloat16) == w).all()), "wte is not its master copy in bf16"
assert t["opt.m.layer.1.wfc"].shape == (64, 256)
print("ckpt tools: Python read %d tensors (wte %s %s), step %s" % (len(t), w.dtype, w.shape, meta["step"]))
save_file(t, dst, metadata=meta)
PY

# 3. split what Python wrote, resume: the original's resharded resume
"$dtmc" ckpt split "$tmp/py.safetensors" "$src" --mesh pp=2,dp=2,tp=1 \
	--train microbatches=4 --train precision=bf16 -o "$tmp/split" >"$tmp/split.txt" ||
	fail "ckpt split"
grep -q "4 rank files" "$tmp/split.txt" || fail "split: $(cat "$tmp/split.txt")"
"$tmp/b" --steps 8 --resume "$tmp/split" --log "$tmp/split.jsonl" -q || fail "resume from split"
"$tmp/b" --steps 8 --resume "$tmp/ck" --log "$tmp/direct.jsonl" -q || fail "resume resharded"
[ "$(losses "$tmp/split.jsonl" | wc -l)" -eq 4 ] || fail "split resume: no 4 losses"
[ "$(losses "$tmp/split.jsonl")" = "$(losses "$tmp/direct.jsonl")" ] ||
	fail "merge -> Python -> split -> resume differs from the resharded resume:
$(paste <(losses "$tmp/split.jsonl") <(losses "$tmp/direct.jsonl"))"
echo "ckpt tools: merge -> Python -> split -> resume: the resharded resume's losses, bit for bit"

# 4. params only; errors
"$dtmc" ckpt merge "$tmp/ck" -o "$tmp/params.safetensors" --params || fail "merge --params"
"$py" -c "
from safetensors.flax import load_file
import sys; t = load_file(sys.argv[1]); assert not [k for k in t if k.startswith('opt.')], list(t)[:5]
" "$tmp/params.safetensors" || fail "merge --params wrote optimizer state"
# as PyTorch's save_file(model.state_dict()) writes it: no metadata
"$py" -c "
from safetensors.flax import load_file, save_file
import sys; save_file(load_file(sys.argv[1]), sys.argv[2])
" "$tmp/params.safetensors" "$tmp/state_dict.safetensors" || fail "Python: a state dict"
"$dtmc" ckpt split "$tmp/state_dict.safetensors" "$src" --mesh dp=2 -o "$tmp/fresh" \
	>"$tmp/fresh.txt" || fail "split of params only"
grep -q "optimizer state the file lacks starts at zero" "$tmp/fresh.txt" ||
	fail "split of params only: $(cat "$tmp/fresh.txt")"
"$dtmc" build "$src" --mesh dp=2 -o "$tmp/c" || fail "build dp2"
"$tmp/c" --steps 6 --resume "$tmp/fresh" --log "$tmp/fresh.jsonl" -q || fail "resume from params only"
[ "$(losses "$tmp/fresh.jsonl" | wc -l)" -eq 6 ] || fail "params only: no 6 losses (a start at step 0)"
"$py" -c "
from safetensors.flax import load_file, save_file
import sys; t = load_file(sys.argv[1]); del t['layer.1.wfc']; save_file(t, sys.argv[2])
" "$tmp/params.safetensors" "$tmp/short.safetensors"
"$dtmc" ckpt split "$tmp/short.safetensors" "$src" --mesh dp=2 -o "$tmp/short" 2>"$tmp/err.txt" &&
	fail "split of a file without layer.1.wfc exited 0"
grep -q "the file has no tensor 'layer.1.wfc'" "$tmp/err.txt" || fail "split: $(cat "$tmp/err.txt")"
[ -e "$tmp/short/latest" ] && fail "a failed split moved latest"
"$dtmc" ckpt merge "$tmp/nope" -o "$tmp/x.safetensors" 2>"$tmp/err.txt" && fail "merge of nothing exited 0"
[ -e "$tmp/x.safetensors" ] && fail "a failed merge wrote its file"
echo "ckpt tools: errors: $(head -1 "$tmp/err.txt")"
echo "ckpt tools ok"
