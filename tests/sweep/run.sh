#!/bin/bash
# run.sh - `dtmc sweep` end to end (tests/run.cmake registers each mode).
#
#   run.sh DTMC json     models/mlp.dtm --devices 4 --json: the structure, the
#                        counts, every mesh a factorization of 4, the ranking
#                        sorted (the best no slower than any other), the front
#                        undominated; --csv has a row per candidate; --plot
#                        writes an SVG whose time axis is logarithmic (ticks
#                        at 1, 2, 5 x 10^k placed by log10) and whose front
#                        points each carry a <text> label with their
#                        layout, no two labels overlapping; the text report
#                        names the best layout.  On 3 devices (batch 16) the
#                        report names dp=3 as not tried (batch ranks that do
#                        not divide the batch; "untried" in the JSON), and
#                        with --train uneven_shards=true ranks it.  With
#                        -D batch=9 the file's own dp = 2 does not divide the
#                        batch: the sweep still ranks dp = 3.
#                        Timings are the cost model's: checked for order, never
#                        against numbers.  tests/sweep/choose.dtm: both options
#                        of its choose() point are swept and differ on tp = 2.
#   run.sh DTMC cp       models/llama.dtm --devices 4: where cp > 1 the
#                        context_parallel modes are swept (none and ring, the
#                        file leaving it unset; none is Ulysses where that
#                        applies, also on cp x tp = 4, which its 2 kv heads
#                        do not divide: k and v gather the sequence), each
#                        shown in the layout, the JSON and its "train"
#                        overrides, nothing dropped; the fastest ring and
#                        none candidates', the slowest ring's and
#                        cp = 2 x tp = 2 none's step time, peak and bytes sent
#                        equal `dtmc inspect` of the same --mesh and --train,
#                        a none's also with context_parallel=ulysses (the
#                        same plan, all_to_alls in it); with 2 heads none
#                        ranks on cp = 4 (gathered) and --train
#                        context_parallel=ulysses is dropped there with
#                        partition's reason; --train context_parallel=ring
#                        fixes it, with no warning from the cp = 1 candidates.
#   run.sh DTMC errors   bad --devices, --hw, --mem-limit, options: exit 1 and a
#                        message naming the option.
#   run.sh DTMC measure  --measure 2 on models/mlp.dtm (builds and runs two
#                        binaries): predicted and measured columns, a ratio
#                        line, measured peak = predicted peak.
#   run.sh DTMC calibrate  `dtmc calibrate --device cuda` without a GPU says why
#                        and writes nothing (with one: a GPU profile);
#                        `dtmc calibrate --budget 3` writes a profile (its
#                        curves, this machine's cores) that sweep then uses by
#                        default and names; a training binary's
#                        --profile-actions carries the plan's attention FLOPs;
#                        the fidelity check on a small set: 3 candidates of
#                        models/gpt.dtm (d=256, the calibration GPT's size)
#                        spread over the ranking, measured
#                        against the calibrated profile, each within 0.5-2x
#                        (loose: CI machines are loaded; bench/fidelity.sh
#                        holds the 0.8-1.25 target on a quiet machine), the
#                        JSON's predicted_ms the ranking's step time.
set -u
dtmc=$1
mode=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# same_as_inspect MODEL WHAT STEP PEAK SENT MESH TRAIN NEED_A2A: `dtmc inspect`
# of MODEL on MESH with TRAIN (--train K=V words) reports the step time
# (1e-6 relative), peak bytes and send bytes sweep gave the candidate; with
# NEED_A2A = 1 its plan must have all_to_alls
same_as_inspect() {
	local model=$1 what=$2 step=$3 peak=$4 sent=$5 mesh=$6 train=$7 need=$8
	# shellcheck disable=SC2086
	"$dtmc" inspect "$model" --json --mesh "$mesh" $train > "$tmp/in.json" ||
		fail "inspect --mesh $mesh $train exited $?"
	python3 - "$tmp/in.json" "$what $mesh $train" "$step" "$peak" "$sent" "$need" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
what, step, peak, sent = sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
got_peak = max(s["memory"]["peak_bytes"] for s in d["stages"])
got_sent = max(s["totals"]["send_bytes"] for s in d["stages"])
got_step = d["step"]["step_s"]
a2a = sum(1 for s in d["stages"] for c in s["comm"] if c["kind"] == "all_to_all")
if got_peak != peak or got_sent != sent or abs(got_step - step) > 1e-6 * step or \
        (sys.argv[6] == "1" and not a2a):
    print("FAIL: %s: sweep says step %g s, peak %d, sent %d; inspect %g, %d, %d (%d all_to_alls)"
          % (what, step, peak, sent, got_step, got_peak, got_sent, a2a), file=sys.stderr)
    sys.exit(1)
print("%s: step %.4g ms, peak %d B, sent %d B, %d all_to_alls, as inspect"
      % (what, step * 1e3, peak, sent, a2a))
EOF
}

case $mode in
json)
	"$dtmc" sweep models/mlp.dtm --devices 4 --json --top 5 > "$tmp/out.json" 2> "$tmp/err.txt" ||
		fail "sweep --json exited $? ($(cat "$tmp/err.txt"))"
	python3 - "$tmp/out.json" <<'EOF' || exit 1
import json, math, sys
d = json.load(open(sys.argv[1]))
def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)
for k in ("model", "devices", "hw", "axes", "candidates", "ok", "failed", "over_mem",
          "seconds", "candidates_per_s", "ranking", "pareto", "dropped", "mem_limit"):
    if k not in d:
        fail("no key %r" % k)
if d["model"] != "mlp" or d["devices"] != 4 or d["axes"] != ["dp", "tp"]:
    fail("header: %r %r %r" % (d["model"], d["devices"], d["axes"]))
if d["candidates"] != d["ok"] + d["failed"] + d["over_mem"]:
    fail("counts do not add up")
if d["ok"] == 0 or not d["ranking"]:
    fail("nothing ranked")
if len(d["ranking"]) != min(5, d["ok"]):
    fail("--top 5 gave %d rows" % len(d["ranking"]))
if len(d["dropped"]) != d["failed"] + d["over_mem"]:
    fail("dropped lists %d, counts say %d" % (len(d["dropped"]), d["failed"] + d["over_mem"]))
meshes = set()
for c in d["ranking"] + d["pareto"] + d["dropped"]:
    for k in ("id", "layout", "mesh", "zero", "microbatches", "schedule",
              "sequence_parallel", "recompute", "choose", "status"):
        if k not in c:
            fail("candidate without %r: %r" % (k, c))
    p = 1
    for v in c["mesh"].values():
        p *= v
    if p != 4:
        fail("mesh %r is not a factorization of 4" % c["mesh"])
    meshes.add(tuple(sorted(c["mesh"].items())))
    if c["status"] != "ok" and not c.get("reason"):
        fail("dropped without a reason: %r" % c)
for c in d["ranking"] + d["pareto"]:
    if c["status"] != "ok":
        fail("ranked but %s" % c["status"])
    for k in ("step_s", "tokens_per_s", "peak_bytes"):
        if not (isinstance(c[k], (int, float)) and math.isfinite(c[k]) and c[k] > 0):
            fail("%s = %r" % (k, c[k]))
times = [c["step_s"] for c in d["ranking"]]
if times != sorted(times):
    fail("ranking not sorted by step time")
best = d["ranking"][0]
front = d["pareto"]
pts = [(c["peak_bytes"], c["step_s"]) for c in front]
for i, (m, t) in enumerate(pts):
    for j, (m2, t2) in enumerate(pts):
        if i != j and m2 <= m and t2 <= t and (m2 < m or t2 < t):
            fail("front point %d dominated by %d" % (i, j))
if [m for m, _ in pts] != sorted(m for m, _ in pts):
    fail("front not in ascending memory")
if min(t for _, t in pts) != best["step_s"]:
    fail("the fastest candidate is not on the front")
print("json ok: %d candidates, best %s" % (d["candidates"], best["layout"]))
EOF
	# the best candidate is no slower than any other, over every row of --csv
	"$dtmc" sweep models/mlp.dtm --devices 4 --csv > "$tmp/out.csv" || fail "sweep --csv exited $?"
	python3 - "$tmp/out.csv" "$tmp/out.json" <<'EOF' || exit 1
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
if len(rows) != d["candidates"]:
    print("FAIL: csv has %d rows, json %d candidates" % (len(rows), d["candidates"]), file=sys.stderr)
    sys.exit(1)
ok = [r for r in rows if r["status"] == "ok"]
best = [r for r in ok if r["rank"] == "1"]
if len(best) != 1 or any(float(best[0]["step_s"]) > float(r["step_s"]) for r in ok):
    print("FAIL: rank 1 is not the fastest", file=sys.stderr)
    sys.exit(1)
EOF
	# a choose() point is swept: both options, and on tp = 2 they differ
	"$dtmc" sweep tests/sweep/choose.dtm --devices 2 --json --top 1000 > "$tmp/ch.json" ||
		fail "sweep of a choose() model exited $?"
	python3 - "$tmp/ch.json" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
by = {}
for c in d["ranking"]:
    key = (tuple(sorted(c["mesh"].items())), c["zero"], c["microbatches"], c["sequence_parallel"],
           c["recompute"], c["schedule"])
    by.setdefault(key, {})[tuple(c["choose"])] = (c["step_s"], c["peak_bytes"])
if {k for v in by.values() for k in v} != {(0,), (1,)}:
    print("FAIL: choose options swept: %r" % sorted({k for v in by.values() for k in v}), file=sys.stderr)
    sys.exit(1)
tp2 = by[((("dp", 1), ("tp", 2)), 0, 1, False, False, None)]
if tp2[(0,)] == tp2[(1,)]:
    print("FAIL: column and row parallel w1 cost the same on tp=2", file=sys.stderr)
    sys.exit(1)
EOF
	"$dtmc" sweep models/mlp.dtm --devices 4 --plot "$tmp/p.svg" > "$tmp/out.txt" ||
		fail "sweep --plot exited $?"
	grep -q "<svg" "$tmp/p.svg" && grep -q "</svg>" "$tmp/p.svg" || fail "--plot wrote no SVG"
	grep -q "Pareto front" "$tmp/p.svg" || fail "the SVG has no front legend"
	python3 - "$tmp/p.svg" "$tmp/out.json" <<'EOF' || exit 1
import json, math, re, sys
import xml.etree.ElementTree as ET
svg = ET.parse(sys.argv[1]).getroot()
d = json.load(open(sys.argv[2]))
NS = "{http://www.w3.org/2000/svg}"
def fail(msg):
    print("FAIL: --plot:", msg, file=sys.stderr)
    sys.exit(1)
groups = {g.get("class"): g for g in svg.iter(NS + "g") if g.get("class")}
texts = [t.text or "" for t in svg.iter(NS + "text")]
if not any("log scale" in t and t.startswith("step time") for t in texts):
    fail("the time axis is not titled as a log scale: %r" % texts)
# the time ticks: 1, 2 or 5 times a power of ten, placed by log10
if "y-ticks" not in groups or "front-labels" not in groups:
    fail("no time ticks or front labels (groups %r)" % sorted(groups))
ticks = [(float(t.text), float(t.get("y"))) for t in groups["y-ticks"].iter(NS + "text")]
if len(ticks) < 3:
    fail("%d time ticks" % len(ticks))
for v, _ in ticks:
    m = v / 10 ** math.floor(math.log10(v) + 1e-9)
    if min(abs(m - k) for k in (1, 2, 5)) > 1e-6:
        fail("tick %g is not 1, 2 or 5 x 10^k" % v)
(v0, y0), (v1, y1) = ticks[0], ticks[-1]
per_decade = (y1 - y0) / math.log10(v1 / v0)
for v, y in ticks:
    if abs(y0 + per_decade * math.log10(v / v0) - y) > 0.6:
        fail("tick %g at y=%g is not where a log axis puts it" % (v, y))
if per_decade >= 0:
    fail("slower times are not higher up")
# a <text> per front point naming its layout, none overlapping (7 px per
# character at 11 px, the writer's estimate)
labels = list(groups["front-labels"].iter(NS + "text"))
got = sorted(t.text for t in labels)
want = sorted(c["layout"] for c in d["pareto"])
if got != want:
    fail("front labels %r, the front's layouts %r" % (got, want))
boxes = []
for t in labels:
    x, y, w = float(t.get("x")), float(t.get("y")), 7.0 * len(t.text)
    x0 = x - w if t.get("text-anchor") == "end" else x
    boxes.append((x0, y - 11, x0 + w, y + 2))
for i, a in enumerate(boxes):
    for b in boxes[i + 1:]:
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
            fail("labels overlap: %r %r" % (a, b))
print("plot ok: log time axis (%d ticks), %d front points labelled" % (len(ticks), len(labels)))
EOF
	grep -q "^fastest" "$tmp/out.txt" && grep -q "^Pareto front" "$tmp/out.txt" ||
		fail "the text report lacks the ranking or the front"
	best=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ranking'][0]['layout'])" "$tmp/out.json")
	grep -qF -- "$best" "$tmp/out.txt" || fail "the text report does not show '$best'"
	# 3 devices on a batch of 16: dp = 3 is not tried, and the report says
	# so (it said nothing, leaving only tp = 3's failures); with uneven
	# shards allowed it is tried and ranked
	"$dtmc" sweep models/mlp.dtm --devices 3 > "$tmp/u.txt" 2>&1 || fail "sweep --devices 3 exited $?"
	grep -qF "not tried: 1 mesh whose batch ranks do not divide the batch of 16 (dp=3,tp=1: 3)" \
		"$tmp/u.txt" || { cat "$tmp/u.txt" >&2; fail "the report does not say dp=3 was not tried"; }
	"$dtmc" sweep models/mlp.dtm --devices 3 --json > "$tmp/u.json" || fail "sweep --json exited $?"
	python3 - "$tmp/u.json" <<'EOF' || fail "the JSON's untried meshes"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["untried_meshes"] == 1 and d["untried"] == [{"mesh": "dp=3,tp=1", "batch_ranks": 3}], d["untried"]
assert not any(c["mesh"]["dp"] == 3 for c in d["ranking"] + d["dropped"])
EOF
	"$dtmc" sweep models/mlp.dtm --devices 3 --train uneven_shards=true --json --top 1000 \
		> "$tmp/u2.json" 2>/dev/null || fail "sweep --train uneven_shards=true exited $?"
	python3 - "$tmp/u2.json" <<'EOF' || fail "uneven shards: dp = 3 not ranked"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["untried_meshes"] == 0, d["untried"]
assert any(c["mesh"]["dp"] == 3 for c in d["ranking"]), [c["layout"] for c in d["ranking"]]
EOF
	echo "untried ok: dp=3 on a batch of 16 reported, and ranked with uneven shards"
	# -D batch=9: the file's own mesh (dp = 2) does not divide it, but the
	# file's mesh is no candidate (sweep refused the model); dp = 3 ranks,
	# tp = 3 is dropped for the hidden dim of 64, and dp = 2 never tried
	"$dtmc" sweep models/mlp.dtm -D batch=9 --devices 3 --json --top 1000 \
		> "$tmp/u3.json" 2>"$tmp/u3.err" || { cat "$tmp/u3.err" >&2; fail "sweep -D batch=9 exited $?"; }
	python3 - "$tmp/u3.json" <<'EOF' || fail "-D batch=9: not every mesh ranked"
import json, sys
d = json.load(open(sys.argv[1]))
meshes = {(c["mesh"]["dp"], c["mesh"]["tp"]) for c in d["ranking"]}
assert meshes == {(3, 1)}, meshes
assert d["untried_meshes"] == 0, d["untried"]
assert d["dropped"] and all(c["mesh"]["tp"] == 3 and "'w1' (size 64)" in c["reason"]
                            for c in d["dropped"]), d["dropped"][:2]
EOF
	echo "file mesh ok: -D batch=9 sweeps on 3 devices where the file's dp = 2 does not divide it"
	;;
cp)
	"$dtmc" sweep models/llama.dtm --devices 4 --json --top 100000 -q > "$tmp/cp.json" ||
		fail "sweep of llama exited $?"
	python3 - "$tmp/cp.json" > "$tmp/pick.txt" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)
modes = {}
for c in d["ranking"] + d["dropped"]:
    cp, m, words = c["mesh"]["cp"], c["context_parallel"], c["layout"].split()
    if cp == 1 and m is not None:
        fail("cp = 1 but context_parallel %r: %s" % (m, c["layout"]))
    if cp == 1:
        continue
    # the file leaves the mode unset: none (Ulysses wherever it applies,
    # the same plan) and ring are swept, ulysses would only repeat none
    if m not in ("none", "ring"):
        fail("cp = %d with mode %r: %s" % (cp, m, c["layout"]))
    # once compiled, attention says what it ran as, and the layout of
    # an unset mode shows it (cp-none=ulysses or cp-none=gather)
    a = c["attention"]
    if c["status"] == "ok" and a not in ({"none": ("ulysses", "gather")}.get(m, (m,))):
        fail("%s ran as %r: %s" % (m, a, c["layout"]))
    if (m == "none" and "cp-none=%s" % a not in words) or (m != "none" and m not in words):
        fail("the layout does not show %s: %s" % (m, c["layout"]))
    if (m != "none") != ("context_parallel=" + m in c["train"]):
        fail("the --train overrides do not select %s: %r" % (m, c["train"]))
    modes.setdefault((m, c["status"]), []).append(c)
for m in ("none", "ring"):
    if not modes.get((m, "ok")):
        fail("no ranked %s candidate with cp > 1" % m)
if d["dropped"]:
    fail("dropped: %s" % d["dropped"][0]["reason"])
# llama's 2 kv heads do not divide cp x tp = 4: Ulysses all the same (k and
# v keep tp's head split and gather the sequence over cp)
kvg = [c for c in modes[("none", "ok")] if c["mesh"]["cp"] == 2 and c["mesh"]["tp"] == 2]
if not kvg:
    fail("no ranked none candidate on cp = 2 x tp = 2")
# the fastest of each mode, the slowest ring (a pipeline, M > 1), and the
# fastest none on cp = 2 x tp = 2; a none candidate is Ulysses (all_to_alls)
picks = [min(modes[("ring", "ok")], key=lambda c: c["step_s"]),
         max(modes[("ring", "ok")], key=lambda c: c["step_s"]),
         min(modes[("none", "ok")], key=lambda c: c["step_s"]),
         min(kvg, key=lambda c: c["step_s"])]
for c in picks:
    mesh = ",".join("%s=%d" % kv for kv in c["mesh"].items())
    if c["context_parallel"] == "none" and c["attention"] != "ulysses":
        fail("a none candidate on %s ran as %s, not Ulysses" % (mesh, c["attention"]))
    print(c["context_parallel"], c["step_s"], c["peak_bytes"], c["comm_bytes"], mesh,
          int(c["context_parallel"] == "none"),
          " ".join("--train " + t for t in c["train"]))
EOF
	while read -r mode step peak sent mesh a2a train; do
		same_as_inspect models/llama.dtm "$mode" "$step" "$peak" "$sent" "$mesh" "$train" "$a2a"
		# none is ulysses' plan where Ulysses applies: the same numbers
		[ "$mode" = none ] && same_as_inspect models/llama.dtm "ulysses for none" "$step" \
			"$peak" "$sent" "$mesh" "$train --train context_parallel=ulysses" 1
	done < "$tmp/pick.txt"
	[ "$(wc -l < "$tmp/pick.txt")" -eq 4 ] || fail "picked $(wc -l < "$tmp/pick.txt") candidates, not 4"
	# 2 heads do not divide cp = 4: none gathers the sequence there and
	# ranks; ulysses named by --train is dropped there, with partition's reason
	"$dtmc" sweep models/llama.dtm --devices 4 --json --top 100000 -q -D heads=2 -D kv_heads=2 \
		> "$tmp/h2.json" || fail "sweep of llama with 2 heads exited $?"
	"$dtmc" sweep models/llama.dtm --devices 4 --json --top 100000 -q -D heads=2 -D kv_heads=2 \
		--train context_parallel=ulysses > "$tmp/h2u.json" ||
		fail "sweep of llama with 2 heads, --train context_parallel=ulysses exited $?"
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert not d['dropped'], d['dropped'][0]['reason']
g = [c for c in d['ranking'] if c['mesh']['cp'] == 4 and c['context_parallel'] == 'none']
assert g and all(c['attention'] == 'gather' and 'cp-none=gather' in c['layout'] for c in g), g[:1]
assert all(c['attention'] == 'ulysses' for c in d['ranking'] if c['mesh']['cp'] == 2
           and c['mesh']['tp'] == 1 and c['context_parallel'] == 'none')
d = json.load(open(sys.argv[2]))
bad = [c for c in d['dropped'] if c['context_parallel'] == 'ulysses']
assert bad and all(c['mesh']['cp'] * c['mesh']['tp'] > 2 for c in bad), [c['layout'] for c in bad]
assert all('context_parallel ulysses: attention' in c['reason'] for c in bad), bad[0]['reason']
assert {c['context_parallel'] for c in d['ranking'] + d['dropped'] if c['mesh']['cp'] > 1} == {'ulysses'}
" "$tmp/h2.json" "$tmp/h2u.json" ||
		fail "2 heads: none did not rank on cp = 4 as gather (on cp = 2 as ulysses), or ulysses on cp x tp = 4 was not dropped with partition's reason"
	# fixed by --train: that mode alone; the candidates with cp = 1, where
	# it does nothing, warn of nothing (a candidate's warnings are muted)
	"$dtmc" sweep models/llama.dtm --devices 4 --json --top 100000 -q \
		--train context_parallel=ring > "$tmp/ring.json" 2> "$tmp/e.txt" ||
		fail "sweep --train ring exited $?"
	[ -s "$tmp/e.txt" ] && fail "sweep --train ring printed on stderr: $(cat "$tmp/e.txt")"
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
got = {c['context_parallel'] for c in d['ranking'] + d['dropped'] if c['mesh']['cp'] > 1}
assert got == {'ring'}, got
" "$tmp/ring.json" || fail "--train context_parallel=ring swept other modes"
	# the text report shows the mode; no candidate's warning reaches stderr
	"$dtmc" sweep models/llama.dtm --devices 4 --top 100000 -q > "$tmp/cp.txt" 2> "$tmp/e.txt" ||
		fail "sweep (text) exited $?"
	grep -q 'cp=2,tp=1 .* ring' "$tmp/cp.txt" || fail "the text report shows no ring layout"
	[ -s "$tmp/e.txt" ] && fail "sweep printed on stderr: $(cat "$tmp/e.txt")"
	echo "cp ok"
	;;
moe)
	# models/moe.dtm on 4 devices: the ep axis swept like any other (ep = 1,
	# 2 and 4 ranked), and the fastest candidate with ep > 1 costed as
	# inspect costs the same layout, its all_to_alls included
	"$dtmc" sweep models/moe.dtm --devices 4 --json --top 100000 -q > "$tmp/moe.json" ||
		fail "sweep of moe exited $?"
	python3 - "$tmp/moe.json" > "$tmp/pick.txt" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
eps = sorted({c["mesh"]["ep"] for c in d["ranking"]})
if eps != [1, 2, 4]:
    print("FAIL: ranked ep sizes %s, want [1, 2, 4]" % eps, file=sys.stderr)
    sys.exit(1)
c = min((c for c in d["ranking"] if c["mesh"]["ep"] > 1), key=lambda c: c["step_s"])
mesh = ",".join("%s=%d" % kv for kv in c["mesh"].items())
print(c["step_s"], c["peak_bytes"], c["comm_bytes"], mesh, " ".join("--train " + t for t in c["train"]))
EOF
	read -r step peak sent mesh train < "$tmp/pick.txt"
	same_as_inspect models/moe.dtm moe "$step" "$peak" "$sent" "$mesh" "$train" 1
	echo "moe ok"
	;;
errors)
	# each: expected message, then the arguments
	check() {
		local want=$1
		shift
		"$dtmc" sweep "$@" > "$tmp/o.txt" 2> "$tmp/e.txt"
		local rc=$?
		[ $rc -eq 1 ] || fail "sweep $* exited $rc, not 1"
		grep -qF -- "$want" "$tmp/e.txt" || fail "sweep $*: no '$want' in: $(cat "$tmp/e.txt")"
		[ -s "$tmp/o.txt" ] && fail "sweep $* wrote to stdout"
		return 0
	}
	check "--devices needs a positive integer" models/mlp.dtm --devices 0
	check "--devices needs a positive integer" models/mlp.dtm --devices abc
	check "--devices needs a positive integer" models/mlp.dtm --devices -4
	check "--devices needs a positive integer" models/mlp.dtm --devices 4x
	check "give the number of devices: --devices N" models/mlp.dtm
	check "option '--devices' needs a number" models/mlp.dtm --devices
	check "--hw 'nope': not a built-in profile (h100, h200, a100, b200, cpu) nor a readable file" \
		models/mlp.dtm --devices 4 --hw nope
	printf 'base = h100\nmem_bw = fast\n' > "$tmp/bad.hw"
	check "bad hardware profile" models/mlp.dtm --devices 4 --hw "$tmp/bad.hw"
	check "--mem-limit needs a size in bytes" models/mlp.dtm --devices 4 --mem-limit lots
	check "--top needs a positive integer" models/mlp.dtm --devices 4 --top 0
	check "--measure-rounds needs a positive integer" models/mlp.dtm --devices 4 --measure-rounds 0
	check "--json and --csv exclude each other" models/mlp.dtm --devices 4 --json --csv
	check "unknown option '--frobnicate'" models/mlp.dtm --devices 4 --frobnicate
	check "no input file" --devices 4
	check "cannot open 'nonexistent.dtm'" nonexistent.dtm --devices 4
	# a profile file that works, and a memory limit that drops everything
	printf 'base = cpu\ninter_bw = 1 GB/s\n' > "$tmp/ok.hw"
	"$dtmc" sweep models/mlp.dtm --devices 2 --hw "$tmp/ok.hw" > "$tmp/o.txt" ||
		fail "--hw FILE exited $?"
	"$dtmc" sweep models/mlp.dtm --devices 2 --mem-limit 1KiB --json > "$tmp/o.json" ||
		fail "--mem-limit 1KiB exited $?"
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['ok'] == 0 and d['over_mem'] == d['candidates'] > 0, d
assert all('over the limit' in c['reason'] for c in d['dropped'])
" "$tmp/o.json" || fail "--mem-limit 1KiB did not drop every candidate with its reason"
	echo "errors ok"
	;;
measure)
	# two rounds: both binaries built first, then run twice in turn
	"$dtmc" sweep models/mlp.dtm --devices 2 --hw cpu --measure 2 --measure-steps 4 \
		--measure-rounds 2 > "$tmp/m.txt" 2> "$tmp/e.txt" ||
		fail "--measure exited $?: $(cat "$tmp/e.txt")"
	cat "$tmp/m.txt"
	grep -q "^measured here.*the fastest of 2 runs each" "$tmp/m.txt" || fail "no measurement table"
	[ "$(grep -c "^dtmc: measuring" "$tmp/e.txt")" -eq 4 ] ||
		fail "not 2 candidates x 2 rounds measured: $(grep "^dtmc:" "$tmp/e.txt")"
	rows=$(awk '/^measured here/ {t = 1; next} t && /^ +[0-9]+ / {n++} END {print n + 0}' "$tmp/m.txt")
	[ "$rows" -eq 2 ] || fail "$rows measured rows, not 2"
	grep -q "^measured / predicted: step time" "$tmp/m.txt" || fail "no summary line"
	# the runtime allocates exactly the planned arenas: peak ratio 1.000
	awk '/^measured here/ {t = 1; next} t && /^ +[0-9]+ / { if ($9 != "1.000") bad = 1 } END {exit bad}' \
		"$tmp/m.txt" || fail "measured peak differs from the predicted one"
	;;
calibrate)
	# bad input: exit 1 and a message, before measuring anything
	touch "$tmp/file"
	for bad in "--budget 0|--budget needs seconds" "--bogus|unknown option '--bogus'" \
		"--device gpu|--device needs cpu or cuda, got 'gpu'" \
		"--hw-out $tmp/file/x.txt|cannot write the profile to $tmp/file/x.txt"; do
		args=${bad%%|*}
		# shellcheck disable=SC2086 # the options are words
		"$dtmc" calibrate $args -q 2> "$tmp/e.txt" && fail "calibrate $args exited 0"
		grep -qF -e "${bad#*|}" "$tmp/e.txt" || fail "calibrate $args: $(cat "$tmp/e.txt")"
	done
	# --device cuda: without a usable GPU (no driver, no device, no CUDA
	# in the build) it says why, exit 1, and writes nothing; with one, a
	# GPU profile (cuBLAS's points, no cores)
	if "$dtmc" calibrate --device cuda --budget 20 --hw-out "$tmp/gpu.txt" -q 2> "$tmp/e.txt"; then
		for key in "^source = dtmc calibrate --device cuda on " "^gemm_bf16 1 16384 16384 16384 = " \
			"^attn_bf16_rate 1 = " "^kernel_overhead = 0$"; do
			grep -q "$key" "$tmp/gpu.txt" || fail "no '$key' line in the GPU profile"
		done
		grep -q "^cores = " "$tmp/gpu.txt" && fail "a GPU profile with cores"
	else
		grep -Eq "^dtmc: error: calibrate --device cuda: .+$" "$tmp/e.txt" ||
			fail "calibrate --device cuda failed without saying why: $(cat "$tmp/e.txt")"
		[ -e "$tmp/gpu.txt" ] && fail "calibrate --device cuda failed but wrote a profile"
	fi
	prof=$tmp/hw.txt
	DTM_HW_PROFILE=$prof "$dtmc" calibrate --budget 3 -q 2> "$tmp/e.txt" ||
		fail "calibrate exited $?: $(cat "$tmp/e.txt")"
	grep -q "^cores = $(getconf _NPROCESSORS_ONLN)$" "$prof" || fail "no 'cores = N' line: $(cat "$prof")"
	for key in "^source = dtmc calibrate on " "^gemm 1 " "^stream_bw 1 " "^attn_rate 1 = " \
		"^attn_bwd_rate 1 = " "^step_overhead = " "^feed_rate = " "^feed_x_rate = " "^coll all_reduce 2 = " "^coll all_gather 4 = " \
		"^coll send 2 = "; do
		grep -q "$key" "$prof" || fail "no '$key' line in the profile: $(cat "$prof")"
	done
	# the kernel classes' factors (the calibration GPT's GELU, LayerNorm, ...;
	# its GEMMs against the grid's)
	for key in "^kernel_factor 1 gemm = " "^kernel_factor_bf16 1 gemm = " \
		"^kernel_factor 1 gelu_bwd = " "^kernel_factor 1 fused.gelu = " \
		"^kernel_factor_bf16 1 layernorm = "; do
		grep -q "$key" "$prof" || fail "no '$key' line in the profile: $(cat "$prof")"
	done
	# the cache model's lines, where the system says its L2's size (sysconf)
	l2=$(getconf LEVEL2_CACHE_SIZE 2> /dev/null || true)
	if [ "${l2:-0}" -gt 0 ] 2> /dev/null; then
		grep -q "^l2_size = $l2$" "$prof" || fail "no 'l2_size = $l2' line: $(cat "$prof")"
		grep -q "^gemm_cold_bw 1 = " "$prof" || fail "no 'gemm_cold_bw 1' line: $(cat "$prof")"
	fi
	# the binary's --calibrate-gemm grid: 96 shapes on 1 thread and on every core
	for t in 1 "$(getconf _NPROCESSORS_ONLN)"; do
		n=$(grep -c "^gemm $t " "$prof")
		[ "$n" -ge 96 ] || fail "$n GEMM points of $t threads, not 96 or more"
	done
	"$dtmc" inspect models/mlp.dtm --hw "$prof" > /dev/null || fail "--hw cannot read the profile"
	# the default profile: sweep names it; DTM_HW_PROFILE=none: h100
	DTM_HW_PROFILE=$prof "$dtmc" sweep models/mlp.dtm --devices 2 > "$tmp/s.txt" ||
		fail "sweep with the calibrated default exited $?"
	grep -q "^profile $prof (dtmc calibrate on " "$tmp/s.txt" ||
		fail "sweep did not name the profile: $(head -3 "$tmp/s.txt")"
	grep -q "hardware calibrated" "$tmp/s.txt" || fail "sweep did not use the profile"
	DTM_HW_PROFILE=none "$dtmc" sweep models/mlp.dtm --devices 2 | grep -q "hardware h100" ||
		fail "DTM_HW_PROFILE=none did not fall back to h100"
	# the binary's plan carries the attention kernels' FLOPs (plan_build's
	# attn_flops: 4 B T T D / 2 per layer = 1,048,576 at the defaults)
	"$dtmc" build models/gpt.dtm --mesh pp=1,dp=1,tp=1 -o "$tmp/gpt" > /dev/null || fail "build"
	"$tmp/gpt" --steps 2 -q --profile-actions "$tmp/p.tsv" || fail "--profile-actions run"
	n=$(awk -F'\t' '$13 == "attention" && $4 == 1048576 {n++} END {print n + 0}' "$tmp/p.tsv")
	[ "$n" -eq 2 ] || fail "$n attention kernels with 1048576 FLOPs in the profile, not 2: $(grep attention "$tmp/p.tsv")"
	n=$(awk -F'\t' '$13 == "attention_bwd" && $4 == 2097152 {n++} END {print n + 0}' "$tmp/p.tsv")
	[ "$n" -eq 2 ] || fail "$n attention_bwd kernels with 2097152 FLOPs, not 2"
	# bf16: the calibration GPT in bf16 gives attention's bf16 rates and
	# bf16 GEMM points; the grid times bf16 GEMMs too where oneDNN runs them
	for key in "^attn_bf16_rate 1 = " "^attn_bf16_bwd_rate 1 = " "^gemm_bf16 1 "; do
		grep -q "$key" "$prof" || fail "no '$key' line in the profile: $(cat "$prof")"
	done
	if grep -q avx512_bf16 /proc/cpuinfo &&
		"$tmp/gpt" --steps 1 -v 2>&1 | grep -q "bf16 on onednn"; then
		for t in 1 "$(getconf _NPROCESSORS_ONLN)"; do
			n=$(grep -c "^gemm_bf16 $t " "$prof")
			[ "$n" -ge 96 ] || fail "$n bf16 GEMM points of $t threads, not 96 or more"
		done
	fi
	# fidelity on a small set, f32 (3 candidates) and bf16 (2)
	"$dtmc" sweep models/gpt.dtm -D d=256 -D layers=2 -D ctx=128 -D batch=8 --devices 2 \
		--hw "$prof" --measure 3 --measure-pick spread \
		--measure-steps 4 --json -q > "$tmp/f.json" 2> "$tmp/e.txt" ||
		fail "--measure exited $?: $(cat "$tmp/e.txt")"
	"$dtmc" sweep models/gpt.dtm -D d=256 -D layers=2 -D ctx=128 -D batch=8 --devices 2 \
		--train precision=bf16 --hw "$prof" --measure 2 --measure-pick spread \
		--measure-steps 4 --json -q > "$tmp/f16.json" 2> "$tmp/e.txt" ||
		fail "--measure (bf16) exited $?: $(cat "$tmp/e.txt")"
	for f in f.json:3 f16.json:2; do
	python3 - "$tmp/${f%%:*}" "${f#*:}" <<'EOF' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
m = d["measured"]
assert len(m) == int(sys.argv[2]), m
assert d["hw"] == "calibrated" and d["hw_source"].startswith("dtmc calibrate on"), d["hw"]
places = [x["place"] for x in m]
assert places[0] == 1 and places[-1] == d["ok"] and places == sorted(places), places
best = d["ranking"][0]
assert best["layout"] == m[0]["layout"], (best, m[0])
assert abs(best["step_s"] * 1e3 - m[0]["predicted_ms"]) <= 1e-5 * m[0]["predicted_ms"], (best, m[0])
for x in m:
    assert abs(x["ratio"] - x["measured_ms"] / x["predicted_ms"]) < 1e-4, x
    assert 0.5 <= x["ratio"] <= 2.0, "measured / predicted %.2f for %s" % (x["ratio"], x["layout"])
    assert x["measured_peak"] == x["predicted_peak"], x
assert -1 <= d["spearman"] <= 1, d["spearman"]
print("fidelity:", ", ".join("%s %.2f" % (x["layout"], x["ratio"]) for x in m),
      "spearman %.2f" % d["spearman"])
EOF
	done
	;;
calibrate-mpi)
	# the mpi backend (tests/run.cmake registers it where Open MPI is):
	# the binary's --calibrate-comm and the multi-rank runs under mpirun
	"$dtmc" calibrate --budget 1 --backend mpi --hw-out "$tmp/mpi.txt" -q 2> "$tmp/e.txt" ||
		fail "calibrate --backend mpi exited $?: $(cat "$tmp/e.txt")"
	grep -q "^source = .* mpi backend" "$tmp/mpi.txt" || fail "no mpi source line"
	for key in "^coll all_reduce 2 = " "^coll all_to_all 4 = " "^coll send 2 = " "^gemm 1 "; do
		grep -q "$key" "$tmp/mpi.txt" || fail "no '$key' line: $(cat "$tmp/mpi.txt")"
	done
	"$dtmc" inspect models/mlp.dtm --hw "$tmp/mpi.txt" > /dev/null || fail "--hw cannot read it"
	;;
*)
	fail "unknown mode '$mode'"
	;;
esac
