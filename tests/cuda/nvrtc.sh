#!/usr/bin/env bash
# nvrtc.sh DTMC NVRTC_CHECK MODEL "MESH..." "PRECISION..."
#
# The CI check of issue 7 point 4: writes the CUDA kernels of MODEL (a name
# in models/, or a path) with `dtmc cuda-src` for every mesh and precision
# given, and compiles each source with NVRTC to PTX for sm_80 and sm_90
# (tools/nvrtc_check): any error or warning fails.  No GPU needed.
set -u
dtmc=$1 check=$2 model=$3 meshes=$4 precs=$5
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src="$root/models/$model.dtm"
[ -f "$src" ] || src=$model
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_nvrtc_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
files=()
for mesh in $meshes; do
	for prec in $precs; do
		f="$tmp/$(basename "$src" .dtm).$mesh.$prec.cu"
		"$dtmc" cuda-src "$src" --mesh "$mesh" --train "precision=$prec" -o "$f" ||
			{ echo "FAIL: dtmc cuda-src $src --mesh $mesh --train precision=$prec" >&2; exit 1; }
		files+=("$f")
	done
done
"$check" --arch compute_80 --arch compute_90 "${files[@]}" || { echo "FAIL: NVRTC" >&2; exit 1; }
