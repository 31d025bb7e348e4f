#!/usr/bin/env bash
# minimal.sh DTMC WORKDIR - the build without any optional dependency.
#
# Configures the project with OpenBLAS, oneDNN, MPI, CUDA and MLIR turned off
# (-DDTM_BLAS=OFF -DDTM_DNNL=OFF -DDTM_MPI=OFF -DDTM_CUDA=OFF -DDTM_MLIR=OFF) and -Werror, builds every
# target, then checks what the fallbacks promise:
#   1. the build is warning-free (-Werror) and CMake says each part is off;
#   2. a binary built by that dtmc trains models/mlp.dtm on dp=2 with the
#      plain GEMM loop, to the losses of DTMC's (OpenBLAS) build, 1e-5;
#   3. `--backend mpi` on it, or running it under a launcher (OMPI_COMM_WORLD_SIZE),
#      is a one-line error naming the missing part, exit 1;
#   4. `dtmc export-mlir` exits 1 naming the packages to install.
set -u
dtmc=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL build.minimal: $*" >&2; exit 1; }
mkdir -p "$work"
bdir=$work/build
cmake -S "$root" -B "$bdir" -DDTM_WERROR=ON -DDTM_BLAS=OFF -DDTM_DNNL=OFF -DDTM_MPI=OFF -DDTM_CUDA=OFF -DDTM_MLIR=OFF \
	>"$work/configure.txt" 2>&1 || { cat "$work/configure.txt" >&2; fail "configure failed"; }
for want in "OpenBLAS turned off" "MPI turned off" "NVRTC not found" "MLIR turned off"; do
	grep -q "$want" "$work/configure.txt" || { cat "$work/configure.txt" >&2; fail "configure did not say '$want'"; }
done
cmake --build "$bdir" -j "$(nproc 2>/dev/null || echo 2)" >"$work/build.txt" 2>&1 ||
	{ grep -E -B2 -A8 'error|warning' "$work/build.txt" | head -60 >&2; fail "-Werror build failed"; }

steps=5
"$bdir/dtmc" build "$root/models/mlp.dtm" --mesh dp=2 -o "$work/mlp_min" >/dev/null 2>"$work/b1.txt" ||
	{ cat "$work/b1.txt" >&2; fail "dtmc build (minimal) failed"; }
"$dtmc" build "$root/models/mlp.dtm" --mesh dp=2 -o "$work/mlp_ref" >/dev/null 2>"$work/b2.txt" ||
	{ cat "$work/b2.txt" >&2; fail "dtmc build (reference) failed"; }
"$work/mlp_min" --steps $steps -q -v --log "$work/min.jsonl" 2>"$work/min.txt" ||
	{ cat "$work/min.txt" >&2; fail "the minimal binary failed to train"; }
grep -q "builtin" "$work/min.txt" || { cat "$work/min.txt" >&2; fail "-v does not name the builtin GEMM"; }
"$work/mlp_ref" --steps $steps -q --log "$work/ref.jsonl" 2>"$work/ref.txt" ||
	{ cat "$work/ref.txt" >&2; fail "the reference binary failed to train"; }
loss() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
paste <(loss "$work/min.jsonl") <(loss "$work/ref.jsonl") >"$work/losses.txt"
[ "$(wc -l <"$work/losses.txt")" = $steps ] || fail "expected $steps losses from each run"
awk '{ d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2;
	if (!(d <= 1e-5 * s)) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
	END { exit bad }' "$work/losses.txt" || fail "plain-loop GEMM losses differ from OpenBLAS's"

"$work/mlp_min" --steps 1 --backend mpi >"$work/mpi.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "--backend mpi without MPI exited $rc, want 1"
grep -q "built without the mpi backend" "$work/mpi.txt" || { cat "$work/mpi.txt" >&2; fail "no clear mpi error"; }
# under a launcher, a binary without MPI refuses instead of training copies
OMPI_COMM_WORLD_SIZE=4 "$work/mlp_min" --steps 1 >"$work/launcher.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "under a launcher without MPI built in: exit $rc, want 1"
grep -q "started by a launcher of 4 processes (OMPI_COMM_WORLD_SIZE).*--backend local" "$work/launcher.txt" ||
	{ cat "$work/launcher.txt" >&2; fail "no clear launcher error"; }
"$bdir/dtmc" export-mlir "$root/models/mlp.dtm" >"$work/mlir.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "export-mlir without MLIR exited $rc, want 1"
grep -q "built without MLIR.*libmlir-19-dev" "$work/mlir.txt" ||
	{ cat "$work/mlir.txt" >&2; fail "no clear MLIR error"; }
echo "build.minimal: -Werror build without OpenBLAS, MPI, CUDA and MLIR; mlp dp=2 losses equal OpenBLAS's over $steps steps"
