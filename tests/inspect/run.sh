#!/usr/bin/env bash
# run.sh - tests of `dtmc inspect` (tools/inspect.c).
#
#   run.sh [--update] golden DTMC   the text report of models/mlp.dtm on
#                                   --mesh dp=2,tp=2 equals
#                                   tests/inspect/mlp.dp2tp2.txt (--update
#                                   rewrites it: read the diff first)
#   run.sh [--update] labels DTMC   the tensor each collective, send and
#                                   recv of models/gpt.dtm on pp=2,dp=2,tp=2
#                                   with 4 micro-batches and sequence
#                                   parallelism moves, as (stage, kind, axes,
#                                   phase, mb, tensor) rows, equals
#                                   tests/inspect/gpt.pp2dp2tp2.m4.sp.txt;
#                                   and no tensor is an SSA id (%N), each
#                                   micro-batch's communication is labelled
#                                   as micro-batch 0's, and no forward
#                                   collective is labelled as a gradient
#   run.sh outputs DTMC             --json and --trace are JSON (python3's
#                                   json.load; the trace's traceEvents have
#                                   name/ph/ts/dur/pid/tid, one track per rank
#                                   and stream), --dot is graphviz (`dot
#                                   -Tsvg` when graphviz is installed), a
#                                   pipeline's trace shows every stage
#   run.sh conformance DTMC         models/gpt.dtm on dp=4, zero 0..3, bf16
#                                   and f32: per-rank params, grads, master
#                                   weights and optimizer state equal
#                                   ../shared/REFERENCE.md's bytes per
#                                   parameter times the parameter count
#   run.sh flops DTMC               GPT-2 small's FLOPs per token on dp=1,
#                                   dp=8, tp=2 and pp=2: llm.c's 6N + 6LCT
#   run.sh errors DTMC              a bad model: file:line:col and exit 1; a
#                                   bad --hw, --rank or --train: exit 1
# Run from anywhere; paths are the repository's.
set -uo pipefail
update=0
if [ "${1-}" = --update ]; then
	update=1
	shift
fi
mode=${1:?usage: run.sh [--update] golden|labels|outputs|conformance|errors DTMC}
dtmc=${2:?usage: run.sh [--update] golden|labels|outputs|conformance|errors DTMC}
case $dtmc in /*) ;; *) dtmc=$PWD/$dtmc ;; esac
cd "$(dirname "$0")/../.."
py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (inspect $mode): $*" >&2; exit 1; }

golden() {
	local want=tests/inspect/mlp.dp2tp2.txt
	"$dtmc" inspect models/mlp.dtm --mesh dp=2,tp=2 >"$tmp/out" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "dtmc inspect failed"; }
	if [ $update = 1 ]; then
		cp "$tmp/out" "$want"
		echo "updated $want"
	elif ! diff -u "$want" "$tmp/out"; then
		fail "the report differs from $want (run.sh --update golden DTMC rewrites it)"
	else
		echo "ok: inspect text of mlp on dp=2,tp=2"
	fi
}

# The labels of inspect's communication tables: the rows of the --json
# report, checked for SSA ids, for micro-batches labelled alike and for
# forward collectives named as gradients, then compared with the golden.
# A second layout (tp=2, sequence parallel, one micro-batch) is checked
# for the rules only: there a forward all_gather's result feeds a weight
# gradient directly.
labels() {
	local want=tests/inspect/gpt.pp2dp2tp2.m4.sp.txt rules=0 differs=0
	"$dtmc" inspect models/gpt.dtm --mesh pp=2,dp=2,tp=2 --train microbatches=4 \
		--train sequence_parallel=true --json >"$tmp/r.json" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "dtmc inspect --json failed"; }
	"$dtmc" inspect models/gpt.dtm --mesh pp=1,dp=1,tp=2 --train sequence_parallel=true \
		--json >"$tmp/r1.json" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "dtmc inspect --json failed"; }
	label_rows "$tmp/r.json" 4 >"$tmp/out" || rules=1
	label_rows "$tmp/r1.json" 1 >/dev/null || rules=1
	if [ $update = 1 ]; then
		[ $rules = 0 ] || fail "the labels break a rule above: $want left as it was"
		cp "$tmp/out" "$want"
		echo "updated $want"
		return
	fi
	diff -u "$want" "$tmp/out" || differs=1
	[ $rules = 0 ] || fail "the labels break a rule above"
	[ $differs = 0 ] || fail "the labels differ from $want (run.sh --update labels DTMC rewrites it)"
	echo "ok: inspect labels of gpt on pp=2,dp=2,tp=2, 4 micro-batches, sequence parallel"
}

# label_rows JSON M: the (stage, kind, axes, phase, mb, tensor) rows of an
# inspect --json report of M micro-batches; exits 1, saying why on stderr,
# when a tensor is an SSA id (%N), a forward collective is labelled as a
# gradient, or a micro-batch's rows differ from micro-batch 0's
label_rows() {
	"$py" - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
M = int(sys.argv[2])
bad = 0
def no(msg):
    global bad
    bad = 1
    print("FAIL: " + msg, file=sys.stderr)
print("# stage kind axes phase mb: tensor (tests/inspect/run.sh labels)")
for st in d["stages"]:
    s, comm = st["stage"], st["comm"]
    for c in comm:
        print(f"stage {s} {c['kind']} {','.join(c['axes'])} {c['phase']} "
              f"{c['microbatch']}: {c['tensor']}")
        if "%" in c["tensor"]:
            no(f"stage {s} #{c['index']} {c['kind']}: an SSA id in '{c['tensor']}'")
        if c["phase"] == "forward" and c["tensor"].startswith(("grad.", "grad(")):
            no(f"stage {s} #{c['index']} forward {c['kind']} labelled '{c['tensor']}'")
    # per phase, the rows of each micro-batch in schedule order; the
    # step's own collectives (gradient sync, loss, grad norm) are shown as
    # micro-batch 0 and come after the last micro-batch's
    for ph in ("forward", "backward"):
        rows = [c for c in comm if c["phase"] == ph]
        last = max((c["index"] for c in rows if c["microbatch"] == M - 1), default=-1)
        per = [[(c["kind"], c["axes"], c["tensor"]) for c in rows
                if c["microbatch"] == k and (k > 0 or M == 1 or c["index"] < last)]
               for k in range(M)]
        for k in range(1, M):
            if per[k] != per[0]:
                no(f"stage {s} {ph}: micro-batch {k}'s rows differ from micro-batch 0's")
                for a, b in zip(per[0], per[k]):
                    if a != b:
                        print(f"  mb 0: {a}\n  mb {k}: {b}", file=sys.stderr)
                        break
sys.exit(bad)
PY
}

# check_trace FILE RANKS: valid Chrome trace JSON with a compute and a
# communication track for each of RANKS ranks
check_trace() {
	"$py" - "$1" "$2" <<'PY' || fail "$1 is not a valid trace"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev, "no traceEvents"
x = [e for e in ev if e.get("ph") == "X"]
assert x, "no complete events"
for e in x:
    for k in ("name", "ph", "ts", "dur", "pid", "tid"):
        assert k in e, f"event without {k}: {e}"
    assert e["dur"] >= 0 and e["ts"] >= 0, e
names = {e["tid"]: e["args"]["name"] for e in ev
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
ranks = int(sys.argv[2])
assert len(names) == 2 * ranks, f"{len(names)} tracks for {ranks} ranks"
assert {e["tid"] for e in x} <= set(names), "an event on an unnamed track"
assert any(e["tid"] % 2 == 1 for e in x), "nothing on a communication track"
print(f"ok: {sys.argv[1].rsplit('/', 1)[-1]}: {len(x)} events on {len(names)} tracks")
PY
}

outputs() {
	"$dtmc" inspect models/gpt.dtm --mesh dp=2,tp=2 --json --trace "$tmp/t.json" \
		--dot "$tmp/g.dot" >"$tmp/r.json" || fail "dtmc inspect --json --trace --dot failed"
	"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["stages"][0]["comm"]' \
		"$tmp/r.json" || fail "--json output is not JSON with a schedule"
	check_trace "$tmp/t.json" 4
	grep -q '^digraph' "$tmp/g.dot" && grep -q -- '->' "$tmp/g.dot" || fail "--dot wrote no graph"
	if command -v dot >/dev/null; then
		dot -Tsvg "$tmp/g.dot" -o "$tmp/g.svg" || fail "dot -Tsvg rejects the --dot output"
		grep -q '<svg' "$tmp/g.svg" || fail "dot wrote no svg"
		echo "ok: --dot renders with graphviz"
	else
		echo "graphviz (dot) not installed: --dot checked for syntax only"
	fi
	# a pipeline: both stages' tracks, and the recvs wait for their sends
	"$dtmc" inspect models/gpt.dtm --mesh pp=2,dp=1,tp=1 --train microbatches=4 \
		--train schedule=1f1b --trace "$tmp/p.json" --rank 1 --dot "$tmp/p.dot" >"$tmp/p.txt" ||
		fail "dtmc inspect of a pipeline failed"
	check_trace "$tmp/p.json" 2
	grep -q 'stage 1, rank 1' "$tmp/p.txt" || fail "no schedule for stage 1"
	grep -q 'stage 1"' "$tmp/p.dot" || fail "--rank 1's graph is not stage 1's"
}

conformance() {
	local prec
	for prec in bf16 f32; do
		for z in 0 1 2 3; do
			"$dtmc" inspect models/gpt.dtm --mesh dp=4 --train zero=$z --train precision=$prec \
				--json >"$tmp/z$z.$prec.json" || fail "dtmc inspect zero=$z $prec failed"
		done
	done
	"$py" - "$tmp" <<'PY' || fail "memory per rank differs from REFERENCE.md's table"
import json, sys
# REFERENCE.md, memory per parameter: mixed-precision Adam is bf16 param 2 +
# bf16 grad 2 + f32 master 4 + f32 m, v 8 (K = 12); all-f32 Adam has no
# master: 4 + 4 + 8.  ZeRO-1 splits master and optimizer state over N,
# ZeRO-2 also grads, ZeRO-3 also params.
N = 4
per = {"bf16": dict(params=2, grads=2, master=4, optimizer_state=8),
       "f32": dict(params=4, grads=4, master=0, optimizer_state=8)}
total = {"bf16": ["16P", "2P + 2P + 12P/N", "2P + 2P/N + 12P/N", "16P/N"],
         "f32": ["16P", "4P + 4P + 8P/N", "4P + 4P/N + 8P/N", "16P/N"]}
bad = 0
for prec, b in per.items():
    for z in range(4):
        d = json.load(open(f"{sys.argv[1]}/z{z}.{prec}.json"))
        P = d["params"]
        m = d["stages"][0]["memory"]
        split = {"params": z >= 3, "grads": z >= 2, "master": z >= 1, "optimizer_state": z >= 1}
        want = {k: b[k] * P / (N if split[k] else 1) for k in b}
        got = {k: m[k] for k in b}
        ok = all(got[k] == want[k] for k in b)
        bad |= not ok
        print(f"{'ok' if ok else 'FAIL'}: {prec} zero {z}, P = {P}: "
              f"{sum(got.values()):.0f} bytes per rank = {total[prec][z]} "
              f"({sum(want.values()):.0f}); " + ", ".join(f"{k} {got[k]}" for k in b))
sys.exit(bad)
PY
}

# FLOPs per token (llm.c's 6N + 6LCT) of GPT-2 small on four meshes: the
# same on each, N = 124,439,808 params (the tied wte once), L = 12 layers,
# C = 768, T = 1024: 746,638,848 + 56,623,104 = 803,261,952.  (L was taken
# from a node field partition drops: 0 on every multi-rank mesh.)
flops() {
	local gpt2="-D vocab=50257 -D ctx=1024 -D d=768 -D heads=12 -D layers=12 -D batch=8"
	local want=$((6 * 124439808 + 6 * 12 * 768 * 1024)) mesh
	for mesh in pp=1,dp=1,tp=1 pp=1,dp=8,tp=1 pp=1,dp=1,tp=2 pp=2,dp=1,tp=1; do
		local mb=1
		[ "${mesh%%,*}" = pp=2 ] && mb=2
		# shellcheck disable=SC2086
		"$dtmc" inspect models/gpt.dtm $gpt2 --mesh $mesh --train microbatches=$mb --json \
			>"$tmp/f.json" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "inspect $mesh failed"; }
		"$py" - "$tmp/f.json" "$want" "$mesh" <<'PY' || fail "FLOPs per token on $mesh"
import json, sys
d = json.load(open(sys.argv[1]))
want, mesh = int(sys.argv[2]), sys.argv[3]
c = d["step"]
got = c["flops_per_token"]
print(f"{mesh}: {got:.6g} FLOPs/token (L {c['layers']}, C {c['channels']}, T {c['seq']}), want {want}")
assert c["layers"] == 12 and c["channels"] == 768 and c["seq"] == 1024
assert got == want, (got, want)
PY
	done
}

errors() {
	local bad=tests/diag/bad_character.dtm
	[ -f "$bad" ] || bad=$(ls tests/diag/*.dtm | head -1)
	"$dtmc" inspect "$bad" >"$tmp/out" 2>"$tmp/err"
	[ $? = 1 ] || fail "a bad model ($bad) did not exit 1"
	grep -qE "^[^ ]+\.dtm:[0-9]+:[0-9]+: error:" "$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "no file:line:col error for $bad"; }
	[ ! -s "$tmp/out" ] || fail "a bad model printed a report"
	local args
	for args in "--hw nosuch" "--rank 4" "--train zero=5" "--nodes 0" "--mesh dp=3,tp=2"; do
		# shellcheck disable=SC2086
		"$dtmc" inspect models/mlp.dtm $args >"$tmp/out" 2>"$tmp/err"
		[ $? = 1 ] || fail "inspect $args did not exit 1"
		[ -s "$tmp/err" ] || fail "inspect $args said nothing"
	done
	printf 'base = h100\ninter_bw = fast\n' >"$tmp/bad.hw"
	"$dtmc" inspect models/mlp.dtm --hw "$tmp/bad.hw" >"$tmp/out" 2>"$tmp/err"
	[ $? = 1 ] && grep -q "bad.hw:2:" "$tmp/err" || fail "a bad --hw file was not reported at its line"
	echo "ok: bad input exits 1 with a message"
}

case $mode in
golden | labels | outputs | conformance | errors | flops) $mode ;;
*) fail "unknown mode '$mode'" ;;
esac
echo ok
