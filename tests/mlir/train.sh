#!/usr/bin/env bash
# train.sh DTMC - an MLIR model trains through dtm as a .dtm model does
# (issue 19 points 2 and "done when").
#
#   1. tests/mlir/mlp_hand.mlir, written by hand in linalg + mesh (not
#      exported by dtm), built with `dtmc build X.mlir` for one device
#      (--mesh dp=1) and for dp x tp layouts (the file's 2x2, dp=3, tp=3,
#      ZeRO-3, micro-batches, bf16): each step's loss and grad norm equal
#      one device's (f32: 1e-5 relative; bf16 against one device in bf16:
#      2e-2, as tests/e2e/precision.sh); the loss goes down; and
#      tests/mlir/mlp_torch.mlir, the same in torch-mlir's form (generic
#      elementwise and reduction ops), at 2x2 and dp=3 with ZeRO-2;
#   2. models/mlp.dtm exported to MLIR and built from the .mlir trains to
#      the .dtm build's losses bit for bit (the same program);
#   3. bad MLIR fails with file:line:col, exit 1 and no file written: an
#      op outside the subset, a syntax error, a function returning no loss,
#      a module MLIR 19's own parser crashes on (dtmc parses in a child),
#      -D and an unknown --mesh axis on an MLIR model.
set -u
dtmc=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_mlirtrain_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL (mlir train): $*" >&2; exit 1; }
steps=10
hand=$here/mlp_hand.mlir

# "step loss grad_norm" per line of a --log file
losses() {
	sed -n 's/.*"step":\([0-9]*\),"loss":\([^,}]*\),"grad_norm":\([^,}]*\).*/\1 \2 \3/p' "$1"
}
# run NAME SRC [build args...]: build, train $steps steps, log
run() {
	local name=$1 src=$2
	shift 2
	"$dtmc" build "$src" -o "$tmp/$name" "$@" 2>"$tmp/$name.err" ||
		fail "$name: dtmc build $src $*: $(cat "$tmp/$name.err")"
	"$tmp/$name" --steps $steps --seed 3 --log "$tmp/$name.jsonl" -q 2>>"$tmp/$name.err" ||
		fail "$name: training failed: $(cat "$tmp/$name.err")"
	[ "$(losses "$tmp/$name.jsonl" | wc -l)" -eq $steps ] || fail "$name: no $steps losses"
}
# close REF GOT TOL WHAT
close() {
	paste <(losses "$1") <(losses "$2") | awk -v tol="$3" -v what="$4" '
		function rel(a, b,  d, s) { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a
		                            return s > 0 ? d / s : d }
		{ r = rel($2, $5); g = rel($3, $6); if (r > w) w = r; if (g > gw) gw = g
		  if (!(r <= tol && g <= tol)) { print what ": step " $1 ": " $2 " " $3 " vs " $5 " " $6; bad = 1 } }
		END { printf "mlir train: %s: max rel diff loss %.3g, grad_norm %.3g (limit %g)\n", what, w, gw, tol
		      exit bad }' || fail "$4: losses differ"
}

# 1. the hand-written model
run ref "$hand" --mesh dp=1,tp=1
first=$(losses "$tmp/ref.jsonl" | head -1 | cut -d' ' -f2)
last=$(losses "$tmp/ref.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "the loss does not go down: $first -> $last"
run dp2tp2 "$hand"
close "$tmp/ref.jsonl" "$tmp/dp2tp2.jsonl" 1e-5 "hand-written MLIR, dp=2 x tp=2"
run dp3 "$hand" --mesh dp=3
close "$tmp/ref.jsonl" "$tmp/dp3.jsonl" 1e-5 "hand-written MLIR, dp=3"
run tp3 "$hand" --mesh tp=3
close "$tmp/ref.jsonl" "$tmp/tp3.jsonl" 1e-5 "hand-written MLIR, tp=3"
run zero3 "$hand" --mesh dp=2,tp=2 --train zero=3
close "$tmp/ref.jsonl" "$tmp/zero3.jsonl" 1e-5 "hand-written MLIR, dp=2 x tp=2, zero 3"
run mb "$hand" --mesh dp=2,tp=2 --train microbatches=2
close "$tmp/ref.jsonl" "$tmp/mb.jsonl" 1e-5 "hand-written MLIR, dp=2 x tp=2, 2 micro-batches"
run refbf "$hand" --mesh dp=1 --train precision=bf16
run bf "$hand" --train precision=bf16
close "$tmp/refbf.jsonl" "$tmp/bf.jsonl" 2e-2 "hand-written MLIR, dp=2 x tp=2, bf16"

# ... and the same MLP in the form torch-mlir writes (elementwise and
# reduction linalg.generic, relu as maximumf with 0)
torch=$here/mlp_torch.mlir
run tref "$torch" --mesh dp=1,tp=1
run tdp2tp2 "$torch"
close "$tmp/tref.jsonl" "$tmp/tdp2tp2.jsonl" 1e-5 "torch-mlir-style MLIR, dp=2 x tp=2"
run tdp3 "$torch" --mesh dp=3,tp=1 --train zero=2
close "$tmp/tref.jsonl" "$tmp/tdp3.jsonl" 1e-5 "torch-mlir-style MLIR, dp=3, zero 2"

# 2. an exported model trains as its .dtm does
"$dtmc" export-mlir models/mlp.dtm -o "$tmp/mlp.mlir" || fail "export-mlir models/mlp.dtm"
run dtm models/mlp.dtm
run mlir "$tmp/mlp.mlir"
[ "$(losses "$tmp/dtm.jsonl")" = "$(losses "$tmp/mlir.jsonl")" ] ||
	fail "models/mlp.dtm and its MLIR export train apart: $(paste <(losses "$tmp/dtm.jsonl") <(losses "$tmp/mlir.jsonl") | head -3)"
echo "mlir train: models/mlp.dtm and its MLIR export: the same losses, bit for bit"

# 3. bad input: file:line:col, exit 1, nothing written
bad() { # NAME|PATH WANT(grep -E) [build args]: tests/mlir/bad/NAME.mlir
	local src=$here/bad/$1.mlir want=$2
	[ -f "$1" ] && src=$1
	shift 2
	"$dtmc" build "$src" -o "$tmp/bad" "$@" >"$tmp/out" 2>"$tmp/err"
	local rc=$?
	[ $rc -eq 1 ] || fail "$src: exit $rc, want 1: $(cat "$tmp/err")"
	[ -e "$tmp/bad" ] && fail "$src: a failed build wrote its output"
	grep -qE -- "$want" "$tmp/err" || fail "$src: the message is not /$want/: $(cat "$tmp/err")"
	echo "mlir train: $(basename "$src"): $(grep -m1 error "$tmp/err")"
}
bad unknown_op 'unknown_op\.mlir:[0-9]+:[0-9]+: error: .linalg\.elemwise_unary. is not in the subset'
bad syntax 'syntax\.mlir:[0-9]+:[0-9]+: error: '
bad no_loss 'no_loss\.mlir:[0-9]+:[0-9]+: error: .*returns 2 values'
bad mlir_crash 'mlir_crash\.mlir: error: MLIR crashed \(signal [0-9]+\) parsing the module'
bad "$hand" "-D x: -D sets a \.dtm model's constants" -D x=1
bad "$hand" "--mesh: the model declares no mesh axis 'ep'" --mesh ep=2
echo "mlir train ok"
