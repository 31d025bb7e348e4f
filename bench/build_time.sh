#!/usr/bin/env bash
# build_time.sh - what `dtmc build` costs (issue 22 point 1): wall time, the
# peak RSS of dtmc and its cc (GNU time's %M: the largest of the process
# tree's), the generated C's size and its distinct kernels, for GPT-2
# small-sized GPTs (d 768, 12 heads, ctx 1024, vocab 50304) on meshes that
# used to grow the C with layers x micro-batches x stages.
#
#   bench/build_time.sh DTMC [BASE_DTMC]
#
# With BASE_DTMC, the same builds by it, side by side (each figure the best
# of REPS runs, default 2; BIG=0 leaves out the 48-layer row, which took the
# compiler before issue 22 4 minutes and 2.4 GB; ONLY="NAME..." runs only
# those rows).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dtmcs=("$1")
[ $# -ge 2 ] && dtmcs+=("$2")
REPS=${REPS:-2}
gpt=(-D vocab=50304 -D ctx=1024 -D d=768 -D heads=12)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=(
	"gpt2-dp8|-D layers=12 -D batch=8 --mesh dp=8"
	"gpt2-pp2-M8|-D layers=12 -D batch=16 --mesh pp=2,dp=1,tp=1 --train microbatches=8"
	"gpt2-dp2tp2pp2-M4|-D layers=12 -D batch=8 --mesh pp=2,dp=2,tp=2 --train microbatches=4"
)
[ "${BIG:-1}" = 1 ] &&
	rows+=("L48-pp8dp8tp8-M16|-D layers=48 -D batch=128 --mesh pp=8,dp=8,tp=8 --train microbatches=16")
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-20s %-6s %9s %9s %11s %9s %9s\n' row dtmc wall_s peak_MB C_lines C_MB kernels
for row in "${rows[@]}"; do
	name=${row%%|*}
	[ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
	read -r -a args <<<"${row#*|}"
	for i in "${!dtmcs[@]}"; do
		d=${dtmcs[$i]}
		tag=$([ "$i" = 0 ] && echo new || echo base)
		best=
		for _ in $(seq "$REPS"); do
			/usr/bin/time -f '%e %M' -o "$tmp/t" "$d" build "$root/models/gpt.dtm" "${gpt[@]}" \
				"${args[@]}" -o "$tmp/bin" --keep-c >/dev/null 2>"$tmp/err" ||
				{ cat "$tmp/err" >&2; exit 1; }
			read -r w m <"$tmp/t"
			if [ -z "$best" ] || awk -v a="$w" -v b="${best%% *}" 'BEGIN{exit !(a<b)}'; then
				best="$w $m"
			fi
		done
		lines=$(wc -l <"$tmp/bin.dtm.c")
		mb=$(awk -v b="$(stat -c %s "$tmp/bin.dtm.c")" 'BEGIN{printf "%.1f", b/1e6}')
		nk=$(grep -c '^static void k_' "$tmp/bin.dtm.c" || true)
		printf '%-20s %-6s %9s %9d %11d %9s %9s\n' "$name" "$tag" "${best%% *}" \
			$((${best##* } / 1024)) "$lines" "$mb" "$nk"
	done
done
