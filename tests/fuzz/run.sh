#!/usr/bin/env bash
# run.sh - build the libFuzzer targets with clang and run them for a bounded
# time; fails on any crash, sanitizer report, timeout or memory blow-up.
#
#   tests/fuzz/run.sh [WORKDIR]       (default: build-fuzz)
#
# Environment: FUZZ_TIME (seconds for the front end, default 60),
# FUZZ_IR_TIME (seconds for the IR parser, default 30), FUZZ_MLIR_TIME
# (seconds for the MLIR import, default 45; its target is built where MLIR
# 19 is, its seeds exports in tests/fuzz/corpus/mlir and tests/mlir),
# FUZZ_CKPT_TIME (the checkpoint readers: safetensors, index.json and the
# shard boxes, default 20; seeds tests/fuzz/corpus/ckpt) and FUZZ_HW_TIME
# (the hardware profile parser, default 10; seeds tests/fuzz/corpus/hw).  The seed corpus is
# tests/fuzz/corpus plus models/ and tests/diag/ (for the front end) and
# tests/golden/*.ir, tests/diag/*.ir plus tests/fuzz/corpus/ir (IR text
# after lower, propagate, state, partition, pipeline and attn_stats (micro-
# batch weight gradient sums, for accumulate), for the IR
# parser and the passes); the run works on copies in WORKDIR, so the
# repository is never written.  The targets abort on an internal error
# (tests/fuzz/fuzz_frontend.c).
# A missing clang or libFuzzer is a failure, not a skip: scripts/deps.sh
# installs them (clang, libclang-rt-14-dev on Debian 12).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mkdir -p "${1:-$root/build-fuzz}" && cd "${1:-$root/build-fuzz}" && pwd)
fuzz_time=${FUZZ_TIME:-60}
ir_time=${FUZZ_IR_TIME:-30}
mlir_time=${FUZZ_MLIR_TIME:-45}
ckpt_time=${FUZZ_CKPT_TIME:-20}
hw_time=${FUZZ_HW_TIME:-10}

die() {
	echo "FAIL fuzz: $*" >&2
	exit 1
}

command -v clang >/dev/null 2>&1 ||
	die "clang not found; install clang and libclang-rt-14-dev (scripts/deps.sh does)"
probe=$work/probe
mkdir -p "$probe"
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
	>"$probe/f.c"
clang -fsanitize=fuzzer,address,undefined "$probe/f.c" -o "$probe/f" >"$probe/log" 2>&1 ||
	die "clang cannot link -fsanitize=fuzzer (libFuzzer missing: install libclang-rt-14-dev):
$(cat "$probe/log")"

# the targets, in their own tree: the libraries with fuzzer-no-link, the
# targets linked with libFuzzer's main (tests/fuzz/CMakeLists.txt)
bdir=$work/build
mkdir -p "$bdir/gen/frontend" # where flex and bison write their outputs
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$bdir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DDTM_FUZZ=ON "-DCMAKE_C_FLAGS=$flags" >"$work/configure.log" 2>&1 ||
	die "configure failed:
$(tail -n 30 "$work/configure.log")"
cmake --build "$bdir" --target fuzz_frontend fuzz_ir fuzz_ckpt fuzz_hw -j "$(nproc 2>/dev/null || echo 2)" \
	>"$work/build.log" 2>&1 ||
	die "build failed:
$(tail -n 40 "$work/build.log")"

# the MLIR import's target exists where MLIR 19 does (tests/fuzz/CMakeLists.txt)
mlir=0
if grep -q '^fuzz_mlir:' <(cmake --build "$bdir" --target help 2>/dev/null | sed 's/^\.\.\. //; s/ .*//; s/$/:/'); then
	cmake --build "$bdir" --target fuzz_mlir -j "$(nproc 2>/dev/null || echo 2)" \
		>>"$work/build.log" 2>&1 || die "build of fuzz_mlir failed:
$(tail -n 40 "$work/build.log")"
	mlir=1
fi

# fresh copies of the seeds every run
rm -rf "$work"/corpus-* "$work/artifacts"
mkdir -p "$work/corpus-frontend" "$work/corpus-ir" "$work/corpus-mlir" "$work/corpus-ckpt" \
	"$work/corpus-hw" "$work/artifacts"
cp "$root"/tests/fuzz/corpus/ckpt/* "$work/corpus-ckpt/"
cp "$root"/tests/fuzz/corpus/hw/* "$work/corpus-hw/"
cp "$root"/tests/fuzz/corpus/mlir/*.mlir "$root"/tests/mlir/*.mlir "$work/corpus-mlir/"
for f in "$root"/tests/mlir/bad/*.mlir; do
	cp "$f" "$work/corpus-mlir/bad-$(basename "$f")"
done
cp "$root"/tests/fuzz/corpus/*.dtm "$root"/models/*.dtm "$work/corpus-frontend/"
for f in "$root"/tests/diag/*.dtm; do
	cp "$f" "$work/corpus-frontend/diag-$(basename "$f")"
done
cp "$root"/tests/fuzz/corpus/ir/* "$work/corpus-ir/" 2>/dev/null
cp "$root"/tests/golden/*.ir "$work/corpus-ir/" 2>/dev/null
for f in "$root"/tests/diag/*.ir; do
	[ -e "$f" ] && cp "$f" "$work/corpus-ir/diag-$(basename "$f")"
done

# run TARGET SECONDS CORPUS [UNIT_TIMEOUT [DICT]]: a unit running past
# UNIT_TIMEOUT seconds (default 10) is a finding (a hang); DICT: libFuzzer's
# dictionary (default the .dtm language's; "none": none)
run() {
	local target=$1 secs=$2 corpus=$3 unit=${4:-10} dict=${5:-$root/tests/fuzz/dtm.dict}
	local dictopt=()
	[ "$dict" = none ] || dictopt=(-dict="$dict")
	echo "fuzz: $target for ${secs}s over $(ls "$corpus" | wc -l) seeds"
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
		"$bdir/tests/fuzz-targets/$target" -max_total_time="$secs" -rss_limit_mb=2048 \
		-timeout="$unit" -max_len=65536 "${dictopt[@]}" \
		-artifact_prefix="$work/artifacts/$target-" -print_final_stats=1 \
		"$corpus" >"$work/$target.log" 2>&1
	local rc=$?
	if [ $rc -ne 0 ]; then
		echo "FAIL fuzz: $target exited with $rc; the last lines of its log:"
		grep -avE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED)' "$work/$target.log" | tail -n 40
		echo "reproducers:"
		ls -la "$work/artifacts"
		echo "rerun one with: $bdir/tests/fuzz-targets/$target ARTIFACT"
		return 1
	fi
	grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units)' "$work/$target.log" | tail -n 2
	return 0
}

fail=0
run fuzz_frontend "$fuzz_time" "$work/corpus-frontend" || fail=1
run fuzz_ir "$ir_time" "$work/corpus-ir" || fail=1
run fuzz_ckpt "$ckpt_time" "$work/corpus-ckpt" 10 none || fail=1
run fuzz_hw "$hw_time" "$work/corpus-hw" 10 none || fail=1
if [ $mlir = 1 ]; then
	# each unit forks a child that sets up an MLIR context with every
	# dialect: on a loaded 2-core CI host, with libMLIR's pages not yet
	# read, the first (empty) unit once took 11 s; a hang still shows
	run fuzz_mlir "$mlir_time" "$work/corpus-mlir" 60 || fail=1
else
	echo "fuzz: fuzz_mlir not built (no MLIR 19: the import it fuzzes is not built either)"
fi
# every artifact is a finding, even one a run that exited 0 left behind (a
# child process with the parent's handlers; fuzz_mlir's resets them)
if [ $fail = 0 ] && [ -n "$(ls -A "$work/artifacts")" ]; then
	echo "FAIL fuzz: the runs exited 0 but left artifacts:"
	ls -la "$work/artifacts"
	fail=1
fi
[ $fail = 0 ] && echo "fuzz: no findings"
exit $fail
