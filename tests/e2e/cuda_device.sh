#!/usr/bin/env bash
# cuda_device.sh DTMC MODEL - `--device cuda` on a training binary.
#
# Builds models/MODEL.dtm for one device (with --cuda when dtmc offers it)
# and runs it with --device cuda:
#   no GPU (no driver, or none visible): exit status 1 and one line
#     "error: --device cuda: no CUDA driver/device: ..."; the CPU still
#     trains (the default device);
#   a GPU: 5 steps whose losses equal the CPU's to 1e-5 relative.
set -u
dtmc=$1 model=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_cuda_${model}_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($model): $*" >&2; exit 1; }

cuda_flag=()
"$dtmc" help build 2>&1 | grep -q -- '--cuda' && cuda_flag=(--cuda)
"$dtmc" build "models/$model.dtm" -o "$tmp/$model" --mesh dp=1 "${cuda_flag[@]}" \
	2>"$tmp/build.txt" || { cat "$tmp/build.txt" >&2; fail "dtmc build failed"; }

"$tmp/$model" --steps 5 -q --log "$tmp/cpu.jsonl" || fail "the CPU run failed"
XDG_CACHE_HOME="$tmp/cache" "$tmp/$model" --steps 5 -q --device cuda \
	--log "$tmp/cuda.jsonl" >"$tmp/out.txt" 2>&1
rc=$?
cat "$tmp/out.txt"
if grep -q "no CUDA driver/device" "$tmp/out.txt"; then
	[ "$rc" -eq 1 ] || fail "no GPU, but exit status $rc (want 1)"
	[ "$(grep -c . "$tmp/out.txt")" -eq 1 ] || fail "want one line of error"
	grep -q "^error: --device cuda: no CUDA driver/device: " "$tmp/out.txt" ||
		fail "the message does not start with 'error: --device cuda: no CUDA driver/device'"
	echo "no GPU here: --device cuda fails cleanly (exit 1); the CPU trains"
	echo ok
	exit 0
fi
[ "$rc" -eq 0 ] || fail "--device cuda failed (exit $rc)"
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
paste <(losses "$tmp/cpu.jsonl") <(losses "$tmp/cuda.jsonl") | awk '
	{ n++; d = $2 - $4; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2;
	  printf "step %s cpu %s cuda %s\n", $1, $2, $4
	  if ($1 != $3 || d > 1e-5 * s) bad++ }
	END { exit !(n == 5 && !bad) }' || fail "CUDA losses differ from the CPU's"
echo ok
