#!/usr/bin/env bash
# run.sh DTMC [MLIR_OPT] - `dtmc export-mlir` and `import-mlir` (issue 19
# points 1, 2 and 4).
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
# Each export imports back (dtmc import-mlir, build/inspect X.mlir) as the
# same program: exported again it is the module read, and inspect of the
# .mlir equals inspect of the .dtm (under pp=2 with micro-batches and
# ZeRO-3 too).
# Bad requests fail cleanly: --after=fuse, a rank off the mesh, an unknown
# model, pp changed on an imported model, sweep of one.
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
# Import (point 2): each export read back is the same program: exporting
# the .mlir writes exactly the module read, and inspect (the plan's
# collectives, bytes, memory per rank, step time) says the same for the
# .mlir as for the .dtm, but for the source locations; also under pp=2
# with micro-batches (the stages come back from dtm.stage) and ZeRO-3
# (--train on the .mlir)
same_program() { # NAME SRC.dtm [inspect args]: $tmp/NAME.mlir is SRC's export
	local name=$1 src=$2
	shift 2
	"$dtmc" export-mlir "$tmp/$name.mlir" -o "$tmp/$name.again.mlir" 2>"$tmp/$name.err" ||
		fail "$name.mlir: import then export: $(cat "$tmp/$name.err")"
	cmp -s "$tmp/$name.mlir" "$tmp/$name.again.mlir" ||
		fail "$name.mlir: import then export differs: $(diff "$tmp/$name.mlir" "$tmp/$name.again.mlir" | head -5)"
	"$dtmc" inspect "$src" "$@" 2>&1 | sed 's/ at [^ ]*:[0-9]*:[0-9]*$//' >"$tmp/$name.a.txt"
	"$dtmc" inspect "$tmp/$name.mlir" "$@" 2>&1 | sed 's/ at [^ ]*:[0-9]*:[0-9]*$//' >"$tmp/$name.b.txt"
	grep -q "memory per rank" "$tmp/$name.a.txt" || fail "$src: inspect $*: $(head -3 "$tmp/$name.a.txt")"
	cmp -s "$tmp/$name.a.txt" "$tmp/$name.b.txt" ||
		fail "$name.mlir: inspect $* differs from $src's: $(diff "$tmp/$name.a.txt" "$tmp/$name.b.txt" | head -5)"
	echo "mlir: $name.mlir: import then export writes it back; inspect $* as $src's"
}
for src in models/*.dtm tests/cuda/ops.dtm tests/e2e/dropout.dtm tests/fuzz/corpus/route.dtm; do
	same_program "$(basename "$src" .dtm)" "$src"
done
same_program gpt models/gpt.dtm --train zero=3
"$dtmc" export-mlir models/gpt.dtm $pp -o "$tmp/gpt_pp2.mlir" || fail "export gpt $pp"
same_program gpt_pp2 models/gpt.dtm $pp --train microbatches=4
"$dtmc" import-mlir "$tmp/mlp.mlir" -o "$tmp/mlp.imported.ir" || fail "import-mlir mlp.mlir"
"$dtmc" build "$tmp/mlp.imported.ir" -o "$tmp/mlp.bin" 2>"$tmp/e" || fail "build of import-mlir's IR: $(cat "$tmp/e")"
"$dtmc" import-mlir models/mlp.dtm -o "$tmp/x.ir" 2>"$tmp/e" && fail "import-mlir of a .dtm exited 0"
[ -e "$tmp/x.ir" ] && fail "a failed import-mlir left a file"
"$dtmc" inspect "$tmp/gpt.mlir" --mesh pp=2 >/dev/null 2>"$tmp/e" && fail "pp changed on an MLIR model exited 0"
grep -q "stages were decided for pp=1" "$tmp/e" || fail "pp=2 on gpt.mlir: $(cat "$tmp/e")"
"$dtmc" sweep "$tmp/mlp.mlir" --devices 4 2>"$tmp/e" && fail "sweep of an MLIR model exited 0"
grep -q "sweep takes a .dtm model" "$tmp/e" || fail "sweep mlp.mlir: $(cat "$tmp/e")"

"$dtmc" export-mlir models/mlp.dtm --after=fuse >"$tmp/o" 2>"$tmp/e" && fail "--after=fuse exited 0"
grep -q "lower.*partition" "$tmp/e" || fail "--after=fuse: $(cat "$tmp/e")"
"$dtmc" export-mlir models/mlp.dtm --after=partition --rank 4 -o "$tmp/r.mlir" 2>"$tmp/e" &&
	fail "--rank 4 of 4 exited 0"
grep -q "not a rank" "$tmp/e" || fail "--rank 4: $(cat "$tmp/e")"
[ -e "$tmp/r.mlir" ] && fail "a failed export left a file"
"$dtmc" export-mlir models/nope.dtm -o "$tmp/nope.mlir" 2>"$tmp/e" && fail "a missing file exited 0"
[ -e "$tmp/nope.mlir" ] && fail "a failed export left a file"
echo "mlir ok"
