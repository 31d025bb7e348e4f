#!/usr/bin/env bash
# nvrtc.sh DTMC NVRTC_CHECK MODEL "MESH..." "PRECISION..."
#
# The CI check of issue 7 point 4: writes the CUDA kernels of MODEL (a name
# in models/, or a path, or a masked copy: tests/cuda/model.sh) with `dtmc
# cuda-src` for every mesh and precision given, and compiles each source
# with NVRTC to PTX for sm_80 and sm_90 (tools/nvrtc_check): any error or
# warning fails.  A mesh may carry train settings after slashes
# (cp=2/context_parallel=ring).  No GPU needed.
set -u
dtmc=$1 check=$2 model=$3 meshes=$4 precs=$5
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_nvrtc_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
. "$here/model.sh"
src=$(cuda_model "$root" "$model" "$tmp") || { echo "FAIL: no model $model" >&2; exit 1; }
files=()
for item in $meshes; do
	mesh=${item%%/*} train=()
	rest=${item#"$mesh"}
	IFS=/ read -ra sets <<<"${rest#/}"
	for s in "${sets[@]}"; do
		[ -n "$s" ] && train+=(--train "$s")
	done
	for prec in $precs; do
		f="$tmp/$(basename "$src" .dtm).${item//\//_}.$prec.cu"
		"$dtmc" cuda-src "$src" --mesh "$mesh" "${train[@]}" --train "precision=$prec" -o "$f" ||
			{ echo "FAIL: dtmc cuda-src $src --mesh $item --train precision=$prec" >&2; exit 1; }
		files+=("$f")
	done
done
"$check" --arch compute_80 --arch compute_90 "${files[@]}" || { echo "FAIL: NVRTC" >&2; exit 1; }
