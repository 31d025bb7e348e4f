#!/usr/bin/env bash
# overlap_bench.sh - what the communication thread hides (issue 5 point 7).
#
# Trains models/gpt.dtm data-parallel with an emulated slow network
# (--comm-delay-us: a sleep before every message) three ways: --overlap off
# (every action in line on the rank's thread), nocopy (communication on its
# own thread; a kernel about to overwrite a pending collective's input
# waits for it) and on (the default: that input is copied aside when the
# collective is queued); and, for the threads' own cost, off and on with no
# delay.  Per run it prints medians over the timed steps of rank 0's log:
# the step time, compute_s (inside kernels and GEMMs), comm_s (inside
# communication actions), their sum, idle_s (the rank's thread waiting for
# communication, or running it itself when off) and hidden = compute + comm
# - step: the communication that overlapped compute.  Without overlap a
# step is compute + comm; with it, measurably less.
#
#   bench/overlap_bench.sh [-D name=value ...]
# Environment: BUILD (CMake build dir, default build; dtmc is built there
# first unless NOBUILD=1), MESH (default dp=2),
# TRAIN (--train settings, default bucket_mb=0: one all_reduce per
# gradient, issued as soon as it is ready), DELAY (us, default 2000), STEPS
# (timed, default 20, after 3 warm-up steps).  Default model size: -D d=256
# -D layers=4 -D ctx=64 (a step computes for about as long as its messages
# wait on a 2-vCPU machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
BUILD=${BUILD:-build}
MESH=${MESH:-dp=2}
TRAIN=${TRAIN:-bucket_mb=0}
DELAY=${DELAY:-2000}
STEPS=${STEPS:-20}
warm=3
defs=("$@")
[ ${#defs[@]} -gt 0 ] || defs=(-D d=256 -D layers=4 -D ctx=64)
work=$(mktemp -d /tmp/dtm_overlap_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ "${NOBUILD:-0}" != 1 ] &&
	! { cmake -S . -B "$BUILD" && cmake --build "$BUILD" -j "$(nproc)" --target dtmc; } \
	>"$work/cmake.log" 2>&1; then
	cat "$work/cmake.log" >&2
	exit 1
fi
train=()
for t in $TRAIN; do train+=(--train "$t"); done
"$BUILD/dtmc" build models/gpt.dtm -o "$work/gpt" --mesh "$MESH" "${defs[@]}" "${train[@]}"
machine_line
echo "model: gpt ${defs[*]}, --mesh $MESH, --train $TRAIN; $STEPS timed steps after $warm"
"$work/gpt" --steps 1 -q -v 2>&1 | grep -E "overlap:" || true


printf "%-8s %-9s %9s %9s %9s %9s %9s %9s %7s\n" overlap delay_us step_ms compute comm \
	"comp+comm" idle hidden "step/sum"
for run in "off $DELAY" "nocopy $DELAY" "on $DELAY" "off 0" "on 0"; do
	set -- $run
	log=$work/$1.$2.jsonl
	"$work/gpt" --steps $((STEPS + warm)) --overlap "$1" --comm-delay-us "$2" --log "$log" -q
	ms=$(med "$log" ms)
	c=$(med "$log" compute_s)
	m=$(med "$log" comm_s)
	i=$(med "$log" idle_s)
	awk -v o="$1" -v d="$2" -v ms="$ms" -v c="$c" -v m="$m" -v i="$i" 'BEGIN {
		s = (c + m) * 1e3
		printf "%-8s %-9s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f\n", o, d, ms, c * 1e3,
		       m * 1e3, s, i * 1e3, s - ms, ms / s }'
done
echo "(ms; medians of rank 0's steps; hidden = compute + comm - step)"
