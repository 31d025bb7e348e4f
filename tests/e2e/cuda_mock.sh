#!/usr/bin/env bash
# cuda_mock.sh DTMC MODEL MOCKLIB CUDALIB KERNELSLIB RUNTIMELIB SUPPORTLIB [BLASLIB]
#
# The cuda device (runtime/dev_cuda.c) run end to end without a GPU: the
# program dtmc generates for MODEL is linked with tests/cuda_mock (CUDA,
# cuBLAS, NVRTC and NCCL emulated on the CPU; see cuda_mock.c) instead of
# CUDA's libraries, and `--device cuda` must then train exactly what the CPU
# trains, with streams run in both extreme orders the events allow
# (DTM_MOCK_ORDER compute|comm):
#   one rank; DP x TP (dp=2, tp=2, 4 ranks as threads); ZeRO-3 over dp=4;
#   (each multi-rank run's collectives, sends and recvs per kind, counted
#   where they are handed to NCCL and printed by -v, are inspect's);
#   DP x TP in bf16 (losses within 1e-2); GPT with sequence parallelism and
#   as a 2-stage pipeline (send/recv);
#   --eval-every; --check-numerics; --save then --resume;
#   the cubin cache (compiled once, then read back);
#   `dtmc calibrate --device cuda`'s runtime parts: --profile-actions on
#   the device (every kernel and GEMM the CPU's profile has, each timed by
#   its events: the mock's 0.01 ms) and, for the mlp, --calibrate-gemm on
#   the device (cuBLAS's grid of 120 shapes in f32 and bf16 through the
#   runtime's GEMM call, each rate 2 m n k x calls / their time);
#   no GPU -> "no CUDA driver/device"; 4 ranks on 2 GPUs -> an error.
set -u
dtmc=$1 model=$2 mock=$3 cudalib=$4 kernlib=$5 rtlib=$6 supportlib=$7 blas=${8:-}
blas=${blas//|/ } # BLAS and oneDNN's libraries, '|'-separated
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_cuda_mock_${model}_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($model): $*" >&2; exit 1; }
export XDG_CACHE_HOME=$tmp/cache
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
evals() { sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$1"; }
# same FILE1 FILE2 N: the first N steps' losses within TOL (1e-5) relative
same() {
	paste <(losses "$1" | head -n "$3") <(losses "$2") | awk -v n="$3" -v tol="${TOL:-1e-5}" '
		{ k++; d = $2 - $4; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2;
		  if ($1 != $3 || d > tol * s) { bad++; print "  step " $1 ": " $2 " vs " $4 } }
		END { exit !(k == n && !bad) }'
}

# the plan's CUDA kernels when dtmc emits them (their names and launch
# shapes are then the ones checked; the mock runs the CPU kernels)
cuda_flag=()
"$dtmc" help build 2>&1 | grep -q -- '--cuda' && cuda_flag=(--cuda)

# build NAME MESH [dtmc options]: the CPU binary and the mock-CUDA one
build() {
	local name=$1 mesh=$2
	shift 2
	"$dtmc" build "models/$model.dtm" -o "$tmp/$name" --mesh "$mesh" --keep-c \
		"${cuda_flag[@]}" "$@" \
		2>"$tmp/$name.build.txt" || { cat "$tmp/$name.build.txt" >&2; fail "dtmc build $name"; }
	"$dtmc" inspect "models/$model.dtm" --json --mesh "$mesh" "$@" >"$tmp/$name.inspect.json" \
		2>"$tmp/$name.build.txt" || { cat "$tmp/$name.build.txt" >&2; fail "dtmc inspect $name"; }
	${CC:-cc} -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I. -o "$tmp/$name.mock" \
		-x c "$tmp/$name.dtm.c" -x none -Wl,--wrap=dtm_main -Wl,-u,rt_cuda_probe \
		-Wl,-u,rt_cuda_attach "$cudalib" "$mock" "$kernlib" "$rtlib" "$supportlib" $blas -lpthread -lm \
		2>"$tmp/$name.cc.txt" || { cat "$tmp/$name.cc.txt" >&2; fail "linking $name with the mock"; }
}

# run NAME STEPS [flags]: CPU, then mock CUDA in both orders; same losses
run() {
	local name=$1 steps=$2
	shift 2
	"$tmp/$name" --steps "$steps" -q --log "$tmp/$name.cpu.jsonl" "$@" ||
		fail "$name: the CPU run"
	for order in compute comm; do
		DTM_MOCK_ORDER=$order "$tmp/$name.mock" --device cuda --steps "$steps" -q -v \
			--log "$tmp/$name.$order.jsonl" "$@" 2>"$tmp/$name.$order.txt" ||
			{ cat "$tmp/$name.$order.txt" >&2; fail "$name: --device cuda ($order first)"; }
		same "$tmp/$name.cpu.jsonl" "$tmp/$name.$order.jsonl" "$steps" ||
			fail "$name: CUDA ($order first) differs from the CPU"
		# what each rank handed NCCL in its last step: inspect's communication
		if [ "$name" != one ]; then
			python3 tests/e2e/inspect_alloc.py --comm-only "$tmp/$name.inspect.json" \
				"$tmp/$name.$order.txt" >/dev/null ||
				fail "$name: the ranks' collectives differ from dtmc inspect's"
		fi
	done
	echo "$name: $steps steps on (mock) CUDA equal the CPU's, both stream orders"
}

build one dp=1
DTM_MOCK_COUNT_COMPILES=1 "$tmp/one.mock" --device cuda --steps 1 -q -v 2>"$tmp/c1.txt" ||
	{ cat "$tmp/c1.txt" >&2; fail "first run"; }
DTM_MOCK_COUNT_COMPILES=1 "$tmp/one.mock" --device cuda --steps 1 -q -v 2>"$tmp/c2.txt" ||
	fail "second run"
grep -q "cuda_mock: nvrtc compile" "$tmp/c1.txt" || fail "the first run did not compile"
grep -q "cuda_mock: nvrtc compile" "$tmp/c2.txt" && fail "the second run compiled again"
grep -q "kernels cached" "$tmp/c2.txt" || fail "the second run did not read the cache"
ls "$XDG_CACHE_HOME"/dtm/cubin/*.cubin >/dev/null 2>&1 || fail "no cubin in the cache"
echo "one: compiled once, then read from $XDG_CACHE_HOME/dtm/cubin"
grep -h "^cuda: rank" "$tmp/c1.txt"

run one 6 --eval-every 2
[ "$(evals "$tmp/one.cpu.jsonl")" = "$(evals "$tmp/one.comm.jsonl")" ] &&
	[ -n "$(evals "$tmp/one.cpu.jsonl")" ] || fail "eval losses differ"
"$tmp/one.mock" --device cuda --steps 3 -q --check-numerics --log "$tmp/cn.jsonl" ||
	fail "--check-numerics"
same "$tmp/one.cpu.jsonl" "$tmp/cn.jsonl" 3 || fail "--check-numerics changed the losses"
"$tmp/one.mock" --device cuda --steps 3 -q --save "$tmp/ck" --log "$tmp/a.jsonl" ||
	fail "--save"
"$tmp/one.mock" --device cuda --steps 6 -q --resume "$tmp/ck" --log "$tmp/b.jsonl" ||
	fail "--resume"
cat "$tmp/a.jsonl" "$tmp/b.jsonl" >"$tmp/ab.jsonl"
same "$tmp/one.cpu.jsonl" "$tmp/ab.jsonl" 6 || fail "3 steps + resume to 6 differ from 6"
echo "one: --eval-every, --check-numerics and --save/--resume on CUDA give the CPU's losses"

# --profile-actions on the device: the CPU's actions, each 0.01 ms a step
"$tmp/one" --steps 3 -q --profile-actions "$tmp/prof_cpu.tsv" || fail "CPU --profile-actions"
"$tmp/one.mock" --device cuda --steps 3 -q --profile-actions "$tmp/prof_cuda.tsv" ||
	fail "--device cuda --profile-actions"
cut -f1-11,13- "$tmp/prof_cpu.tsv" | grep -v '^#' >"$tmp/acts_cpu.txt"
cut -f1-11,13- "$tmp/prof_cuda.tsv" | grep -v '^#' >"$tmp/acts_cuda.txt"
[ -s "$tmp/acts_cpu.txt" ] && cmp -s "$tmp/acts_cpu.txt" "$tmp/acts_cuda.txt" ||
	fail "the device's profile has other actions than the CPU's"
awk -F'\t' '!/^#/ { n++; if ($12 < 0.99e-5 || $12 > 1.01e-5) bad++ }
	END { exit !(n > 0 && !bad) }' "$tmp/prof_cuda.tsv" ||
	fail "the device's action times are not the events' 0.01 ms: $(head -3 "$tmp/prof_cuda.tsv")"
echo "one: --profile-actions on the device: $(grep -vc '^#' "$tmp/prof_cuda.tsv") kernels and GEMMs timed by their events"
if [ "$model" = mlp ]; then
	DTM_MOCK_GEMM_SKIP=1 "$tmp/one.mock" --device cuda --calibrate-gemm "$tmp/grid.txt" -q ||
		fail "--device cuda --calibrate-gemm"
	grep -qx "# device: cuda_mock GPU 0" "$tmp/grid.txt" || fail "no device line: $(head -2 "$tmp/grid.txt")"
	grep -q "^feed_rate = " "$tmp/grid.txt" || fail "no feed_rate line"
	# 120 shapes each (1..16384 x 256..16384 x 64..16384), every rate
	# 2 m n k x reps / the batch's 0.01 ms, reps ~ 5 ms / 0.01 ms
	awk '$1 == "gemm" || $1 == "gemm_bf16" {
		n[$1]++; c = $7 / (2 * $3 * $4 * $5)
		if (c < 4.99e7 || c > 5.03e7) { bad++; print "bad rate: " $0 }
		if ($3 == 16384 && $4 == 16384 && $5 == 16384) big[$1]++ }
		END { exit !(n["gemm"] == 120 && n["gemm_bf16"] == 120 && big["gemm"] == 1 &&
			     big["gemm_bf16"] == 1 && !bad) }' "$tmp/grid.txt" ||
		fail "the device's GEMM grid: $(grep -c '^gemm' "$tmp/grid.txt") lines"
	echo "one: --calibrate-gemm on the device: 120 shapes in f32 and bf16"
fi

build dptp dp=2,tp=2
run dptp 4
build zero3 dp=4 --train zero=3
run zero3 4
# bf16: cuBLAS-style GEMMs round once from f32 as the CPU's do, but sums in
# another order can round to the other bf16 neighbour
build bf16 dp=2,tp=2 --train precision=bf16
TOL=1e-2 run bf16 4
if [ "$model" = gpt ]; then
	# sequence parallelism: all_gather and reduce_scatter along a dim
	build sp dp=2,tp=2 --train sequence_parallel=true
	run sp 4
	# a pipeline: sends and receives between the stages' ranks
	build pp pp=2 --train microbatches=2
	run pp 3
fi

out=$(DTM_MOCK_GPUS=0 "$tmp/one.mock" --device cuda --steps 1 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q "^error: --device cuda: no CUDA driver/device" ||
	fail "no GPU: $out"
out=$(DTM_MOCK_GPUS=2 "$tmp/dptp.mock" --device cuda --steps 1 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q "needs a GPU per rank" || fail "4 ranks on 2 GPUs: $out"
echo "errors: no GPU, and 4 thread ranks on 2 GPUs"
echo ok
