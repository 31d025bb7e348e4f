#!/usr/bin/env bash
# precision.sh DTMC - mixed precision trains like f32 (issue 14.2).
#
# tests/e2e/mixed_loss.dtm is models/mlp.dtm with a loss that adds f32
# terms to bf16 ones (`mse(p, y) + 0.01 * mean(h) + ...`), which `precision
# bf16` used to refuse (add: operand dtypes differ: f32[] vs bf16[]), and a
# user's `cast`.  Built with precision f32 on one device (the reference),
# bf16 on one device and on dp=2 x tp=2, and f16 on one device, each
# trained 20 steps with seed 0: every step's loss and global grad norm must
# be f32's to the low precision's tolerance.  The mixed-precision policy
# (issue 16.3): bf16 with its default f32 reduce_dtype accumulates 2
# micro-batches and reduces over dp=2 in f32; with reduce_dtype bf16 (the
# behaviour before the policy) it does both in bf16; with master_dtype
# bf16 the (SGD) update runs on the bf16 params, no master copy.
# Measured over 20 steps with seeds 0-3 (SEED=k runs seed k), max relative
# difference in the loss / grad norm: bf16 one device 1.23e-3 / 1.53e-3,
# dp=2 x tp=2 1.38e-3 / 1.91e-3, 2 micro-batches on dp=2 with f32 reduce
# 1.24e-3 / 1.28e-3 and with bf16 reduce 1.68e-3 / 1.79e-3, no master
# 3.14e-3 / 2.28e-3, f16 1.54e-4 / 1.68e-4 (f32 on dp=2 x tp=2: 1.1e-7);
# the limits are about 2.5-3x those.
set -u
dtmc=$1
model=tests/e2e/mixed_loss.dtm
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_precision_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (precision): $*" >&2; exit 1; }
steps=20

# NAME MESH TRAIN LOSS_TOL GRAD_NORM_TOL (the reference first); TRAIN is
# the --train settings, comma-separated
runs="f32 dp=1 precision=f32 0 0
bf16 dp=1 precision=bf16 4e-3 5e-3
bf16_dp2tp2 dp=2,tp=2 precision=bf16 4e-3 5e-3
bf16_m2dp2 dp=2 precision=bf16,microbatches=2 4e-3 5e-3
bf16_rbf16_m2dp2 dp=2 precision=bf16,microbatches=2,reduce_dtype=bf16 4e-3 5e-3
bf16_nomaster dp=1 precision=bf16,master_dtype=bf16 1e-2 7e-3
f16 dp=1 precision=f16,loss_scale=off 6e-4 6e-4"
# (f16 without loss scaling: its default, dynamic, skips the first steps
# while the scale backs off; tests/e2e/loss_scale.sh tests that)

while read -r name mesh train _ _; do
	targs=()
	IFS=, read -ra sets <<<"$train"
	for s in "${sets[@]}"; do targs+=(--train "$s"); done
	"$dtmc" build "$model" -o "$tmp/$name" --mesh "$mesh" "${targs[@]}" \
		2>"$tmp/$name.build.txt" || { cat "$tmp/$name.build.txt" >&2; fail "$name: dtmc build failed"; }
	"$tmp/$name" --steps $steps --seed "${SEED:-0}" --log "$tmp/$name.jsonl" -q 2>"$tmp/$name.err" ||
		{ cat "$tmp/$name.err" >&2; fail "$name: training failed"; }
done <<<"$runs"

# the gradients cross dp once per step (one bucket, not one per micro-batch),
# in reduce_dtype
for want in f32 bf16; do
	"$dtmc" inspect "$model" --mesh dp=2 --train precision=bf16 --train microbatches=2 \
		--train reduce_dtype=$want --json >"$tmp/r.json" 2>"$tmp/r.err" ||
		{ cat "$tmp/r.err" >&2; fail "dtmc inspect failed"; }
	python3 - "$tmp/r.json" "$want" <<'PY' || fail "the gradients are not reduced once in $want"
import json, sys
d = json.load(open(sys.argv[1]))
bw = [(r["kind"], r["dtype"]) for r in d["stages"][0]["comm"] if r["phase"] == "backward"]
print(f"reduce_dtype {sys.argv[2]}: backward collectives {bw}")
sys.exit(bw != [("all_reduce", sys.argv[2])])
PY
done

losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"; }
[ "$(losses "$tmp/f32.jsonl" | wc -l)" -eq $steps ] || fail "the f32 log has no $steps losses"
while read -r name mesh train tol gtol; do
	[ "$name" = f32 ] && continue
	[ "$(losses "$tmp/$name.jsonl" | wc -l)" -eq $steps ] || fail "$name: the log has no $steps losses"
	paste <(losses "$tmp/f32.jsonl") <(losses "$tmp/$name.jsonl") |
		awk -v tol="$tol" -v gtol="$gtol" -v what="$train on $mesh vs f32" '
		function rel(a, b,  d, s) { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a
		                            return s > 0 ? d / s : d }
		{ r = rel($2, $5); g = rel($3, $6)
		  if (r > worst) worst = r
		  if (g > gworst) gworst = g
		  if (!(r <= tol)) { printf "%s: step %d loss %s vs %s (rel %.3g)\n", what, $1, $2, $5, r; bad = 1 }
		  if (!(g <= gtol)) { printf "%s: step %d grad_norm %s vs %s (rel %.3g)\n", what, $1, $3, $6, g; bad = 1 } }
		END { printf "%s: max rel diff: loss %.3g, grad_norm %.3g (limits %g, %g)\n", what, worst,
		             gworst, tol, gtol
		      exit bad }' || fail "$name: the losses are not f32's"
done <<<"$runs"
# the loss falls (the model learns, in every precision)
for name in f32 bf16 bf16_m2dp2 bf16_nomaster f16; do
	first=$(losses "$tmp/$name.jsonl" | sed -n '1p' | cut -d' ' -f2)
	last=$(losses "$tmp/$name.jsonl" | sed -n '$p' | cut -d' ' -f2)
	awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' ||
		fail "$name: the loss did not fall: $first -> $last"
done
echo "ok"
