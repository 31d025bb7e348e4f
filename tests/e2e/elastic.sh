#!/usr/bin/env bash
# elastic.sh DTMC MPIRUN - scripts/dtm-run finishes a run after a rank dies
# (issue 20 points 4 and 5).
#
# models/mlp.dtm on dp=4 under mpirun (one process per rank), 40 steps,
# a checkpoint every 4: at a random step between 6 and 24 one rank (not 0,
# chosen at random) is killed with SIGKILL.  dtm-run must see the job fail
# with that rank dead, rebuild for dp=2 with 2 micro-batches (its rule: the
# same global batch and micro-batch size), resume from the last complete
# checkpoint on 2 processes and finish the 40 steps; its JSON log has the
# start, failure (naming the rank), restart and done events.  The restarted
# run's losses equal, bit for bit, a run restarted by hand on that layout
# from the same checkpoint (mpirun -np 2, --resume STEP_DIR), and are within
# 1e-5 of an uninterrupted dp=4 run's (the layouts sum in other orders).
set -u
dtmc=$1 mpirun=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_elastic_XXXXXX")
trap 'kill $sup 2>/dev/null; rm -rf "$tmp"' EXIT
sup=
fail() { echo "FAIL (elastic): $*" >&2; exit 1; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
steps=40 kill_at=$((6 + RANDOM % 19)) victim=$((1 + RANDOM % 3))
echo "elastic: killing rank $victim at step $kill_at"

"$root/scripts/dtm-run" --dtmc "$dtmc" --mpirun "$mpirun" --work "$tmp/w" --log "$tmp/log.jsonl" \
	models/mlp.dtm --mesh dp=4 -- --steps $steps --save "$tmp/ck" --save-every 4 \
	--comm-timeout 20 --comm-delay-us 5000 -q >"$tmp/sup.txt" 2>&1 &
sup=$!
# wait for the step, then kill the rank (5 ms per message keeps a step
# at ~15 ms: without it the run's last steps took less than the polling
# below, and the run could end before the kill); its process is the victim-th of
# the four (mpirun starts them in rank order; the binary names its rank in
# the environment Open MPI gives it)
for ((t = 0; t < 1200; t++)); do
	last=$(losses "$tmp/w/log.1.jsonl" 2>/dev/null | tail -1 | cut -d' ' -f1)
	[ -n "$last" ] && [ "$last" -ge $kill_at ] && break
	kill -0 $sup 2>/dev/null || break
	sleep 0.05
done
pid=
for p in $(pgrep -f "$tmp/w/model.1"); do
	[ "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = $victim ] &&
		pid=$p
done
[ -n "$pid" ] || fail "no process of rank $victim to kill (the run ended at step ${last:-?}?): $(cat "$tmp/sup.txt")"
kill -9 "$pid"
wait $sup
rc=$?
sup=
[ $rc -eq 0 ] || fail "dtm-run exited $rc: $(tail -20 "$tmp/sup.txt")"
grep -q "\"event\":\"failure\",\"attempt\":1,\"exit\":[0-9]*,\"dead_ranks\":\\[$victim\\]" "$tmp/log.jsonl" ||
	fail "no failure event naming rank $victim: $(grep event "$tmp/log.jsonl")"
restart=$(grep '"event":"restart"' "$tmp/log.jsonl")
echo "$restart" | grep -q '"ranks":2,"mesh":"dp=2,tp=1","microbatches":2' ||
	fail "not restarted on dp=2 with 2 micro-batches: $restart"
grep -q '"event":"done","attempt":2,"exit":0' "$tmp/log.jsonl" || fail "no done event"
from=$(echo "$restart" | sed 's/.*"resume":"\([^"]*\)".*/\1/')
echo "elastic: $restart"
# the restarted run's steps: those after the resumed step, attempt 2's
got=$tmp/w/log.2.jsonl
n=$(losses "$got" | wc -l)
first=$(losses "$got" | head -1 | cut -d' ' -f1)
[ "$(losses "$got" | tail -1 | cut -d' ' -f1)" = $steps ] || fail "the restarted run did not reach step $steps"
# by hand: the same layout from the same checkpoint
"$dtmc" build models/mlp.dtm --mesh dp=2 --train microbatches=2 -o "$tmp/hand" >/dev/null 2>&1 ||
	fail "build dp=2"
timeout 300 "$mpirun" -np 2 --oversubscribe "$tmp/hand" --backend mpi --steps $steps \
	--resume "$from" --log "$tmp/hand.jsonl" -q >"$tmp/hand.txt" 2>&1 ||
	fail "the restart by hand: $(cat "$tmp/hand.txt")"
[ "$(losses "$got")" = "$(losses "$tmp/hand.jsonl")" ] ||
	fail "dtm-run's restart and the one by hand differ: $(paste <(losses "$got") <(losses "$tmp/hand.jsonl") | head -3)"
echo "elastic: steps $first..$steps after the restart: the restart by hand's losses, bit for bit ($n steps)"
# and an uninterrupted dp=4 run
"$tmp/w/model.1" --steps $steps --log "$tmp/full.jsonl" -q || fail "uninterrupted dp=4"
paste <(losses "$tmp/full.jsonl" | sed -n "$first,\$p") <(losses "$got") | awk '
	{ d = $2 - $4; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if ($1 != $3 || d > 1e-5 * s) bad = 1; n++ }
	END { exit bad || n == 0 }' || fail "the restarted run strays from the uninterrupted one"
echo "elastic: and within 1e-5 of the uninterrupted dp=4 run"
echo "elastic ok"
