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
#                                   (f32 and bf16 reduce_dtype) and f32:
#                                   per-rank params, grads, master weights
#                                   and optimizer state equal
#                                   ../shared/REFERENCE.md's bytes per
#                                   parameter times the parameter count
#   run.sh policy DTMC              the 12.85B GPT on dp=24, AdamW, zero
#                                   0..3, bf16 params with f32 or bf16
#                                   reduce_dtype, with or without a master:
#                                   model state per rank equals the policy's
#                                   bytes per param times P or the padded
#                                   shards' sum, computed from the param
#                                   shapes, to the byte (issue 16.4)
#   run.sh flops DTMC               GPT-2 small's FLOPs per token on dp=1,
#                                   dp=8, tp=2 and pp=2: llm.c's 6N + 6LCT
#   run.sh errors DTMC              a bad model: file:line:col and exit 1; a
#                                   bad --hw, --rank or --train: exit 1
#   run.sh dot DTMC                 --dot of models/gpt.dtm on pp=2,dp=2,tp=2
#                                   with 4 micro-batches: graphviz renders it;
#                                   a cluster per stage, per micro-batch in
#                                   each and per block instance in those; a
#                                   legend; every IR node drawn, each label
#                                   the global type @ placement then the
#                                   local shard (which the placement and the
#                                   mesh imply); --dot-scope layer.0 draws
#                                   exactly the IR's block-0 nodes (under
#                                   half of them) plus stubs outside it,
#                                   layer.0,mb=0 renders within 5000 x 2500
#                                   pt; a bad scope: one line, exit 1
#                                   (needs graphviz's dot: scripts/deps.sh)
#   run.sh sync DTMC                a batch split over two axes syncs its
#                                   gradients as the same split over one
#                                   does: models/gpt.dtm with the batch over
#                                   (rep, dp) on rep=2,dp=2 under zero 1: one
#                                   all_reduce over rep after the one
#                                   reduce_scatter of the 36 gradients
#                                   (passes/coalesce.c; there were 36 of
#                                   each, then 36 and one bucket), and
#                                   with sequence parallelism on
#                                   rep=2,dp=2,tp=2 and on dp=4,tp=2 two
#                                   gradient all_reduces each (there were 16
#                                   and 1 plus 14 over tp alone)
#   run.sh warnings DTMC            what compiles but costs or does nothing
#                                   is a warning, exact text, from check,
#                                   inspect and build alike: a batch of 6
#                                   over dp=4, sequence_parallel and
#                                   recompute on the MLP; the models'
#                                   own layouts warn of nothing
#   run.sh dropout DTMC             tests/e2e/dropout.dtm on dp=3 (and DP x
#                                   TP, SP, micro-batches, a pipeline): every
#                                   stage's communication, per kind and mesh
#                                   axes (count, bytes), equals the same
#                                   model's without its dropout lines: each
#                                   rank draws its shard's mask, nothing is
#                                   gathered for it (issue 14 point 4)
# Run from anywhere; paths are the repository's.
set -uo pipefail
update=0
if [ "${1-}" = --update ]; then
	update=1
	shift
fi
mode=${1:?usage: run.sh [--update] golden|labels|outputs|conformance|policy|errors|flops|dot|sync|warnings|dropout DTMC}
dtmc=${2:?usage: run.sh [--update] golden|labels|outputs|conformance|policy|errors|flops|dot|sync|warnings|dropout DTMC}
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
	grep -q 'label="stage 1: rank 1 (pp=1, dp=0, tp=0)"' "$tmp/p.dot" ||
		fail "--rank 1's graph has no cluster for stage 1 on rank 1"
}

conformance() {
	local prec
	for prec in bf16 bf16r f32; do
		local args="--train precision=${prec%r}"
		[ "$prec" = bf16r ] && args="$args --train reduce_dtype=bf16"
		for z in 0 1 2 3; do
			# shellcheck disable=SC2086
			"$dtmc" inspect models/gpt.dtm --mesh dp=4 --train zero=$z $args \
				--json >"$tmp/z$z.$prec.json" || fail "dtmc inspect zero=$z $prec failed"
		done
	done
	"$py" - "$tmp" <<'PY' || fail "memory per rank differs from REFERENCE.md's table"
import json, sys
# REFERENCE.md, memory per parameter: mixed-precision Adam is bf16 param 2 +
# bf16 grad 2 + f32 master 4 + f32 m, v 8 (K = 12): bf16r, reduce_dtype
# bf16; the default f32 reduce_dtype keeps f32 gradients, Megatron's "bf16
# params, fp32 grads 18 -> 6 + 12/d"; all-f32 Adam has no master: 4 + 4 +
# 8.  ZeRO-1 splits master and optimizer state over N, ZeRO-2 also grads,
# ZeRO-3 also params.
N = 4
per = {"bf16": dict(params=2, grads=4, master=4, optimizer_state=8),
       "bf16r": dict(params=2, grads=2, master=4, optimizer_state=8),
       "f32": dict(params=4, grads=4, master=0, optimizer_state=8)}
total = {"bf16": ["18P", "2P + 4P + 12P/N", "2P + 4P/N + 12P/N", "18P/N"],
         "bf16r": ["16P", "2P + 2P + 12P/N", "2P + 2P/N + 12P/N", "16P/N"],
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

# Issue 16.4's golden: the 12.85B-parameter GPT (d 5120, 40 layers, 40
# heads, vocab 50257, ctx 2048; batch 24 so dp = 24 splits it, which model
# state does not depend on) on dp = 24 under AdamW, zero 0-3, in three
# mixed-precision policies: bf16 params with the default f32 reduce_dtype
# and f32 master (2 + 4 + 12 = 18 bytes per param: 18P, 2P + 4P + 12S,
# 2P + 16S, 18S), reduce_dtype bf16 (REFERENCE.md's 16: 16P, 2P + 2P + 12S,
# 2P + 14S, 16S) and reduce_dtype and master_dtype bf16 (no master: 2 + 2
# + 8).  S is the sum over params of each one's shard, computed here from
# the param shapes (`dtmc print --after=lower`) as zero.c cuts them: dp on
# the first dim 24 divides, else dim 0 in torch.chunk's ceil(n / 24) rows,
# padded; none of 50257, 2048, 5120 and 20480 divides by 24, so every
# shard is padded and the padding is counted.  Exact to the byte.
policy() {
	local g="-D d=5120 -D layers=40 -D heads=40 -D vocab=50257 -D ctx=2048 -D batch=24"
	local pol z
	# shellcheck disable=SC2086
	"$dtmc" print --after=lower models/gpt.dtm $g --mesh dp=24 >"$tmp/gpt.ir" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "dtmc print failed"; }
	for pol in f32 bf16 bf16m; do
		local args="--train precision=bf16 --train optimizer=adamw"
		[ $pol = f32 ] || args="$args --train reduce_dtype=bf16"
		[ $pol = bf16m ] && args="$args --train master_dtype=bf16"
		for z in 0 1 2 3; do
			# shellcheck disable=SC2086
			"$dtmc" inspect models/gpt.dtm $g --mesh dp=24 --train zero=$z $args --json \
				>"$tmp/p$z.$pol.json" 2>"$tmp/err" && [ ! -s "$tmp/err" ] ||
				{ cat "$tmp/err" >&2; fail "dtmc inspect zero=$z reduce $pol failed or warned"; }
		done
	done
	"$py" - "$tmp" <<'PY' || fail "memory per rank differs from the policy's formulas"
import json, math, re, sys
tmp = sys.argv[1]
N = 24
shapes = [tuple(int(x) for x in m.group(1).split(", "))
          for m in re.finditer(r"= param .* : f32\[([0-9, ]+)\]", open(f"{tmp}/gpt.ir").read())]
P = sum(math.prod(s) for s in shapes)
def shard(s):
    d = next((i for i, n in enumerate(s) if n % N == 0), 0)
    return math.prod(s) // s[d] * math.ceil(s[d] / N)
S = sum(shard(s) for s in shapes)
# bytes per param of params, grads (reduce_dtype), master, Adam m and v
per = {"f32": (2, 4, 4, 8), "bf16": (2, 2, 4, 8), "bf16m": (2, 2, 0, 8)}
keys = ("params", "grads", "master", "optimizer_state")
bad = 0
print(f"P = {P:,} params in {len(shapes)} tensors; shards over {N}: {S:,} "
      f"({S * N - P:,} padding, {S * N / P - 1:.4%})")
for pol, b in per.items():
    for z in range(4):
        d = json.load(open(f"{tmp}/p{z}.{pol}.json"))
        assert d["mesh"] == {"pp": 1, "dp": N, "tp": 1} and d["train"]["zero"] == z
        assert d["train"]["optimizer"] == "adamw" and d["train"]["precision"] == "bf16"
        assert d["train"]["reduce_dtype"] == pol[:4]
        assert d["train"]["master_dtype"] == ("bf16" if pol == "bf16m" else "f32")
        bad |= int(d["params"]) != P
        split = (z >= 3, z >= 2, z >= 1, z >= 1)
        want = [b[k] * (S if split[k] else P) for k in range(4)]
        m = d["stages"][0]["memory"]
        got = [m[k] for k in keys]
        ok = got == want and int(d["params"]) == P
        bad |= not ok
        print(f"{'ok' if ok else 'FAIL'}: reduce {pol[:4]}{' no master' if pol == 'bf16m' else ''}"
              f" zero {z}: {sum(got) / 1e9:.3f} GB per rank (" +
              ", ".join(f"{k} {g:,}" + ("" if g == w else f" want {w:,}")
                        for k, g, w in zip(keys, got, want)) + ")")
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

# The DOT checks (see the top): dot -Tsvg renders it, then python reads
# the file (dtmc's own layout of it: a statement per line).
dot_graph() {
	command -v dot >/dev/null || fail "graphviz's dot not found (scripts/deps.sh installs it)"
	local model=models/gpt.dtm args=(--mesh pp=2,dp=2,tp=2 --train microbatches=4)
	"$dtmc" print "${args[@]}" "$model" >"$tmp/g.ir" || fail "dtmc print failed"
	"$dtmc" inspect "$model" "${args[@]}" --dot "$tmp/g.dot" >/dev/null ||
		fail "dtmc inspect --dot failed"
	"$dtmc" inspect "$model" "${args[@]}" --dot "$tmp/l0.dot" --dot-scope layer.0 >/dev/null ||
		fail "dtmc inspect --dot-scope layer.0 failed"
	"$dtmc" inspect "$model" "${args[@]}" --dot "$tmp/l0m0.dot" --dot-scope layer.0,mb=0 \
		>/dev/null || fail "dtmc inspect --dot-scope layer.0,mb=0 failed"
	local f
	for f in g l0 l0m0; do
		dot -Tsvg "$tmp/$f.dot" -o "$tmp/$f.svg" 2>"$tmp/dot.err" && [ ! -s "$tmp/dot.err" ] ||
			{ cat "$tmp/dot.err" >&2; fail "dot -Tsvg rejects or warns about $f.dot"; }
	done
	"$py" - "$tmp" <<'PY' || fail "the DOT graph is not what it should be"
import math, re, sys
tmp = sys.argv[1]
mesh = {"pp": 2, "dp": 2, "tp": 2}
bad = []
def check(ok, msg):
    if not ok:
        bad.append(msg)
    return ok

# the IR the graph draws: op and block instance per node
ir = {}
for line in open(f"{tmp}/g.ir"):
    m = re.match(r"%(\d+) = (\w+)", line)
    if m:
        b = re.search(r" block (\d+)( |$)", line)
        ir[int(m.group(1))] = (m.group(2), int(b.group(1)) if b else -1)

STR = r'"((?:[^"\\]|\\.)*)"'
def parse(path):
    nodes, edges, clusters, stack = {}, [], {}, []
    for line in open(path):
        line = line.strip()
        m = re.match(r"subgraph (\w+) \{$", line)
        if m:
            stack.append(m.group(1))
            clusters[m.group(1)] = {"parent": stack[-2] if len(stack) > 1 else None}
            continue
        if line == "}":
            if stack:
                stack.pop()
            continue
        m = re.match(r"label=" + STR + ";", line)
        if m and stack:
            clusters[stack[-1]]["label"] = m.group(1)
            continue
        m = re.match(r"(\w+) -> (\w+)", line)
        if m:
            edges.append((m.group(1), m.group(2), "invis" in line))
            continue
        m = re.match(r"(\w+) \[label=" + STR, line)
        if m:
            nodes[m.group(1)] = (m.group(2).split("\\n"), stack[:])
    return nodes, edges, clusters

def ancestors(clusters, c):
    out = []
    while c:
        out.append(clusters[c].get("label", ""))
        c = clusters[c]["parent"]
    return out

def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    return parts + [cur] if s else []

TYPE = r"(f32|bf16|f16|i32)\[([0-9,]*)\]"
def check_label(name, lines):
    """global type @ placement, then the local shard it implies"""
    if not check(len(lines) >= 3, f"{name}: label {lines!r} has no type lines"):
        return None
    g = re.fullmatch(TYPE + r" @ \[([^\]]*)\]( partial\([a-z,]+\))?", lines[1])
    l = re.fullmatch(r"local " + TYPE + r"( \(padded\))?", lines[2])
    if not check(g and l, f"{name}: label lines {lines[1]!r}, {lines[2]!r} are not "
                 "'dtype[global] @ [placement]' and 'local dtype[shard]'"):
        return None
    gshape = [int(x) for x in g.group(2).split(",") if x]
    lshape = [int(x) for x in l.group(2).split(",") if x]
    dims = split_top(g.group(3))
    check(len(dims) == len(gshape) == len(lshape) and g.group(1) == l.group(1),
          f"{name}: {lines[1]!r} / {lines[2]!r} disagree in rank or dtype")
    for gd, ld, pd in zip(gshape, lshape, dims):
        parts = 1
        if pd != "_":
            for ax in pd.strip("()").split(","):
                parts *= mesh[ax]
        check(ld == min(gd, math.ceil(gd / parts)),
              f"{name}: global dim {gd} split {parts} ways ({pd}) is not local {ld}: {lines[1:3]}")
    return gshape, lshape

# ---- the whole pipeline ----
nodes, edges, clusters = parse(f"{tmp}/g.dot")
real = {k: v for k, v in nodes.items() if re.fullmatch(r"n\d+", k)}
check(len(real) == len(ir), f"{len(real)} nodes drawn, the IR has {len(ir)}")
for k, (lines, stack) in real.items():
    i = int(k[1:])
    check(i in ir and lines[0].startswith(f"%{i} {ir[i][0]}"),
          f"{k}: label {lines[0]!r} is not IR node %{i} ({ir.get(i)})")
    check(stack and re.fullmatch(r"cluster_s[01]", stack[0]), f"{k} is in no stage cluster")
    check_label(k, lines)
labels = {c: v.get("label", "") for c, v in clusters.items()}
for s in (0, 1):
    check(labels.get(f"cluster_s{s}", "").startswith(f"stage {s}: rank"), f"no cluster for stage {s}")
    for mb in range(4):
        c = f"cluster_s{s}_mb{mb}"
        check(labels.get(c) == f"micro-batch {mb}" and clusters[c]["parent"] == f"cluster_s{s}",
              f"no cluster for micro-batch {mb} in stage {s}")
        blk = [b for b, v in clusters.items() if v["parent"] == c and labels[b] == f"layer.{s}"]
        check(blk, f"no cluster for layer.{s} in micro-batch {mb} of stage {s}")
check("cluster_legend" in clusters, "no legend cluster")
legend = " | ".join(v[0][0] for k, v in nodes.items() if v[1] and v[1][0] == "cluster_legend")
for want in ("compute", "param", "grad", "optimizer state", "all_reduce", "all_gather",
             "reduce_scatter", "all_to_all", "send", "recv", "local"):
    check(want in legend, f"the legend has no {want!r}: {legend}")
# anchors a reader knows: batch 8 over dp=2, vocab 256 over tp=2, wq's columns over tp
for name, want in (("input tokens", ("i32[8,32] @ [dp,_]", "local i32[4,32]")),
                   ("param wte", ("f32[256,64] @ [tp,_]", "local f32[128,64]")),
                   ("param layer.0.wq", ("f32[64,64] @ [_,tp]", "local f32[64,32]"))):
    got = [v[0][1:3] for v in real.values() if v[0][0].endswith(" " + name)]
    check(got and tuple(got[0]) == want, f"{name}: label {got} is not {want}")
check(any("send" in v[0][0] for v in real.values()) and
      any("recv" in v[0][0] for v in real.values()), "no send/recv drawn")
full = len(real)

# ---- --dot-scope layer.0: exactly the IR's block-0 nodes, and stubs ----
nodes, edges, clusters = parse(f"{tmp}/l0.dot")
real = {k: v for k, v in nodes.items() if re.fullmatch(r"n\d+", k)}
stubs = {k for k in nodes if re.fullmatch(r"x\d+", k)}
block0 = {i for i, (_, b) in ir.items() if b == 0}
check({int(k[1:]) for k in real} == block0,
      f"--dot-scope layer.0 drew {len(real)} nodes, the IR has {len(block0)} in block 0")
check(2 * len(real) < full, f"--dot-scope layer.0: {len(real)} nodes is not under half of {full}")
for k in stubs:
    i = int(k[1:])
    check(ir[i][1] != 0, f"stub {k} is in layer.0")
    check(any((a == k and b in real) or (b == k and a in real) for a, b, _ in edges),
          f"stub {k} has no edge to a drawn node")
for a, b, invis in edges:
    check(a in nodes and b in nodes, f"edge {a} -> {b} to an undeclared node")
    check(invis or a in real or b in real or a.startswith("legend"), f"edge {a} -> {b} between stubs")
print(f"--dot-scope layer.0: {len(real)} of {full} nodes, {len(stubs)} stubs")

# ---- rendered sizes ----
def size(f):
    head = open(f"{tmp}/{f}.svg").read(4000)
    m = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', head)
    return float(m.group(1)), float(m.group(2))
w, h = size("l0m0")
check(w <= 5000 and h <= 2500, f"layer.0,mb=0 renders {w:.0f} x {h:.0f} pt, over 5000 x 2500")
W, H = size("g")
w0, h0 = size("l0")
check(w0 * h0 < 0.5 * W * H, f"layer.0 renders {w0:.0f} x {h0:.0f} pt, not under half the "
      f"area of the whole graph ({W:.0f} x {H:.0f})")
print(f"rendered: whole {W:.0f} x {H:.0f} pt, layer.0 {w0:.0f} x {h0:.0f}, "
      f"layer.0,mb=0 {w:.0f} x {h:.0f}")
for b in bad[:20]:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
	# a bad scope: one line naming the valid ones, exit 1, no report
	"$dtmc" inspect "$model" "${args[@]}" --dot "$tmp/bad.dot" --dot-scope layer.7 \
		>"$tmp/out" 2>"$tmp/err"
	[ $? = 1 ] || fail "--dot-scope layer.7 did not exit 1"
	[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "layer.7" "$tmp/err" &&
		grep -q "stage=0..1, mb=0..3, layer.0, layer.1" "$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "--dot-scope layer.7: not one line listing the valid scopes"; }
	[ ! -s "$tmp/out" ] || fail "--dot-scope layer.7 printed a report"
	"$dtmc" inspect "$model" --dot-scope layer.0 >"$tmp/out" 2>"$tmp/err"
	[ $? = 1 ] && grep -q -- "--dot-scope needs --dot" "$tmp/err" || fail "--dot-scope without --dot"
	echo "ok: bad --dot-scope exits 1 with the valid scopes"
}

# sync_counts JSON: "data_ar reduce_scatter all" -- the non-scalar
# all_reduces over a data axis (rep or dp: gradient synchronisation, not
# tensor parallelism's activations; the loss and grad norm are scalars),
# the reduce_scatters, and every collective of stage 0
sync_counts() {
	"$py" - "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["stages"][0]["comm"]
ar = [x for x in c if x["kind"] == "all_reduce" and x["bytes"] > 8 and
      set(x["axes"]) & {"rep", "dp"}]
rs = [x for x in c if x["kind"] == "reduce_scatter"]
print(len(ar), len(rs), len(c))
PY
}

# sync_of FILE ARGS...: sync_counts of dtmc inspect FILE ARGS --json
sync_of() {
	local f=$1
	shift
	"$dtmc" inspect "$f" "$@" --json >"$tmp/s.json" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; fail "inspect $f $* failed"; }
	sync_counts "$tmp/s.json"
}

sync() {
	sed -e 's/^mesh (pp = 1, dp = /mesh (pp = 1, rep = 1, dp = /' -e 's/\[dp,/[(rep, dp),/g' \
		models/gpt.dtm >"$tmp/hsdp.dtm"
	grep -q 'rep = 1, dp' "$tmp/hsdp.dtm" || fail "no mesh line to add 'rep' to"
	local got sp1 sp2
	got=$(sync_of "$tmp/hsdp.dtm" --mesh rep=2,dp=2 --train zero=1)
	echo "zero 1, rep=2,dp=2: $got (gradient all_reduces, reduce_scatters, collectives)"
	[ "${got% *}" = "1 1" ] || fail "zero 1 on rep=2,dp=2: $got, want 1 1"
	got=$(sync_of models/gpt.dtm --mesh dp=4 --train zero=1)
	echo "zero 1, dp=4: $got"
	[ "${got% *}" = "0 1" ] || fail "zero 1 on dp=4: $got, want 0 1"
	sp2=$(sync_of "$tmp/hsdp.dtm" --mesh rep=2,dp=2,tp=2 --train sequence_parallel=true)
	sp1=$(sync_of models/gpt.dtm --mesh dp=4,tp=2 --train sequence_parallel=true)
	echo "sequence parallel: rep=2,dp=2,tp=2 $sp2, dp=4,tp=2 $sp1"
	[ "${sp2%% *}" = 2 ] || fail "SP on rep=2,dp=2,tp=2: ${sp2%% *} gradient all_reduces, want 2"
	[ "$sp2" = "$sp1" ] || fail "SP: rep=2,dp=2,tp=2 ($sp2) and dp=4,tp=2 ($sp1) differ"
	echo "ok: a batch over (rep, dp) syncs gradients in buckets as one over dp"
}

# want_err CMD ARGS...: dtmc CMD ARGS exits 0 and prints $tmp/want on stderr
want_err() {
	"$dtmc" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "dtmc $* failed"; }
	diff -u "$tmp/want" "$tmp/err" || fail "dtmc $*: the warnings differ"
}

warnings() {
	local cmd
	cat >"$tmp/want" <<'EOF'
models/gpt.dtm:18:35: warning: batch 6 of inputs tokens, targets splits unevenly over dp = 4 (rows: 2 on 3 ranks, 0 on 1): every rank computes 2 rows, 8 in all, the padding's work wasted
  input tokens  : i32[batch, ctx] @ [dp, _]
                                    ^~~~~~~
models/gpt.dtm:18:35: note: a batch divisible by 4 (such as 4 or 8) splits evenly
  input tokens  : i32[batch, ctx] @ [dp, _]
                                    ^~~~~~~
EOF
	for cmd in check inspect; do
		want_err $cmd models/gpt.dtm -D batch=6 --mesh dp=4
	done
	want_err build models/gpt.dtm -D batch=6 --mesh dp=4 -o "$tmp/g"
	cat >"$tmp/want" <<'EOF'
<command line>: warning: sequence_parallel true has no effect: no residual stream (a [batch, seq, ...] value added to a row-parallel result) to split along its sequence over tp
EOF
	want_err inspect models/mlp.dtm --train sequence_parallel=true
	cat >"$tmp/want" <<'EOF'
<command line>: warning: sequence_parallel true has no effect: no column-parallel weight (a [_, tp] param that a matmul multiplies by) is split over a mesh axis of more than one rank
EOF
	want_err inspect models/gpt.dtm --mesh dp=4 --train sequence_parallel=true
	cat >"$tmp/want" <<'EOF'
<command line>: warning: recompute true has no effect: the model has no blocks, and recompute re-runs each block instance's forward in its backward
EOF
	want_err inspect models/mlp.dtm --train recompute=true
	# set in the file: at the setting
	sed 's/^  steps 200$/  recompute true\n  steps 200/' models/mlp.dtm >"$tmp/mlp.dtm"
	grep -q '^  recompute true$' "$tmp/mlp.dtm" || fail "no steps line in models/mlp.dtm"
	cat >"$tmp/want" <<EOF
$tmp/mlp.dtm:25:3: warning: recompute true has no effect: the model has no blocks, and recompute re-runs each block instance's forward in its backward
    recompute true
    ^~~~~~~~~~~~~~
EOF
	want_err inspect "$tmp/mlp.dtm"
	want_err build "$tmp/mlp.dtm" -o "$tmp/m"
	# context_parallel where no attention's sequence is split: cp = 1, or
	# no cp axis (tests/diag/cp_no_split: at the setting in the file)
	cat >"$tmp/want" <<'EOF'
<command line>: warning: context_parallel ring has no effect: no attention's sequence is split over a mesh axis of more than one rank (place the inputs' sequence dim over a mesh axis, as `input tokens : i32[batch, ctx] @ [dp, cp]`, and give the axis ranks: --mesh cp=2)
EOF
	want_err inspect models/llama.dtm --train context_parallel=ring
	sed -i 's/ring has/ulysses has/' "$tmp/want"
	want_err inspect models/gpt.dtm --mesh dp=4 --train context_parallel=ulysses
	want_err build models/llama.dtm --mesh dp=4,cp=1,tp=1 --train context_parallel=ulysses -o "$tmp/l"
	cat >"$tmp/want" <<'EOF'
<command line>: warning: context_parallel ring has no effect: the model has no attention
EOF
	want_err inspect models/mlp.dtm --train context_parallel=ring
	# ... and where the sequence is split, nothing
	: >"$tmp/want"
	want_err inspect models/llama.dtm --mesh dp=1,cp=2,tp=1 --train context_parallel=ring
	want_err inspect models/llama.dtm --mesh dp=1,cp=2,tp=1 --train context_parallel=ulysses
	# settings that change something warn of nothing; nor do the models'
	# own layouts
	: >"$tmp/want"
	want_err check models/gpt.dtm
	want_err inspect models/gpt.dtm
	want_err inspect models/mlp.dtm
	want_err inspect models/gpt.dtm --train sequence_parallel=true --train recompute=true
	want_err inspect models/gpt.dtm -D batch=6 --mesh dp=3
	# ZeRO shards every param at any group size (issue 16): dp = 3 divides
	# none of GPT's dims, and nothing stays whole
	want_err inspect models/gpt.dtm -D batch=6 --mesh dp=3 --train zero=3
	# ... but a scalar has no dim to shard, and zero over one rank does nothing
	cat >"$tmp/scalar.dtm" <<'EOF2'
model scalar
let batch = 6
mesh (dp = 3)
input x : f32[batch, 4] @ [dp, _]
input y : f32[batch, 4] @ [dp, _]
param w : f32[4, 4] init normal(0, 0.1)
param s : f32[] init ones
forward {
  loss = mse(x @ w * s, y)
}
train {
  optimizer adamw(lr = 1e-3)
  zero 3
  steps 2
}
EOF2
	cat >"$tmp/want" <<EOF
$tmp/scalar.dtm:7:7: warning: zero 3: param 's' stays whole over dp: a scalar has no dim to shard
  param s : f32[] init ones
        ^
EOF
	want_err inspect "$tmp/scalar.dtm"
	cat >"$tmp/want" <<'EOF'
<command line>: warning: zero 2 has no effect: its axis dp has one rank, so every rank holds all model state (zero 0)
EOF
	want_err inspect models/gpt.dtm --mesh dp=1 --train zero=2
	grep -q '^train: adamw, zero 0 (zero 2 has no effect), ' "$tmp/out" ||
		fail "inspect does not say that zero 2 over dp=1 is zero 0: $(grep '^train' "$tmp/out")"
	echo "ok: the warnings of what costs or does nothing; the models' layouts warn of nothing"
}

dropout() {
	local model=tests/e2e/dropout.dtm mesh
	grep -v 'dropout(' "$model" >"$tmp/nodrop.dtm"
	[ "$(grep -c 'dropout(' "$model")" -ge 4 ] && ! grep -q 'dropout(' "$tmp/nodrop.dtm" ||
		fail "$model: no dropout lines to delete"
	for mesh in dp=3 dp=2,tp=2 tp=2/sequence_parallel=true dp=3/microbatches=2 \
		pp=2,dp=2/microbatches=2; do
		local args=(--mesh "${mesh%%/*}") t
		[ "$mesh" = "${mesh#*/}" ] || for t in ${mesh#*/}; do args+=(--train "$t"); done
		"$dtmc" inspect "$model" "${args[@]}" --json >"$tmp/d.json" 2>"$tmp/err" &&
			"$dtmc" inspect "$tmp/nodrop.dtm" "${args[@]}" --json >"$tmp/n.json" 2>>"$tmp/err" ||
			{ cat "$tmp/err" >&2; fail "inspect $mesh failed"; }
		"$py" - "$tmp/d.json" "$tmp/n.json" "$mesh" <<'PY' || fail "$mesh: dropout adds communication"
import json, sys
d, n = (json.load(open(f)) for f in sys.argv[1:3])
mesh = sys.argv[3]
def totals(j):
    out = []
    for s in j["stages"]:
        t = s["totals"]
        out.append(sorted((k.get("kind") or ",".join(k["axes"]), k["count"], round(k["send_bytes"], 3))
                          for k in t["by_axes"] + t["by_kind"]))
    return out
a, b = totals(d), totals(n)
print(f"{mesh}: with dropout {a}")
if a != b:
    print(f"{mesh}: without dropout {b}", file=sys.stderr)
    sys.exit(1)
PY
	done
}

case $mode in
golden | labels | outputs | conformance | policy | errors | flops | sync | warnings | dropout) $mode ;;
dot) dot_graph ;;
*) fail "unknown mode '$mode'" ;;
esac
echo ok
