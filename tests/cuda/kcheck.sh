#!/usr/bin/env bash
# kcheck.sh DTMC MODEL [dtmc options...]
#
# Runs every CUDA kernel of models/MODEL.dtm (built with the given options)
# on the host, under tests/cuda/emu.cpp, against the C back end's kernel on
# the same random buffers (tests/cuda/kcheck.c).  MODEL:mask and
# MODEL:window are masked copies (tests/cuda/model.sh).  Needs a C and a C++
# compiler ($CC, default cc; $CXX, default c++), no GPU.  KCHECK_KEEP=DIR
# keeps the work files there; KCHECK_RANKS="R..." checks these ranks
# (default: kcheck.c's, the last).  DTM_KERNELS_LIB is the CPU kernel
# library (codegen/cpu/dtmk_lib.c) the generated C calls.
set -u
dtmc=$1 model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cc=${CC:-cc} cxx=${CXX:-c++}
if [ -n "${KCHECK_KEEP:-}" ]; then
	tmp=$KCHECK_KEEP
	mkdir -p "$tmp"
else
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_kcheck_XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
fi
fail() { echo "FAIL (kcheck $model $*)" >&2; exit 1; }
. "$here/model.sh"
src=$(cuda_model "$root" "$model" "$tmp") || fail "no model"
model=${model%:*}

"$dtmc" build "$src" --cuda --keep-c -o "$tmp/bin" "$@" >"$tmp/build.txt" 2>&1 ||
	{ cat "$tmp/build.txt" >&2; fail "$*: dtmc build --cuda failed"; }
"$dtmc" cuda-src "$src" -o "$tmp/k.cu" "$@" || fail "$*: dtmc cuda-src failed"

# the kernels as host C++: dynamic shared memory from the emulator, and the
# table of kernels by name
{
	echo '#include "emu.h"'
	sed 's/extern __shared__ float dtmc_smem\[\];/float *dtmc_smem = emu_dyn_smem;/' "$tmp/k.cu"
	echo 'extern "C" const EmuKernel emu_kernels[] = {'
	sed -n 's/^extern "C" __global__ void __launch_bounds__([0-9]*) \(k_[0-9_]*\)(DtmCudaArgs a)$/\t{ "\1", \1 },/p' "$tmp/k.cu"
	echo '	{ 0, 0 } };'
} >"$tmp/kernels.cpp"

"$cxx" -std=c++17 -O1 -w -I "$here" -c "$tmp/kernels.cpp" -o "$tmp/kernels.o" ||
	fail "$*: the kernels do not compile as host C++"
"$cxx" -std=c++17 -O1 -Wall -I "$here" -c "$here/emu.cpp" -o "$tmp/emu.o" || fail "emu.cpp"
"$cc" -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -I "$root" -c "$tmp/bin.dtm.c" -o "$tmp/plan.o" ||
	fail "$*: the generated C"
"$cc" -std=c11 -O2 -Wall -D_POSIX_C_SOURCE=200809L -I "$root" -c "$here/kcheck.c" \
	-o "$tmp/kcheck.o" || fail "kcheck.c"
"$cxx" -o "$tmp/kcheck" "$tmp/plan.o" "$tmp/kcheck.o" "$tmp/emu.o" "$tmp/kernels.o" \
	"${DTM_KERNELS_LIB:?the CPU kernel library (build/libdtm_kernels.a)}" -lm ||
	fail "$*: link"
if [ -z "${KCHECK_RANKS:-}" ]; then
	"$tmp/kcheck" ${KCHECK_ARGS:-} || fail "$*"
fi
for r in ${KCHECK_RANKS:-}; do
	"$tmp/kcheck" --rank "$r" ${KCHECK_ARGS:-} || fail "$* (rank $r)"
done
