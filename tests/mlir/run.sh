#!/usr/bin/env bash
# run.sh DTMC [MLIR_OPT] - `dtmc export-mlir` (issue 19 points 1 and 4).
#
# With MLIR_OPT (dtm built with MLIR 19): every shipped model and the op
# corpora export to a module MLIR verified (dtmc fails otherwise), which
#   - MLIR's own mlir-opt parses and prints back unchanged (dtmc writes
#     MLIR's printed form: a fixed point);
#   - has @forward's arguments the model's params and inputs, by name, in
#     `dtmc print --after=lower`'s node order, and returns a tensor<f32>;
#   - has a mesh.shard for every placement the lowered program knows;
#   - keeps the matmuls as linalg (matmul or generic) and calls a declared
#     @dtm function for each op MLIR lacks;
# A rank's program (--after=partition, and pipeline under pp=2) verifies,
# is mlir-opt's fixed point and has the collectives of the rank's stage.
# Bad requests fail cleanly: --after=fuse, a rank off the mesh, an unknown
# model.
# Without MLIR_OPT: export-mlir exits 1 and names the packages to install.
set -u
dtmc=$1 opt=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_mlir_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (mlir): $*" >&2; exit 1; }
if [ -z "$opt" ]; then
	"$dtmc" export-mlir models/mlp.dtm >"$tmp/o" 2>"$tmp/e" && fail "export-mlir without MLIR exited 0"
	grep -q "libmlir-19-dev" "$tmp/e" || fail "no install hint: $(cat "$tmp/e")"
	[ -s "$tmp/o" ] && fail "wrote output without MLIR"
	echo "mlir: not built; export-mlir says: $(head -1 "$tmp/e")"
	exit 0
fi
# fixed_point BASE LABEL: mlir-opt prints BASE.mlir back unchanged (dtmc
# writes MLIR's printed form)
fixed_point() {
	"$opt" "$1.mlir" -o "$1.opt.mlir" 2>"$1.err" ||
		fail "$2: mlir-opt rejects it: $(cat "$1.err")"
	# (mlir-opt ends its output with a blank line)
	sed -i -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$1.opt.mlir"
	cmp -s "$1.mlir" "$1.opt.mlir" ||
		fail "$2: mlir-opt prints it otherwise: $(diff "$1.mlir" "$1.opt.mlir" | head -5)"
}
for src in models/*.dtm tests/cuda/ops.dtm tests/e2e/dropout.dtm tests/fuzz/corpus/route.dtm; do
	name=$(basename "$src" .dtm)
	"$dtmc" export-mlir "$src" -o "$tmp/$name.mlir" 2>"$tmp/$name.err" ||
		fail "$src: $(cat "$tmp/$name.err")"
	fixed_point "$tmp/$name" "$src"
	"$dtmc" print --after=lower "$src" >"$tmp/$name.ir" || fail "$src: print failed"
	/usr/bin/python3 - "$tmp/$name.mlir" "$tmp/$name.ir" "$src" <<'PY' || exit 1
import re, sys
mlir, ir, src = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
bad = []
# the lowered program's leaves, placements and op kinds
leaves = re.findall(r'^%\d+ = (param|input)\b.*?"([^"]*)" :', ir, re.M)
placed = len(re.findall(r' @ \[', ir))
sig = re.search(r'func\.func @forward\((.*?)\) -> tensor<f32> \{', mlir, re.S)
if not sig:
    bad.append("no @forward returning tensor<f32>")
else:
    args = re.findall(r'dtm\.name = "([^"]*)", dtm\.role = "(param|input)"', sig.group(1))
    if [(n, r) for n, r in args] != [(n, r) for r, n in leaves]:
        bad.append("arguments %s, lowered leaves %s" % (args, [(n, r) for r, n in leaves]))
shards = len(re.findall(r'= mesh\.shard ', mlir))
if shards != placed:
    bad.append("%d mesh.shard for %d placements" % (shards, placed))
mm = len(re.findall(r'^%\d+ = matmul ', ir, re.M))
lin = len(re.findall(r'linalg\.(matmul|generic)', mlir))
if lin < mm:
    bad.append("%d matmuls but %d linalg matmul/generic ops" % (mm, lin))
for op in set(re.findall(r'call @dtm\.([a-z_]+)\.\d+', mlir)):
    if not re.search(r'func\.func private @dtm\.%s\.\d+\(' % op, mlir):
        bad.append("@dtm.%s called but not declared" % op)
for b in bad:
    print("FAIL (mlir): %s: %s" % (src, b), file=sys.stderr)
print("mlir: %s: %d arguments, %d mesh.shard, %d linalg matmuls, %d @dtm calls, verified"
      % (src, len(leaves), shards, lin, len(re.findall(r'call @dtm\.', mlir))))
sys.exit(1 if bad else 0)
PY
done
# A rank's program: after partition (every stage in one program: the
# stage's part, sends and recvs where a value crosses stages) and after
# pipeline (one program per stage, dtm's own sends and recvs).  Each
# verifies, is mlir-opt's fixed point and has, per collective kind, as
# many mesh ops or @dtm calls as `dtmc print` has in the rank's stage.
local_export() { # NAME AFTER RANK SRC [OPTION]...
	local name=$1 after=$2 rank=$3 src=$4 base="$tmp/$1.$2.$3"
	shift 4
	"$dtmc" export-mlir "$src" --after="$after" --rank "$rank" "$@" -o "$base.mlir" \
		2>"$base.err" || fail "$src --after=$after --rank $rank $*: $(cat "$base.err")"
	fixed_point "$base" "$src --after=$after --rank $rank"
	"$dtmc" print --after="$after" "$src" "$@" >"$base.ir" || fail "$src: print failed"
	/usr/bin/python3 - "$base.mlir" "$base.ir" "$rank" "$src --after=$after --rank $rank" \
		<<'PY' || exit 1
import re, sys
mlir, ir, rank, what = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), sys.argv[4]
axes = re.findall(r'(\w+) = (\d+)', re.search(r'^mesh \((.*)\)$', ir, re.M).group(1))
coords = {}
for name, size in reversed(axes):  # row-major: the last axis fastest
    coords[name], rank = rank % int(size), rank // int(size)
P = dict(axes).get('pp', '1')
P, stage = int(P), coords.get('pp', 0)
kinds = {'all_reduce': 'all_reduce', 'all_gather': 'all_gather', 'reduce_scatter':
         'reduce_scatter', 'all_to_all': 'all_to_all', 'broadcast': 'broadcast',
         'shard_slice': 'all_slice', 'send': None, 'recv': None}
want = dict.fromkeys(kinds, 0)
for op, rest in re.findall(r'^%\d+ = (\w+)\b(.*)$', ir, re.M):
    st = re.search(r' stage (\d+)', rest.split(' loc ')[0])
    if op in want and (P == 1 or not st or int(st.group(1)) % P == stage):
        want[op] += 1
got = {k: len(re.findall(r'= mesh\.%s ' % m, mlir)) if m else 0 for k, m in kinds.items()}
for k in kinds:
    got[k] += len(re.findall(r'call @dtm\.%s\.\d+\(' % k, mlir))
bad = []
if 'after partition' in ir and P > 1:  # sends and recvs are the export's
    for k in ('send', 'recv'):
        want[k] = got[k]
    if not got['send'] + got['recv']:
        bad.append("no send or recv between the stages")
for k in kinds:
    if got[k] != want[k]:
        bad.append("%d %s in the MLIR, %d in stage %d of dtmc print" % (got[k], k, want[k], stage))
if not re.search(r'dtm\.rank = %s : i64, dtm\.stage = %d : i64' % (sys.argv[3], stage), mlir):
    bad.append("@step does not say rank %s, stage %d" % (sys.argv[3], stage))
for b in bad:
    print("FAIL (mlir): %s: %s" % (what, b), file=sys.stderr)
print("mlir: %s: stage %d, %s" % (what, stage,
      ", ".join("%d %s" % (got[k], k) for k in kinds if got[k])))
sys.exit(1 if bad else 0)
PY
}
for src in models/*.dtm; do
	local_export "$(basename "$src" .dtm)" partition 0 "$src"
done
pp="--mesh pp=2,dp=2,tp=1"
for rank in 0 3; do
	for after in partition pipeline; do
		local_export gpt_pp "$after" "$rank" models/gpt.dtm $pp --train microbatches=2
	done
done
# the stages' sends and recvs after partition pair up
/usr/bin/python3 - "$tmp"/gpt_pp.partition.{0,3}.mlir <<'PY' || exit 1
import re, sys
a, b = (open(f).read() for f in sys.argv[1:3])
n = lambda t, k: len(re.findall(r'call @dtm\.%s\.\d+\(' % k, t))
if (n(a, 'send'), n(a, 'recv')) != (n(b, 'recv'), n(b, 'send')):
    sys.exit("FAIL (mlir): gpt pp=2 after partition: stage 0 sends %d, receives %d; "
             "stage 1 receives %d, sends %d" % (n(a, 'send'), n(a, 'recv'), n(b, 'recv'), n(b, 'send')))
PY
"$dtmc" export-mlir models/mlp.dtm --after=fuse >"$tmp/o" 2>"$tmp/e" && fail "--after=fuse exited 0"
grep -q "lower.*partition" "$tmp/e" || fail "--after=fuse: $(cat "$tmp/e")"
"$dtmc" export-mlir models/mlp.dtm --after=partition --rank 4 -o "$tmp/r.mlir" 2>"$tmp/e" &&
	fail "--rank 4 of 4 exited 0"
grep -q "not a rank" "$tmp/e" || fail "--rank 4: $(cat "$tmp/e")"
[ -e "$tmp/r.mlir" ] && fail "a failed export left a file"
"$dtmc" export-mlir models/nope.dtm -o "$tmp/nope.mlir" 2>"$tmp/e" && fail "a missing file exited 0"
[ -e "$tmp/nope.mlir" ] && fail "a failed export left a file"
echo "mlir ok"
