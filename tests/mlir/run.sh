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
# and bad requests fail cleanly: --after past lower, an unknown model.
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
for src in models/*.dtm tests/cuda/ops.dtm tests/e2e/dropout.dtm tests/fuzz/corpus/route.dtm; do
	name=$(basename "$src" .dtm)
	"$dtmc" export-mlir "$src" -o "$tmp/$name.mlir" 2>"$tmp/$name.err" ||
		fail "$src: $(cat "$tmp/$name.err")"
	"$opt" "$tmp/$name.mlir" -o "$tmp/$name.opt.mlir" 2>"$tmp/$name.err" ||
		fail "$src: mlir-opt rejects it: $(cat "$tmp/$name.err")"
	# (mlir-opt ends its output with a blank line)
	sed -i -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$tmp/$name.opt.mlir"
	cmp -s "$tmp/$name.mlir" "$tmp/$name.opt.mlir" ||
		fail "$src: mlir-opt prints it otherwise: $(diff "$tmp/$name.mlir" "$tmp/$name.opt.mlir" | head -5)"
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
"$dtmc" export-mlir models/mlp.dtm --after=partition >"$tmp/o" 2>"$tmp/e" &&
	fail "--after=partition exited 0"
grep -q "not exported yet" "$tmp/e" || fail "--after=partition: $(cat "$tmp/e")"
"$dtmc" export-mlir models/nope.dtm -o "$tmp/nope.mlir" 2>"$tmp/e" && fail "a missing file exited 0"
[ -e "$tmp/nope.mlir" ] && fail "a failed export left a file"
echo "mlir ok"
