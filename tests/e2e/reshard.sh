#!/usr/bin/env bash
# reshard.sh DTMC - a checkpoint resumes on any layout (issue 20 points 1, 2
# and 5), on models/gpt.dtm at its default size (ranks as threads).
#
# Saved at step 4 under each of
#   dp=2 x tp=2;  ZeRO-3 over dp=4;  pp=2 x dp=2 with 4 micro-batches;
#   bf16 HSDP (a copy of the model with a replicate axis `rep` in front of
#   dp: rep=2 x dp=2, ZeRO-3 within dp, precision bf16),
# and resumed to step 8 on three other layouts each, one of them 1 rank;
# also to and from interleaved virtual pipeline stages (with 3 layers
# also on the same mesh as 1F1B, whose stages hold other blocks), uneven ZeRO-3
# shards (models/mlp.dtm at batch 6 on dp=3), and models/moe.dtm's experts
# split over ep = 4, ep = 2 with ZeRO-3 over dp = 2, pp = 2 x ep = 2, and whole;
# models/llama.dtm on context parallelism (Ulysses cp = 2, ring cp = 2 x
# tp = 2) and tensor parallelism:
# steps 5-8 equal an uninterrupted 8-step run on the new layout (f32: 1e-5
# relative; the bf16 checkpoint on bf16 layouts, and on an f32 layout whose
# params come from the f32 master copies: 1e-3 of the uninterrupted run on
# the new layout, about 25x the largest difference seen at this size, as
# bf16 rounds differently on each layout).  A resume on the saving layout
# is bit-identical.
set -u
dtmc=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_reshard_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (reshard): $*" >&2; exit 1; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
src=models/gpt.dtm
# the HSDP copy (as tests/e2e/equiv.sh makes it)
sed -e 's/^mesh (\(pp = 1, \)\{0,1\}dp = /mesh (\1rep = 1, dp = /' -e 's/\[dp,/[(rep, dp),/g' \
	"$src" >"$tmp/hsdp.dtm"
grep -q '^mesh (.*rep = 1, dp' "$tmp/hsdp.dtm" || fail "no mesh line to add 'rep' to"

# build NAME [hsdp:|mlp6:|l3:|moe:]MESH [TRAIN...] (mlp6: models/mlp.dtm, batch 6;
# l3: GPT with 3 layers; moe: models/moe.dtm with a shared expert; llama:
# models/llama.dtm)
build() {
	local name=$1 mesh=$2 s=$src
	shift 2
	local args=()
	case $mesh in
	hsdp:*) s=$tmp/hsdp.dtm mesh=${mesh#hsdp:} ;;
	mlp6:*) s=models/mlp.dtm mesh=${mesh#mlp6:} args=(-D batch=6) ;;
	l3:*) mesh=${mesh#l3:} args=(-D layers=3) ;;
	moe:*) s=models/moe.dtm mesh=${mesh#moe:} args=(-D shared=1) ;;
	llama:*) s=models/llama.dtm mesh=${mesh#llama:} ;;
	esac
	args+=(--mesh "$mesh")
	for t in "$@"; do args+=(--train "$t"); done
	"$dtmc" build "$s" -o "$tmp/$name" "${args[@]}" 2>"$tmp/$name.build" ||
		fail "build $name: $(cat "$tmp/$name.build")"
}
# close REF GOT TOL WHAT: steps 5-8 of REF (8 steps) against GOT (resumed)
close() {
	paste <(losses "$1" | sed -n '5,8p') <(losses "$2") | awk -v tol="$3" -v what="$4" '
		{ d = $2 - $4; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; r = s > 0 ? d / s : d
		  if (r > w) w = r
		  if ($1 != $3 || !(r <= tol)) { print what ": step " $1 ": " $2 " vs " $4; bad = 1 } }
		END { if (NR != 4) { print what ": " NR " steps"; bad = 1 }
		      printf "reshard: %s: max rel diff %.3g (limit %g)\n", what, w, tol; exit bad }' ||
		fail "$4: the losses differ"
}

# the layouts (one build each; the uninterrupted 8 steps of each)
build dp2tp2 pp=1,dp=2,tp=2 &
build z3dp4 pp=1,dp=4,tp=1 zero=3 &
build pp2dp2 pp=2,dp=2,tp=1 microbatches=4 &
build one pp=1,dp=1,tp=1 &
wait
build hsdpbf hsdp:pp=1,rep=2,dp=2,tp=1 zero=3 precision=bf16 &
build onebf pp=1,dp=1,tp=1 precision=bf16 &
build dp2tp2bf pp=1,dp=2,tp=2 zero=1 precision=bf16 &
build pp2bf pp=2,dp=2,tp=1 microbatches=4 precision=bf16 &
wait
build vpp pp=2,dp=1,tp=1 microbatches=4 "schedule=interleaved(2)" &
build u3 mlp6:dp=3,tp=1 zero=3 &
build u22 mlp6:dp=2,tp=2 &
build u1 mlp6:dp=1,tp=1 &
wait
build vpp3 l3:pp=2,dp=1,tp=1 microbatches=4 "schedule=interleaved(2)" &
build pp3 l3:pp=2,dp=1,tp=1 microbatches=4 &
wait
build me4 moe:pp=1,dp=1,ep=4,tp=1 &
build me2z3 moe:pp=1,dp=2,ep=2,tp=1 zero=3 &
build mpp moe:pp=2,dp=1,ep=2,tp=1 &
build mone moe:pp=1,dp=1,ep=1,tp=1 &
wait
build lcp2 llama:pp=1,dp=1,cp=2,tp=1 &
build lring llama:pp=1,dp=1,cp=2,tp=2 context_parallel=ring &
build ltp2 llama:pp=1,dp=2,cp=1,tp=2 zero=1 &
wait
for b in dp2tp2 z3dp4 pp2dp2 one hsdpbf onebf dp2tp2bf pp2bf vpp u3 u22 u1 vpp3 pp3 \
	me4 me2z3 mpp mone lcp2 lring ltp2; do
	[ -x "$tmp/$b" ] || fail "no binary $b"
	"$tmp/$b" --steps 8 --log "$tmp/$b.full.jsonl" -q || fail "$b: 8 steps"
done

# resume SRC DST TOL: SRC's step-4 checkpoint on DST
resume() {
	local from=$1 to=$2 tol=$3
	[ -d "$tmp/$from.ck" ] || "$tmp/$from" --steps 4 --save "$tmp/$from.ck" -q ||
		fail "$from: 4 steps + save"
	"$tmp/$to" --steps 8 --resume "$tmp/$from.ck" --log "$tmp/$from.$to.jsonl" -q \
		2>"$tmp/$from.$to.err" || fail "$from -> $to: $(grep -m3 error "$tmp/$from.$to.err")"
	close "$tmp/$to.full.jsonl" "$tmp/$from.$to.jsonl" "$tol" "saved on $from, resumed on $to"
}
resume dp2tp2 one 1e-5
resume dp2tp2 z3dp4 1e-5
resume dp2tp2 pp2dp2 1e-5
resume z3dp4 one 1e-5
resume z3dp4 dp2tp2 1e-5
resume z3dp4 pp2dp2 1e-5
resume pp2dp2 one 1e-5
resume pp2dp2 dp2tp2 1e-5
resume pp2dp2 z3dp4 1e-5
resume hsdpbf onebf 1e-3
resume hsdpbf dp2tp2bf 1e-3
resume hsdpbf pp2bf 1e-3
resume hsdpbf one 1e-3
# virtual pipeline stages (interleaved(2): two model chunks a rank)
resume vpp one 1e-5
resume vpp dp2tp2 1e-5
resume dp2tp2 vpp 1e-5
# ... on the same mesh and placements, the blocks on other stages: 3
# layers on pp = 2 as 1F1B's stages 0, 0, 1 and interleaved(2)'s chunks 0,
# 1, 2 (ranks 0, 1, 0); a rank's own file lacks what the other schedule
# put on it (the resume failed: "rank00000.safetensors has no tensor")
resume pp3 vpp3 1e-5
resume vpp3 pp3 1e-5
# uneven shards: the MLP at batch 6, ZeRO-3 over dp=3 (w1's 32 rows as
# 11, 11, 10; b2's 8 as 3, 3, 2)
resume u3 u22 1e-5
resume u3 u1 1e-5
resume u22 u3 1e-5
# experts over ep (an expert's weights on one rank, its moments too) to
# other ep sizes, ZeRO-3, a pipeline and one rank
resume me4 mone 1e-5
resume me4 me2z3 1e-5
resume me2z3 me4 1e-5
resume mpp me4 1e-5
resume mone mpp 1e-5
# LLaMA (GQA, RoPE) from and to context parallelism
resume lcp2 ltp2 1e-5
resume ltp2 lring 1e-5
resume lring lcp2 1e-5

# the saving layout: bit for bit
"$tmp/pp2dp2" --steps 8 --resume "$tmp/pp2dp2.ck" --log "$tmp/same.jsonl" -q ||
	fail "pp2dp2 on its own checkpoint"
[ "$(losses "$tmp/same.jsonl")" = "$(losses "$tmp/pp2dp2.full.jsonl" | sed -n '5,8p')" ] ||
	fail "pp2dp2 resumed on its own layout is not bit-identical"
echo "reshard: saved and resumed on pp2dp2: bit-identical"
echo "reshard ok"
