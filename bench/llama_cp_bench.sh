#!/usr/bin/env bash
# llama_cp_bench.sh - models/llama.dtm at a long sequence on context
# parallelism cp = 1, 2, 4 (Ulysses and ring; ranks as threads): step
# time, peak memory per rank and the collectives of a step (issue 17
# point 5).
#
#   bench/llama_cp_bench.sh [-D name=value ...]
#
# For each cp in CPS the plan of rank 0 is read from `dtmc inspect --json`
# (memory: the planned peak bytes per rank and its activation arena;
# comm: all_to_alls, all_gathers and sends per step, count and bytes each
# rank sends) for each context_parallel mode in MODES, then the binary `dtmc build` writes trains STEPS timed steps after
# WARM untimed ones on the local backend (the cp ranks are threads of one
# process sharing the host's cores; --threads is left at its default, the
# cores shared out among the ranks) and the median of rank 0's step time and
# the process's peak RSS (all ranks together) are printed, with the medians
# of the compute and communication times the log splits the step into.
# Defaults: -D ctx=2048 -D d=128 -D heads=8 -D kv_heads=4 -D layers=2
# -D batch=2 -D vocab=256 (heads and kv_heads must divide by cp; later -D
# override earlier ones).  Environment: CPS (default "1 2 4"), MODES
# (default "ulysses ring"), STEPS (default 5), WARM (default 2), BUILD
# (default build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
CPS=${CPS:-1 2 4}
MODES=${MODES:-ulysses ring}
STEPS=${STEPS:-5}
WARM=${WARM:-2}
dtmc=$(realpath "${BUILD:-build}/dtmc")
defs=(-D ctx=2048 -D d=128 -D heads=8 -D kv_heads=4 -D layers=2 -D batch=2 -D vocab=256 "$@")
work=$(mktemp -d /tmp/dtm_llama_cp_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3

machine_line
echo "model: llama ${defs[*]}, --mesh cp=N,dp=1,tp=1; $STEPS timed steps after $WARM"

plan() { # JSON: "peak act live a2a a2a_bytes ag ag_bytes" of rank 0 (MiB)
	"$py" - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["stages"][0]
m = s["memory"]
mib = lambda b: "%.1f" % (b / 2**20)
out = [mib(m["peak_bytes"]), mib(m["activations"]["arena"]), mib(m["activations"]["live_at_peak"])]
for kind in ("all_to_all", "all_gather", "send"):
    rows = [r for r in s["comm"] if r.get("kind") == kind]
    out += [str(len(rows)), mib(sum(r.get("send_bytes", 0) for r in rows))]
print(" ".join(out))
PY
}

printf "%-11s %9s %9s %8s %8s %8s %8s %5s %8s %5s %8s %5s %8s %8s\n" cp step_ms compute_ms \
	comm_ms peak_MiB act_MiB live_MiB a2a a2a_MiB ag ag_MiB send send_MiB rss_MiB
for cp in $CPS; do
	for mode in $MODES; do
		[ "$cp" = 1 ] && [ "$mode" != "${MODES%% *}" ] && continue # one run at cp=1
		name=$work/llama.cp$cp.$mode
		mesh=cp=$cp,dp=1,tp=1
		train=()
		[ "$cp" = 1 ] || train=(--train "context_parallel=$mode")
		"$dtmc" inspect --json models/llama.dtm "${defs[@]}" --mesh "$mesh" "${train[@]}" \
			>"$name.json"
		read -r peak act live a2a a2ab ag agb sd sdb < <(plan "$name.json")
		"$dtmc" build models/llama.dtm -o "$name" "${defs[@]}" --mesh "$mesh" "${train[@]}" \
			2>"$name.build"
		/usr/bin/time -f %M -o "$name.rss" "$name" --steps $((STEPS + WARM)) \
			--log "$name.jsonl" -q
		rss=$(awk '{ printf "%.0f", $1 / 1024 }' "$name.rss")
		label=$cp
		[ "$cp" = 1 ] || label="$cp $mode"
		printf "%-11s %9.1f %9.1f %8.1f %8s %8s %8s %5s %8s %5s %8s %5s %8s %8s\n" "$label" \
			"$(med "$name.jsonl" ms)" "$(med "$name.jsonl" compute_ms)" \
			"$(med "$name.jsonl" comm_ms)" "$peak" "$act" "$live" "$a2a" "$a2ab" "$ag" "$agb" \
			"$sd" "$sdb" "$rss"
	done
done
echo "(step_ms, compute_ms, comm_ms: medians of rank 0's timed steps and of their time in"
echo " compute and in communication actions, from the binary's log; peak, act, live: dtmc"
echo " inspect's planned peak bytes of one rank, its activation arena and the activations live"
echo " at the peak; a2a, ag, send: rank 0's all_to_alls, all_gathers and sends per step and"
echo " the MiB it sends in them; rss: the process's peak RSS, all cp ranks together; load at the end:"
echo " $(cut -d' ' -f1-3 /proc/loadavg))"
