#!/usr/bin/env bash
# sweep_bench.sh - how fast `dtmc sweep` compiles and costs candidates (issue 6
# point 4: at least 1,000 candidates/s for models/gpt.dtm at GPT-2 small sizes
# on a 2-core machine).
#
# For each device count (DEVICES, default "8 64") and thread count (JOBS,
# default "1 N" with N the online CPUs), REPS runs (default 3) of
#   dtmc sweep models/gpt.dtm -D vocab=50257 -D ctx=1024 -D d=768 -D heads=12
#              -D layers=12 --devices D --jobs J --json
# and per run: candidates, how many compiled, the sweep's own wall time and
# candidates/s (compile and cost, from its JSON), and the process's CPU time
# per candidate (user + sys, everything included).  The best run of each
# setting is the figure for bench/README.md: on a shared VM other processes
# only ever slow a run down.  cpu/s, candidates per CPU-second, is what the
# machine gives when no one else uses it: with J threads the wall rate
# approaches J times it when J cores are free.  Then one --jobs 1 run with
# --profile: where the compile time goes, by pass.
#
#   bench/sweep_bench.sh [extra dtmc sweep options]
# Environment: BUILD (CMake build dir, default build; dtmc is built there
# first unless NOBUILD=1), DEVICES, JOBS, REPS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
NCPU=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
DEVICES=${DEVICES:-"8 64"}
JOBS=${JOBS:-"1 $NCPU"}
REPS=${REPS:-3}
if [ "${NOBUILD:-0}" != 1 ]; then
	cmake -S . -B "$BUILD" > /dev/null
	cmake --build "$BUILD" --target dtmc -j "$NCPU" > /dev/null
fi
dtmc=$BUILD/dtmc
gpt2=(-D vocab=50257 -D ctx=1024 -D d=768 -D heads=12 -D layers=12)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "dtmc sweep on models/gpt.dtm at GPT-2 small (124M), $NCPU CPUs online"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%8s %5s %4s %11s %9s %9s %10s %12s %9s\n' devices jobs run candidates compiled \
	"wall s" "cands/s" "cpu ms/cand" "cpu/s"
for d in $DEVICES; do
	for j in $JOBS; do
		for r in $(seq 1 "$REPS"); do
			TIMEFORMAT='%R %U %S'
			{ time "$dtmc" sweep models/gpt.dtm "${gpt2[@]}" --devices "$d" --jobs "$j" \
				--json -q "$@" > "$tmp/out.json" 2> "$tmp/err.txt"; } 2> "$tmp/time.txt"
			read -r _ user sys < "$tmp/time.txt"
			python3 - "$tmp/out.json" "$d" "$j" "$r" "$user" "$sys" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
dev, jobs, run, user, sys_ = sys.argv[2:7]
cpu = float(user) + float(sys_)
n = d["candidates"]
print("%8s %5s %4s %11d %9d %9.2f %10.0f %12.2f %9.0f" % (
    dev, jobs, run, n, d["ok"], d["seconds"], d["candidates_per_s"], cpu / n * 1e3, n / cpu))
EOF
		done
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "where the time goes (--devices 8, one thread):"
"$dtmc" sweep models/gpt.dtm "${gpt2[@]}" --devices 8 --jobs 1 -q --profile "$@" 2>&1 > /dev/null
