#!/usr/bin/env bash
# moe_a2a.sh DTMC - the all_to_all bytes and expert load of a mixture of
# experts (issue 18 point 4), on a batch whose routing is known: a copy of
# models/moe.dtm whose router adds 30 to experts 0 and 1, so every token
# chooses those two, on ep = 2 (experts 0 and 1 on rank 0, 2 and 3 on rank
# 1; the batch split over ep, groups 0-3 on rank 0).  Checks:
#   1. dtmc inspect: 4 all_to_alls per layer (dispatch and combine, each
#      way), each sending (ep-1)/ep of its block: the capacity bound
#      (B/ep) * E * C * d * 4 bytes per all_to_all; and its routing table
#      (per layer: B/ep groups of T tokens, k choices, E experts, C);
#   2. the runtime's log: the expert load (every token's two choices at
#      experts 0 and 1: B*T each), the drops (each group's T choices of an
#      expert past its capacity C: B*(T-C)), the same every step;
#   3. the bytes rank 0's all_to_alls sent (a2a_bytes), which the sparse
#      form (runtime/comm.c, comm_all_to_all_rows) makes the routed
#      tokens': per layer, the forward dispatch sends rank 1 nothing (its
#      experts got no token) but the slab counts, the combine returns
#      rank 1's groups' C rows at each of experts 0 and 1, the combine's
#      gradient again only counts, and the dispatch's gradient the
#      combine's rows again.
#   4. the backward stays expert-split where the expert activations
#      outweigh the experts' weights (ctx 64, and dropless capacity): 4
#      all_to_alls per layer and no weight all_gather, through the
#      gradients of the annotated values taking their placements
#      (passes/autodiff.c, pin_grad; without it: 16 and weight gathers).
set -u
dtmc=$1
py=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_moe_a2a_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (moe_a2a): $*" >&2; exit 1; }
for defs in "-D ctx=64" "-D capacity_factor=4"; do
	# shellcheck disable=SC2086
	"$dtmc" inspect models/moe.dtm --mesh ep=2 $defs --json >"$tmp/bwd.json" ||
		fail "inspect $defs failed"
	"$py" - "$tmp/bwd.json" "$defs" <<'PY' || fail "see above"
import json, sys
j = json.load(open(sys.argv[1]))
kinds = [c["kind"] for st in j["stages"] for c in st["comm"]]
a2a, ag = kinds.count("all_to_all"), kinds.count("all_gather")
print("moe_a2a: %s on ep=2: %d all_to_alls, %d all_gathers" % (sys.argv[2], a2a, ag))
sys.exit(0 if a2a == 8 and ag == 0 else 1)
PY
done
sed -e 's/^\(  logits = x @ router\)/\1 + 30.0 * sum(one_hot(topk(x * 0.0, k = 2), n = experts), axis = 2)/' \
	models/moe.dtm >"$tmp/forced.dtm"
grep -q '30.0 \* sum(one_hot' "$tmp/forced.dtm" || fail "no router logits to force"
"$dtmc" build "$tmp/forced.dtm" --mesh ep=2 -o "$tmp/forced" >/dev/null || fail "build failed"
"$dtmc" inspect "$tmp/forced.dtm" --mesh ep=2 --json >"$tmp/inspect.json" || fail "inspect failed"
"$tmp/forced" --steps 3 --seed 0 -q --log "$tmp/log.jsonl" || fail "training failed"
"$py" - "$tmp/inspect.json" "$tmp/log.jsonl" <<'PY' || fail "see above"
import json, math, sys
# models/moe.dtm's defaults
B, T, d, k, E, L, ep = 8, 32, 64, 2, 4, 2, 2
C = min(T, math.ceil(1.25 * T * k / E))
f4, bad = 4, []
ins = json.load(open(sys.argv[1]))
a2a = [c for st in ins["stages"] for c in st["comm"] if c["kind"] == "all_to_all"]
bound = (B // ep) * E * C * d * f4 * (ep - 1) // ep
if len(a2a) != 4 * L or any(c["send_bytes"] != bound for c in a2a):
    bad.append("inspect: %d all_to_alls sending %s, want %d of %d" %
               (len(a2a), sorted({c["send_bytes"] for c in a2a}), 4 * L, bound))
# inspect's routing: each layer's site, B/ep groups of T tokens, k choices,
# E experts with C slots each per group
want_r = [{"site": l + 1, "layer": "moe.%d.slot" % l, "experts": E, "capacity": C,
           "groups": B // ep, "tokens": T, "choices": k} for l in range(L)]
if ins["stages"][0]["routing"] != want_r:
    bad.append("inspect: routing %s, want %s" % (ins["stages"][0]["routing"], want_r))
slabs = (B // ep) * (E // ep)              # (group, expert) slabs per block
counts = (ep - 1) * slabs * 4               # the i32 slab counts, each way
want = L * (counts                          # dispatch: rank 1's experts get nothing
            + slabs * C * d * f4 + counts   # combine: rank 1's groups, C rows each
            + counts                        # the combine's gradient: nothing back
            + slabs * C * d * f4 + counts)  # the dispatch's gradient: as the combine
load = [[B * T, B * T, 0, 0]] * L
drop = [[B * (T - C), B * (T - C), 0, 0]] * L
for line in open(sys.argv[2]):
    s = json.loads(line)
    if s.get("a2a_bytes") != want:
        bad.append("step %d: a2a_bytes %s, want %d" % (s["step"], s.get("a2a_bytes"), want))
    m = s.get("moe", {})
    if m.get("load") != load or m.get("dropped") != drop:
        bad.append("step %d: moe %s, want load %s dropped %s" % (s["step"], m, load, drop))
for b in bad:
    print(b)
print("moe_a2a: inspect %d all_to_alls of %d bytes sent (the capacity bound); the "
      "runtime sent %d (the routed rows), load %s, dropped %s" % (len(a2a), bound, want,
      load[0], drop[0]))
sys.exit(1 if bad else 0)
PY
