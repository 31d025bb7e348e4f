#!/usr/bin/env bash
# overlap.sh DTMC - the communication thread changes timing, never values
# (issue 5 point 4).
#
# Builds models/gpt.dtm for DP x TP (dp=2,tp=2), a pipeline (pp=2,dp=2,tp=1,
# 2 micro-batches), ZeRO-3 (dp=2) and DDP with one all_reduce per gradient
# (dp=2, bucket_mb=0: most inputs copied aside when queued), trains 5 steps
# with --overlap off (every action in line, as before the communication
# thread), on, nocopy, and on with --comm-delay-us 300 (so collectives stay
# in flight while later kernels run and every hazard wait and input copy is
# exercised), and checks:
#   1. the losses and grad norms of the four runs are the same text
#      (bitwise: the same arithmetic in the same order);
#   2. every step logs compute_s, comm_s, idle_s and feed_ms, and with the delay
#      comm_s covers at least the delay of the messages sent.
set -u
dtmc=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_overlap_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (overlap): $*" >&2; exit 1; }
steps=5

# "step loss grad_norm" per line of a --log file
losses() {
	sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"
}
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }

for layout in "dp=2,tp=2" "pp=2,dp=2,tp=1/microbatches=2" "dp=2/zero=3" "dp=2/bucket_mb=0"; do
	mesh=${layout%%/*} name=m_${layout//[^A-Za-z0-9]/_} args=()
	case $layout in */*) args=(--train "${layout#*/}") ;; esac
	"$dtmc" build models/gpt.dtm -o "$tmp/$name" --mesh "$mesh" "${args[@]}" \
		2>"$tmp/$name.build.txt" || { cat "$tmp/$name.build.txt" >&2; fail "$layout: build failed"; }
	run() {
		local tag=$1
		shift
		timeout 300 "$tmp/$name" --steps $steps --log "$tmp/$name.$tag.jsonl" -q "$@" \
			2>"$tmp/$name.$tag.txt" || { cat "$tmp/$name.$tag.txt" >&2; fail "$layout $*: training failed"; }
		[ "$(losses "$tmp/$name.$tag.jsonl" | wc -l)" -eq $steps ] || fail "$layout $*: no $steps losses"
	}
	run off --overlap off
	run on --overlap on
	run nocopy --overlap nocopy
	run delay --overlap on --comm-delay-us 300
	for tag in on nocopy delay; do
		[ "$(losses "$tmp/$name.$tag.jsonl")" = "$(losses "$tmp/$name.off.jsonl")" ] || {
			paste <(losses "$tmp/$name.off.jsonl") <(losses "$tmp/$name.$tag.jsonl") >&2
			fail "$layout: losses with --overlap $tag differ from --overlap off"
		}
	done
	for tag in off on nocopy delay; do
		for f in compute_s comm_s idle_s feed_ms; do
			[ "$(field "$tmp/$name.$tag.jsonl" $f | grep -c '^[0-9.]*$')" -eq $steps ] ||
				fail "$layout --overlap $tag: the log has no $f on every step"
		done
	done
	# rank 0 sends at least one message a step: 300 us of it at least
	awk '$1 < 0.0003 { bad = 1 } END { exit bad }' <(field "$tmp/$name.delay.jsonl" comm_s) ||
		fail "$layout: comm_s below the 300 us delay: $(field "$tmp/$name.delay.jsonl" comm_s | tr '\n' ' ')"
	echo "$layout: $steps steps, losses identical with --overlap off, on, nocopy, on + 300 us delay" \
		"(last step: $(tail -n 1 "$tmp/$name.delay.jsonl" | grep -o '"compute_s.*' | tr -d '}'))"
done
echo "ok"
