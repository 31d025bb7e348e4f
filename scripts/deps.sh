#!/usr/bin/env bash
# deps.sh - make sure the tools dtm builds and tests with are installed.
#
# Checks for cmake, a C compiler, make, flex, bison, clang with libFuzzer
# (the fuzz test), python3 (with venv, for JAX from PyPI: tests/jax),
# graphviz (inspect's DOT tests render with dot),
# OpenBLAS (the CPU runtime's GEMM), oneDNN (its bf16 GEMMs), Open MPI (the
# mpi backend and its tests), MLIR 19 (dtmc export-mlir) and, for the
# PyTorch oracle test and bench/, Debian's PyTorch and numpy for
# /usr/bin/python3 (python3-torch 1.13, CPU).  When
# something is missing and we run as root on Debian/Ubuntu with apt-get,
# installs it non-interactively; otherwise prints the packages to install
# and exits 1.
set -euo pipefail

missing=()
need() { # need COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}

need cmake cmake
need cc gcc
need gcc gcc
need make make
need flex flex
need bison bison
need clang clang
need python3 python3
# graphviz's dot: tests/inspect/run.sh renders `dtmc inspect --dot` output
need dot graphviz
# Open MPI for the mpi communication backend and its tests (mpirun)
need mpicc libopenmpi-dev
need mpirun openmpi-bin
# MLIR 19 for `dtmc export-mlir` (tools/mlir_capi.c links its C API: the
# static libMLIRCAPIIR.a and libMLIRCAPIRegisterEverything.a, then
# libMLIR) and mlir-opt for its test (tests/mlir)
mlir_lib=/usr/lib/llvm-19/lib
{ [ -e $mlir_lib/libMLIRCAPIIR.a ] && [ -e $mlir_lib/libMLIRCAPIRegisterEverything.a ] &&
	[ -e $mlir_lib/libMLIR.so ]; } || missing+=(libmlir-19-dev)
need mlir-opt-19 mlir-19-tools

# libFuzzer ships in clang's runtime package (libclang-rt-14-dev on Debian
# 12); the only reliable test is to link a fuzz target.
fuzzer_ok() {
	command -v clang >/dev/null 2>&1 || return 1
	local tmp
	tmp=$(mktemp -d)
	printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
		>"$tmp/f.c"
	local ok=1
	clang -fsanitize=fuzzer,address,undefined "$tmp/f.c" -o "$tmp/f" >/dev/null 2>&1 && ok=0
	rm -rf "$tmp"
	return $ok
}

rt_pkg() {
	local v=""
	if command -v clang >/dev/null 2>&1; then
		v=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
	fi
	echo "libclang-rt-${v:-14}-dev"
}

# a C library and headers for the compiler (build-essential's core)
if command -v cc >/dev/null 2>&1; then
	echo '#include <stdio.h>
int main(void) { return 0; }' | cc -x c - -o /dev/null >/dev/null 2>&1 || missing+=(libc6-dev)
fi
if ! fuzzer_ok; then
	missing+=("$(rt_pkg)")
fi
# OpenBLAS for the CPU runtime's GEMM (CMake falls back to a slow loop
# without it, so it is installed but not required elsewhere).  Checked the
# way CMake uses it: OpenBLAS's own header folder (openblas_config.h, which
# only OpenBLAS ships; the reference BLAS's libblas-dev has a cblas.h too)
# and a program calling cblas_sgemm linked with -lopenblas.
openblas_ok() {
	local inc=""
	for d in /usr/include/*/openblas-pthread /usr/include/*/openblas /usr/include/openblas \
		/usr/include; do
		if [ -e "$d/openblas_config.h" ]; then inc=$d; break; fi
	done
	[ -n "$inc" ] || return 1
	command -v cc >/dev/null 2>&1 || return 1
	local tmp ok=1
	tmp=$(mktemp -d)
	printf '%s\n' '#include <cblas.h>' 'int main(void) { float a = 1, b = 1, c = 0;' \
		'  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1, &a, 1, &b, 1, 0, &c, 1);' \
		'  return c == 1 ? 0 : 1; }' >"$tmp/b.c"
	cc -I"$inc" "$tmp/b.c" -o "$tmp/b" -lopenblas >/dev/null 2>&1 && ok=0
	rm -rf "$tmp"
	return $ok
}
if ! openblas_ok; then
	missing+=(libopenblas-dev)
fi
# oneDNN for bf16 GEMMs on the CPU (runtime/dev_cpu.c; optional like
# OpenBLAS: without it bf16 operands are widened for sgemm).  Checked the
# way the runtime uses it: dnnl_gemm_bf16bf16f32, which Debian's 2.6
# exports without declaring it, linked with -ldnnl.
dnnl_ok() {
	command -v cc >/dev/null 2>&1 || return 1
	local tmp ok=1
	tmp=$(mktemp -d)
	printf '%s\n' '#include <stdint.h>' \
		'int dnnl_gemm_bf16bf16f32(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,' \
		'  int64_t, const uint16_t *, int64_t, float, float *, int64_t);' \
		'int main(void) { return dnnl_gemm_bf16bf16f32 == 0; }' >"$tmp/d.c"
	cc "$tmp/d.c" -o "$tmp/d" -ldnnl >/dev/null 2>&1 && ok=0
	rm -rf "$tmp"
	return $ok
}
if ! dnnl_ok; then
	missing+=(libdnnl-dev)
fi

# PyTorch and numpy for Debian's python (tests/oracle, bench/); a python3
# earlier in PATH (pyenv, a venv) does not see these packages, so the
# oracle runs /usr/bin/python3.
deb_python=/usr/bin/python3
py_has() { [ -x "$deb_python" ] && "$deb_python" -c "import $1" >/dev/null 2>&1; }
py_has numpy || missing+=(python3-numpy)
py_has torch || missing+=(python3-torch)

# Debian's torch calls the generic libblas.so.3, which the alternatives
# system points at OpenBLAS (priority 100) or the reference BLAS (10, about
# 8x slower).  Select OpenBLAS when both are installed.
blas_alt=libblas.so.3-x86_64-linux-gnu
openblas_blas=/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3
select_openblas() {
	command -v update-alternatives >/dev/null 2>&1 || return 0
	[ -e "$openblas_blas" ] || return 0
	local cur
	cur=$(update-alternatives --query "$blas_alt" 2>/dev/null | sed -n 's/^Value: //p')
	if [ -n "$cur" ] && [ "$cur" != "$openblas_blas" ]; then
		if [ "$(id -u)" = 0 ]; then
			echo "deps.sh: pointing $blas_alt at OpenBLAS (was $cur)"
			update-alternatives --set "$blas_alt" "$openblas_blas"
		else
			echo "deps.sh: warning: libblas.so.3 is $cur, not OpenBLAS; PyTorch will be slow." >&2
			echo "  as root: update-alternatives --set $blas_alt $openblas_blas" >&2
		fi
	fi
}

# JAX for CPU, the reference partitioner of tests/jax (and bench/), and
# the safetensors package (tests/e2e/ckpt_tools.sh reads dtm's merged
# checkpoints with it, bf16 as JAX arrays), from
# PyPI into a venv outside the repository, $JAX_VENV (default
# ~/.cache/dtm-bench/jax-venv), made with python3's venv (python3-venv on
# Debian's python).  The test itself installs nothing: it fails and names
# this script when the venv is missing.
JAX_VENV=${JAX_VENV:-$HOME/.cache/dtm-bench/jax-venv}
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
ensure_jax() {
	local py=$JAX_VENV/bin/python
	if [ -x "$py" ] && "$py" -c 'import jax, numpy, safetensors.flax' >/dev/null 2>&1; then
		return 0
	fi
	if [ -x "$py" ] && "$py" -c 'import jax, numpy' >/dev/null 2>&1; then
		echo "deps.sh: adding safetensors to $JAX_VENV"
		"$JAX_VENV/bin/pip" install -q safetensors </dev/null && return 0
	fi
	echo "deps.sh: creating $JAX_VENV (python3 -m venv; pip install jax[cpu] safetensors)"
	rm -rf "$JAX_VENV"
	mkdir -p "$(dirname "$JAX_VENV")"
	if ! { python3 -m venv "$JAX_VENV" &&
		"$JAX_VENV/bin/pip" install -q 'jax[cpu]' safetensors </dev/null; }; then
		echo "deps.sh: could not install JAX into $JAX_VENV (needs PyPI):" >&2
		echo "  python3 -m venv $JAX_VENV && $JAX_VENV/bin/pip install 'jax[cpu]' safetensors" >&2
		exit 1
	fi
}

if [ ${#missing[@]} -eq 0 ]; then
	select_openblas
	ensure_jax
	exit 0
fi
# de-duplicate, keep order
pkgs=()
for p in "${missing[@]}"; do
	case " ${pkgs[*]-} " in *" $p "*) ;; *) pkgs+=("$p") ;; esac
done

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ -r /etc/debian_version ]; then
	echo "deps.sh: installing: ${pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update </dev/null
	apt-get install -y --no-install-recommends "${pkgs[@]}" </dev/null
	# clang's runtime is versioned: if clang itself was just installed,
	# make sure the runtime matches its version.
	if ! fuzzer_ok; then
		apt-get install -y --no-install-recommends "$(rt_pkg)" </dev/null
	fi
	if ! fuzzer_ok; then
		echo "deps.sh: clang cannot link -fsanitize=fuzzer even after installing $(rt_pkg)" >&2
		exit 1
	fi
	# torch's libblas.so.3 dependency may have been met by the reference
	# BLAS; OpenBLAS (from libopenblas-dev) provides it too
	if ! py_has torch; then
		echo "deps.sh: python3-torch installed but '$deb_python -c \"import torch\"' fails" >&2
		exit 1
	fi
	if [ ! -e "$openblas_blas" ]; then
		apt-get install -y --no-install-recommends libopenblas0-pthread </dev/null
	fi
	if ! openblas_ok; then
		echo "deps.sh: libopenblas-dev installed but a program calling cblas_sgemm does not link with -lopenblas" >&2
		exit 1
	fi
	select_openblas
	ensure_jax
	exit 0
fi

echo "deps.sh: missing tools; install these packages (Debian/Ubuntu names):" >&2
echo "  apt-get install -y --no-install-recommends ${pkgs[*]}" >&2
exit 1
