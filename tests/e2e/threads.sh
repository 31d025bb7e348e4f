#!/usr/bin/env bash
# threads.sh DTMC - the thread count changes speed, never values (issue 13
# point 9).
#
# The default --threads follows the host's cores, so a binary that gave
# other bits on another thread count would train differently on another
# machine.  Builds models/gpt.dtm for one device and for DP x TP (dp=2,tp=2),
# an odd-shaped GPT in bf16 (B*T = 217, d = 80: no row count, element count
# or pool range boundary a multiple of 16), and models/mlp.dtm on its own
# mesh; trains each 5 steps with --threads 1, 2, 3 and 4, and checks:
#   1. the losses and grad norms of the four runs are the same text;
#   2. the final checkpoints are the same bytes (every rank's safetensors
#      file: weights and optimizer state);
# and that the f32 GEMM library (DTM_SGEMM) changes values by rounding only.
# Three threads cut the work unevenly (a 256-row GEMM in 48 + 48 + 32 rows
# when GEMMs were split per thread: other bits from OpenBLAS); two and four
# evenly, one not at all.
set -u
dtmc=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_threads_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (threads): $*" >&2; exit 1; }
steps=5

# "step loss grad_norm" per line of a --log file
losses() {
	sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"
}

# NAME MODEL [dtmc build args...]
check() {
	local name=$1 model=$2
	shift 2
	"$dtmc" build "models/$model.dtm" -o "$tmp/$name" "$@" 2>"$tmp/$name.build.txt" ||
		{ cat "$tmp/$name.build.txt" >&2; fail "$name: build failed"; }
	for t in 1 2 3 4; do
		timeout 300 "$tmp/$name" --steps $steps --threads $t --log "$tmp/$name.$t.jsonl" \
			--save "$tmp/$name.ck$t" -q 2>"$tmp/$name.$t.txt" ||
			{ cat "$tmp/$name.$t.txt" >&2; fail "$name --threads $t: training failed"; }
		[ "$(losses "$tmp/$name.$t.jsonl" | wc -l)" -eq $steps ] ||
			fail "$name --threads $t: no $steps losses"
	done
	local last files
	last=$(printf 'step_%06d' $steps)
	files=$(cd "$tmp/$name.ck1/$last" && ls -- *.safetensors)
	[ -n "$files" ] || fail "$name: no checkpoint in $tmp/$name.ck1/$last"
	for t in 2 3 4; do
		[ "$(losses "$tmp/$name.$t.jsonl")" = "$(losses "$tmp/$name.1.jsonl")" ] || {
			paste <(losses "$tmp/$name.1.jsonl") <(losses "$tmp/$name.$t.jsonl") >&2
			fail "$name: losses with --threads $t differ from --threads 1"
		}
		for f in $files; do
			cmp -s "$tmp/$name.ck1/$last/$f" "$tmp/$name.ck$t/$last/$f" ||
				fail "$name: $last/$f with --threads $t differs from --threads 1"
		done
	done
	echo "$name: losses, grad norms and $(echo $files | wc -w) checkpoint file(s) identical" \
		"with --threads 1, 2, 3, 4 (step $steps: $(losses "$tmp/$name.1.jsonl" | tail -n 1))"
}

check gpt gpt --mesh dp=1
check gpt_dp2tp2 gpt --mesh dp=2,tp=2
check gpt_odd gpt --mesh dp=1 -D batch=7 -D ctx=31 -D d=80 -D heads=5 --train precision=bf16
check mlp mlp

# The f32 GEMM library (runtime/dev_cpu.c: OpenBLAS, or oneDNN's sgemm
# where OpenBLAS's kernels leave AVX-512 unused): DTM_SGEMM=openblas and
# onednn each name their library under -v, train the same losses within
# rounding (1e-5 relative: other blockings of the sums), and a bad value
# is named and ignored.
lib() { DTM_SGEMM=$1 "$tmp/gpt" --steps 1 -v -q 2>&1 | sed -n 's/.*; BLAS \(.*\); data .*/\1/p'; }
lo=$(lib openblas) ld=$(lib onednn)
case $lo in openblas*) ;; *) fail "DTM_SGEMM=openblas runs BLAS '$lo'" ;; esac
DTM_SGEMM=bogus "$tmp/gpt" --steps 1 -q 2>&1 | grep -q "DTM_SGEMM=bogus is not openblas or onednn" ||
	fail "DTM_SGEMM=bogus is not reported"
if [ "$lo" != "$ld" ]; then
	case $ld in onednn*) ;; *) fail "DTM_SGEMM=onednn runs BLAS '$ld'" ;; esac
	for l in openblas onednn; do
		DTM_SGEMM=$l "$tmp/gpt" --steps $steps --log "$tmp/lib.$l.jsonl" -q ||
			fail "DTM_SGEMM=$l: training failed"
	done
	paste <(losses "$tmp/lib.openblas.jsonl") <(losses "$tmp/lib.onednn.jsonl") | awk '
		function rel(a, b) { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; return d / (m > 1e-30 ? m : 1) }
		{ n++; if (rel($2, $5) > 1e-5 || rel($3, $6) > 1e-5) { print "step " $1 ": " $0; bad = 1 } }
		END { exit bad || n != '$steps' }' ||
		fail "gpt: the losses with DTM_SGEMM=openblas and onednn differ by more than 1e-5"
	echo "gpt: DTM_SGEMM=openblas ($lo) and onednn ($ld): losses and grad norms within 1e-5"
else
	echo "gpt: one f32 GEMM library here ($lo): oneDNN not built in"
fi
echo "ok"
