#!/usr/bin/env bash
# zero_bench.sh - ZeRO's collectives per step and step time, two compilers
# side by side (issue 16 point 5: one collective per unit or bucket).
#
#   bench/zero_bench.sh BASE_DTMC NEW_DTMC [-D name=value ...]
#
# For zero 1, 2 and 3 on models/gpt.dtm (default -D layers=4) at --mesh
# dp=4 (MESH), each compiler's plan is counted from `dtmc inspect --json`
# (all_gathers and reduce_scatters of rank 0's step, the cost model's
# communication time), then the binary it builds trains STEPS timed steps
# after 3 warm-up ones on the local backend (ranks as threads), with no
# added delay and with DELAY us slept before every message (an emulated
# network latency, --comm-delay-us), and prints the medians of rank 0's
# step time and of its time inside communication actions.
# Environment: MESH (default dp=4), STEPS (default 20), DELAY (default 200).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
base=$(realpath "$1") new=$(realpath "$2")
shift 2
MESH=${MESH:-dp=4}
STEPS=${STEPS:-20}
DELAY=${DELAY:-200}
warm=3
defs=("$@")
[ ${#defs[@]} -gt 0 ] || defs=(-D layers=4)
work=$(mktemp -d /tmp/dtm_zero_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3

machine_line
echo "model: gpt ${defs[*]}, --mesh $MESH; $STEPS timed steps after $warm; delay $DELAY us"

count() { # JSON: "ag rs predicted_us" of rank 0's non-scalar collectives
	"$py" - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = j["stages"][0]["comm"]
ag = sum(1 for r in rows if r.get("kind") == "all_gather")
rs = sum(1 for r in rows if r.get("kind") == "reduce_scatter")
us = sum(r.get("seconds", 0) for r in rows) * 1e6
print(ag, rs, "%.0f" % us)
PY
}

printf "%-5s %-6s %6s %6s %10s %9s %9s %11s %11s\n" zero dtmc ag rs model_us step_ms comm_ms \
	"step_ms@d" "comm_ms@d"
for z in 1 2 3; do
	for which in base new; do
		dtmc=$base
		[ $which = new ] && dtmc=$new
		name=$work/gpt.$which.$z
		"$dtmc" inspect --json models/gpt.dtm "${defs[@]}" --mesh "$MESH" --train zero=$z \
			>"$name.json"
		read -r ag rs us < <(count "$name.json")
		"$dtmc" build models/gpt.dtm -o "$name" "${defs[@]}" --mesh "$MESH" --train zero=$z \
			2>"$name.build"
		"$name" --steps $((STEPS + warm)) --log "$name.0.jsonl" -q
		"$name" --steps $((STEPS + warm)) --comm-delay-us "$DELAY" --log "$name.d.jsonl" -q
		awk -v z="$z" -v w="$which" -v ag="$ag" -v rs="$rs" -v us="$us" \
			-v ms="$(med "$name.0.jsonl" ms)" -v cm="$(med "$name.0.jsonl" comm_s)" \
			-v msd="$(med "$name.d.jsonl" ms)" -v cmd="$(med "$name.d.jsonl" comm_s)" 'BEGIN {
			printf "%-5s %-6s %6d %6d %10s %9.2f %9.2f %11.2f %11.2f\n", z, w, ag, rs, us, ms,
			       cm * 1e3, msd, cmd * 1e3 }'
	done
done
echo "(ag, rs: rank 0's all_gathers and reduce_scatters per step; model_us: the cost model's"
echo " time of its collectives; ms: medians of rank 0's steps; @d: with the added delay)"
