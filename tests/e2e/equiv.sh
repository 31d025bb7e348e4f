#!/usr/bin/env bash
# equiv.sh DTMC MODEL [MPIRUN|none] - every layout trains like one device
# (issue 4 point 6, the project's core test).
#
# Builds models/MODEL.dtm for one device (--mesh dp=1) and for each layout
# below, trains 10 steps with the same seed on the runtime (ranks as
# threads), and checks:
#   1. each step's loss and global grad norm equal the one-device ones to
#      1e-5 relative;
#   2. the final checkpoint, gathered from the per-rank shards, equals the
#      one-device weights and optimizer state (tests/e2e/ckcompare.py: 1e-5
#      of each tensor's max |value|; replicas must agree with each other).
# With MPIRUN, a subset also runs as processes (`mpirun -np N ./NAME
# --backend mpi`): its losses must equal the local backend's to 1e-6 (the
# script says when they are bitwise equal) and its checkpoint the same
# gathered weights.
#
# Dropping any collective breaks (1) or (2): a missing gradient all_reduce
# leaves replicas apart, a missing loss all_reduce changes the logged loss,
# a missing activation all_reduce changes both.
set -u
dtmc=$1 model=$2 mpirun=${3:-none}
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_equiv_${model}_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($model): $*" >&2; exit 1; }
steps=10 seed=0

# A layout is [hsdp:]MESH[/KEY=VALUE...]: the --mesh, then --train
# overrides of the model's train section (dtmc help build).  hsdp: builds a
# copy of the model with a replicate axis `rep` in front of dp and the batch
# split over (rep, dp), so `zero N` (over dp, the default) shards within
# each dp group and replicates across rep: HSDP.  The one-device reference
# is the same for every layout: these only say where values live.
#   DDP; TP; DP x TP; ZeRO-1/2/3 (dp=4), ZeRO-3 without resharding after
#   forward; HSDP (rep=2 x dp=2, zero 3); FSDP x TP (dp=2 x tp=2, zero 3);
#   TP and DP x TP (2x2) with sequence parallelism
zero="dp=4/zero=1 dp=4/zero=2 dp=4/zero=3 dp=4/zero=3/reshard_after_forward=false"
zero="$zero hsdp:rep=2,dp=2/zero=3 dp=2,tp=2/zero=3"
# Sequence parallelism (Megatron SP): TP and DP x TP with the residual
# stream split along T, reduce_scatter / all_gather instead of all_reduce
sp="tp=2/sequence_parallel=true dp=2,tp=2/sequence_parallel=true"
case $model in
mlp) layouts="dp=4 tp=2 tp=4 dp=2,tp=2 $zero"; mpi_layouts="dp=2,tp=2 dp=4/zero=3" ;;
gpt) layouts="dp=4 tp=2 tp=4 dp=2,tp=2 $zero $sp"; mpi_layouts="dp=4 dp=4/zero=3" ;;
*) fail "no layouts listed for model '$model'" ;;
esac

"$py" -c "import numpy" 2>/dev/null || fail "$py has no numpy (scripts/deps.sh)"

# The HSDP copy of the model: a replicate axis of size 1 in front of dp
# (sizes come from --mesh) and every dp-split batch dim split over (rep, dp)
sed -e 's/^mesh (\(pp = 1, \)\{0,1\}dp = /mesh (\1rep = 1, dp = /' -e 's/\[dp,/[(rep, dp),/g' \
	"models/$model.dtm" >"$tmp/$model.hsdp.dtm"
grep -q '^mesh (.*rep = 1, dp' "$tmp/$model.hsdp.dtm" || fail "no mesh line to add 'rep' to"

# layout_name LAYOUT: a file name for it; layout_mesh LAYOUT: its --mesh
layout_name() { local n=${1//[=,:\/]/_}; echo "m_${n//[^A-Za-z0-9_]/}"; }
layout_mesh() { local l=${1#hsdp:}; echo "${l%%/*}"; }

# build NAME LAYOUT: models/MODEL.dtm (or its HSDP copy) -> $tmp/NAME
build() {
	local l=$2 src="models/$model.dtm" args=()
	case $l in hsdp:*) src=$tmp/$model.hsdp.dtm l=${l#hsdp:} ;; esac
	args=(--mesh "${l%%/*}")
	local rest=${l#"${l%%/*}"} kv
	IFS=/ read -ra kv <<<"${rest#/}"
	for t in "${kv[@]}"; do [ -n "$t" ] && args+=(--train "$t"); done
	"$dtmc" build "$src" -o "$tmp/$1" "${args[@]}" 2>"$tmp/$1.build.txt" ||
		{ cat "$tmp/$1.build.txt" >&2; fail "dtmc build ${args[*]} failed"; }
}

# "step loss grad_norm" per line of a --log file
losses() {
	sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"
}

# cmp_losses REF GOT RTOL WHAT: same steps, |a-b| <= RTOL |a| for the loss
# and the global grad norm (which SGD without clipping reads nowhere else:
# a dropped grad-norm all_reduce shows only there); prints the largest
# relative differences
cmp_losses() {
	[ "$(losses "$1" | wc -l)" -eq "$steps" ] || fail "$4: the reference log has no $steps losses"
	[ "$(losses "$2" | wc -l)" -eq "$steps" ] || fail "$4: the log has no $steps losses"
	paste <(losses "$1") <(losses "$2") | awk -v tol="$3" -v what="$4" '
		function rel(a, b,  d, s) { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a
		                            return s > 0 ? d / s : d }
		{ if ($1 != $4) { print what ": step " $1 " vs " $4; bad = 1; next }
		  r = rel($2, $5); g = rel($3, $6)
		  if (r > worst) worst = r
		  if (g > gworst) gworst = g
		  if (!(r <= tol)) { printf "%s: step %d loss %s vs %s (rel %.3g)\n", what, $1, $2, $5, r; bad = 1 }
		  if (!(g <= tol)) { printf "%s: step %d grad_norm %s vs %s (rel %.3g)\n", what, $1, $3, $6, g; bad = 1 } }
		END { printf "%s: max rel diff: loss %.3g, grad_norm %.3g (limit %g)\n", what, worst, gworst, tol
		      exit bad }' ||
		fail "$4: losses differ"
}

# Compiling the binaries takes most of the time: build them all first,
# as many at a time as there are cores
jobs=$(nproc 2>/dev/null || echo 2) running=0
for mesh in dp=1 $layouts; do
	if [ "$mesh" = dp=1 ]; then name=one; else name=$(layout_name "$mesh"); fi
	build "$name" "$mesh" &
	running=$((running + 1))
	if [ $running -ge "$jobs" ]; then
		wait -n || exit 1
		running=$((running - 1))
	fi
done
while [ $running -gt 0 ]; do
	wait -n || exit 1
	running=$((running - 1))
done

"$tmp/one" --steps $steps --seed $seed --log "$tmp/one.jsonl" --save "$tmp/one.ck" -q ||
	fail "one-device training failed"
ref_ck=$tmp/one.ck/step_$(printf %06d $steps)

for mesh in $layouts; do
	name=$(layout_name "$mesh")
	"$tmp/$name" --steps $steps --seed $seed --log "$tmp/$name.jsonl" --save "$tmp/$name.ck" -q ||
		fail "$mesh: training failed"
	cmp_losses "$tmp/one.jsonl" "$tmp/$name.jsonl" 1e-5 "$model $mesh (local)"
	"$py" "$here/ckcompare.py" "$ref_ck" "$tmp/$name.ck/step_$(printf %06d $steps)" ||
		fail "$mesh: the final weights differ from one device's"
done

if [ "$mpirun" = none ] || [ -z "$mpirun" ]; then
	echo "$model: mpi layouts skipped (no mpirun, or dtmc built without MPI)"
	echo "ok"
	exit 0
fi
# Open MPI refuses root unless told; vader's single-copy (CMA) needs ptrace,
# which containers often forbid
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
for mesh in $mpi_layouts; do
	name=$(layout_name "$mesh")
	[ -x "$tmp/$name" ] || build "$name" "$mesh"
	np=$(layout_mesh "$mesh" | tr ',' '\n' | awk -F= '{ n = (NR == 1 ? 1 : n) * $2 } END { print n }')
	timeout 300 "$mpirun" -np "$np" --allow-run-as-root --oversubscribe "$tmp/$name" --backend mpi \
		--steps $steps --seed $seed --log "$tmp/$name.mpi.jsonl" --save "$tmp/$name.mpi.ck" -q \
		>"$tmp/$name.mpi.txt" 2>&1 || { cat "$tmp/$name.mpi.txt" >&2; fail "$mesh under mpirun failed"; }
	if [ ! -f "$tmp/$name.jsonl" ]; then
		"$tmp/$name" --steps $steps --seed $seed --log "$tmp/$name.jsonl" -q ||
			fail "$mesh: training failed"
	fi
	if [ "$(losses "$tmp/$name.jsonl")" = "$(losses "$tmp/$name.mpi.jsonl")" ]; then
		echo "$model $mesh (mpi, $np processes): losses bitwise equal to the local backend's"
	fi
	cmp_losses "$tmp/$name.jsonl" "$tmp/$name.mpi.jsonl" 1e-6 "$model $mesh (mpi vs local)"
	cmp_losses "$tmp/one.jsonl" "$tmp/$name.mpi.jsonl" 1e-5 "$model $mesh (mpi vs one device)"
	"$py" "$here/ckcompare.py" "$ref_ck" "$tmp/$name.mpi.ck/step_$(printf %06d $steps)" ||
		fail "$mesh under mpirun: the final weights differ from one device's"
done
echo "ok"
