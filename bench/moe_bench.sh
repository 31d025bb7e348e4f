#!/usr/bin/env bash
# moe_bench.sh - models/moe.dtm on expert parallelism ep = 1, 2, 4 (ranks as
# threads): step time, the all_to_alls of a step and the cost model's
# prediction (issue 18 point 6).
#
#   bench/moe_bench.sh [-D name=value ...]
#
# For each ep in EPS, `dtmc inspect --json --hw cpu` gives rank 0's
# all_to_alls per step (count, bytes it sends) and the cost model's step
# time on the cpu profile; then the binary `dtmc build` writes trains STEPS
# timed steps after WARM untimed ones on the local backend (the ep ranks are
# threads of one process sharing the host's cores: 4 ranks on a 2-core
# machine time-share them) and the medians of rank 0's step, compute and
# communication times and the process's peak RSS are printed.  ep = 1 is
# one rank holding every expert (--mesh dp=1,ep=1).  Defaults: -D ctx=128
# -D d=128 -D batch=8 -D experts=8 (topk 2, ffn 2d, 2 layers: 1,024 tokens
# and 2,048 expert choices a step; experts and batch must divide by ep;
# later -D override earlier ones).  Environment: EPS (default "1 2 4"),
# STEPS (default 5), WARM (default 2), BUILD (default build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
EPS=${EPS:-1 2 4}
STEPS=${STEPS:-5}
WARM=${WARM:-2}
dtmc=$(realpath "${BUILD:-build}/dtmc")
defs=(-D ctx=128 -D d=128 -D batch=8 -D experts=8 "$@")
work=$(mktemp -d /tmp/dtm_moe_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3

machine_line
echo "model: moe ${defs[*]}, --mesh pp=1,dp=1,ep=N,tp=1; $STEPS timed steps after $WARM"

plan() { # JSON: "a2a a2a_KiB a2a_ms comm_ms model_ms" of rank 0
	"$py" - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["stages"][0]
rows = [r for r in s["comm"] if r.get("kind") == "all_to_all"]
print(len(rows), "%.1f" % (sum(r.get("send_bytes", 0) for r in rows) / 1024),
      "%.2f" % (sum(r.get("seconds", 0) for r in rows) * 1e3),
      "%.2f" % (sum(r.get("seconds", 0) for r in s["comm"]) * 1e3),
      "%.1f" % (j["step"]["step_s"] * 1e3))
PY
}

printf "%-4s %9s %10s %8s %5s %8s %8s %8s %8s %9s %8s\n" ep step_ms compute_ms comm_ms a2a \
	a2a_KiB sent_KiB a2a_cm cm_comm cm_step rss_MiB
for ep in $EPS; do
	name=$work/moe.ep$ep
	mesh=pp=1,dp=1,ep=$ep,tp=1
	"$dtmc" inspect --json --hw cpu models/moe.dtm "${defs[@]}" --mesh "$mesh" >"$name.json"
	read -r a2a a2ak a2am cmcomm cmstep < <(plan "$name.json")
	"$dtmc" build models/moe.dtm -o "$name" "${defs[@]}" --mesh "$mesh" 2>"$name.build"
	/usr/bin/time -f %M -o "$name.rss" "$name" --steps $((STEPS + WARM)) --log "$name.jsonl" -q
	rss=$(awk '{ printf "%.0f", $1 / 1024 }' "$name.rss")
	sent=$(med "$name.jsonl" a2a_bytes)
	printf "%-4s %9.1f %10.1f %8.1f %5s %8s %8.1f %8s %8s %9s %8s\n" "$ep" \
		"$(med "$name.jsonl" ms)" "$(med "$name.jsonl" compute_ms)" \
		"$(med "$name.jsonl" comm_ms)" "$a2a" "$a2ak" "$(echo "${sent:-0}" | awk '{ print $1 / 1024 }')" \
		"$a2am" "$cmcomm" "$cmstep" "$rss"
done
echo "(step_ms, compute_ms, comm_ms: medians of rank 0's timed steps and of their time in"
echo " compute and in communication actions, from the binary's log; a2a, a2a_KiB: rank 0's"
echo " all_to_alls per step and the KiB it sends in them at capacity (dtmc inspect); sent_KiB:"
echo " what they sent (median; only the routed rows: the log's a2a_bytes); a2a_cm, cm_comm,"
echo " cm_step: the cost model's ms for those all_to_alls, for all of rank 0's collectives and"
echo " for the step on --hw cpu; rss: the process's peak RSS, all ep ranks together; load at"
echo " the end: $(cut -d' ' -f1-3 /proc/loadavg))"
