#!/usr/bin/env bash
# compile_bench.sh - what compiling costs as models and meshes grow (issue 15's
# "Measure"): two dtmc binaries side by side, same machine, same run, each
# figure the best of REPS runs (other processes only ever slow a run down).
#
#   bench/compile_bench.sh BASE_DTMC NEW_DTMC
#
#   sweep64   dtmc sweep of GPT-2 124M over 64 devices at batch 8, --jobs 1:
#             candidates/s (the sweep's own JSON) and peak RSS
#   sweep512  the same over 512 devices at -D batch=512 (the micro-batch
#             counts grow with the batch): candidates/s and peak RSS
#   inspM16   dtmc inspect of a 96-layer 175B GPT (d 12288, 96 heads, ctx
#   inspM64   2048, batch 4096) on pp=8 x dp=64 x tp=8 with 16 and 64
#             micro-batches: wall time and peak RSS
# then the lines of C in passes/ and the functions over 100 lines (passes/
# and everywhere), from the working tree.
# Environment: REPS (default 3; sweep512 runs once: it takes minutes),
# ONLY (the measures to run, default "sweep64 sweep512 inspM16 inspM64").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=$1
new=$2
REPS=${REPS:-3}
gpt2=(-D vocab=50257 -D ctx=1024 -D d=768 -D heads=12 -D layers=12)
b175=(-D vocab=50257 -D ctx=2048 -D d=12288 -D heads=96 -D layers=96 -D batch=4096
      --mesh pp=8,dp=64,tp=8)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME REPS CMD...: best wall s, best candidates/s (sweeps), peak RSS in MB
run() {
	local name=$1 reps=$2 best_w= best_c= rss=
	shift 2
	for _ in $(seq 1 "$reps"); do
		/usr/bin/time -f '%e %M' -o "$tmp/time" "$@" > "$tmp/out" 2> /dev/null || {
			echo "$name: failed: $*" >&2
			return 1
		}
		read -r w kb < "$tmp/time"
		local c=-
		if [ "${name#sweep}" != "$name" ]; then
			c=$(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["candidates_per_s"])' "$tmp/out")
		fi
		if [ -z "$best_w" ] || python3 -c "import sys; sys.exit(not $w < $best_w)"; then
			best_w=$w
		fi
		if [ "$c" != - ] && { [ -z "$best_c" ] || [ "$c" -gt "$best_c" ]; }; then
			best_c=$c
		fi
		rss=$((kb / 1024))
	done
	printf '%s' "$best_w ${best_c:--} $rss"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-5s %9s %10s %8s\n' what dtmc "wall s" "cands/s" "RSS MB"
for what in ${ONLY:-sweep64 sweep512 inspM16 inspM64}; do
	for side in base new; do
		bin=$base
		[ "$side" = new ] && bin=$new
		case $what in
		sweep64) r=$(run $what "$REPS" "$bin" sweep models/gpt.dtm "${gpt2[@]}" --devices 64 --jobs 1 --json -q) ;;
		sweep512) r=$(run $what 1 "$bin" sweep models/gpt.dtm "${gpt2[@]}" -D batch=512 --devices 512 --jobs 1 --json -q) ;;
		inspM16) r=$(run $what "$REPS" "$bin" inspect models/gpt.dtm "${b175[@]}" --train microbatches=16) ;;
		inspM64) r=$(run $what "$REPS" "$bin" inspect models/gpt.dtm "${b175[@]}" --train microbatches=64) ;;
		esac
		read -r w c m <<< "$r"
		printf '%-9s %-5s %9s %10s %8s\n' "$what" "$side" "$w" "$c" "$m"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "lines of C in passes/: $(cat passes/*.c passes/*.h | wc -l)"
python3 - <<'PY'
import glob, re
def long_functions(files):
    out = []
    for f in files:
        lines = open(f, encoding="utf-8", errors="replace").read().split("\n")
        start = None
        for i, l in enumerate(lines):
            # a function definition opens with "{" alone in column 0 after
            # a signature line, or "...) {" in column 0 code (house style:
            # the brace on its own line)
            if l == "{" and i > 0 and not lines[i - 1].startswith((" ", "\t", "#")) \
                    and "=" not in lines[i - 1] and start is None:
                start = i
            elif l == "}" and start is not None:
                if i - start - 1 > 100:
                    out.append((i - start - 1, f, lines[start - 1].strip()))
                start = None
    return sorted(out, reverse=True)
srcs = [f for d in ("support", "ir", "interp", "frontend", "passes", "codegen", "runtime",
                    "driver", "tools") for f in glob.glob(d + "/**/*.c", recursive=True)]
p = long_functions(glob.glob("passes/*.c"))
a = long_functions(srcs)
print("functions over 100 lines: %d in passes/, %d in all (%s)" % (len(p), len(a),
      "support ir interp frontend passes codegen runtime driver tools"))
for n, f, sig in p:
    print("  %4d  %s: %s" % (n, f, sig[:70]))
PY
