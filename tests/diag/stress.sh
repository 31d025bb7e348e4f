#!/usr/bin/env bash
# stress.sh - generated hostile inputs for `dtmc check`, too big to commit.
#
#   stress.sh DTMC KIND WORKDIR
#
# KIND: long_line (a 1 MB line of `1 + 1 + ...`), long_ident (a 1 MB name),
# long_comment (a valid model with a 1 MB comment line: must succeed),
# deep_parens / deep_neg / deep_calls (an expression nested 10,000 deep),
# deep_blocks (for loops nested 10,000 deep, an undefined name inside), many_errors (10,000 bad lines).
# Each must exit with status 1 (long_comment: 0) with an error message, print
# at most 64 KB, and neither crash nor hang.
set -uo pipefail

dtmc=${1:?usage: stress.sh DTMC KIND WORKDIR}
kind=${2:?kind}
work=${3:?workdir}
cd "$(dirname "$0")/../.."
mkdir -p "$work"
src=$work/$kind.dtm

rep() { # rep STRING COUNT: STRING repeated COUNT times
	local s=$1 n=$2 out=$1
	local k=1
	while [ $((k * 2)) -le "$n" ]; do
		out=$out$out
		k=$((k * 2))
	done
	while [ $k -lt "$n" ]; do
		out=$out$s
		k=$((k + 1))
	done
	printf '%s' "$out"
}

header='model stress
let n = 4
mesh (dp = 1)
input x : f32[n, n]
param w : f32[n, n] init zeros
'
want_rc=1
case $kind in
long_line)
	{ printf '%s' "$header"; printf 'let big = '; rep '1 + ' 262144; printf '1\n'; } >"$src" ;;
long_ident)
	{ printf '%s' "$header"; printf 'let big = '; rep 'a' 1048576; printf ' + 1\n'; } >"$src" ;;
long_comment)
	want_rc=0
	{ printf '# '; rep 'x' 1048576; printf '\n'; cat models/mlp.dtm; } >"$src" ;;
deep_parens)
	{ printf '%s' "$header"; printf 'let big = '; rep '(' 10000; printf 1; rep ')' 10000; printf '\n'; } >"$src" ;;
deep_neg)
	{ printf '%s' "$header"; printf 'let big = '; rep '-' 10000; printf '1\n'; } >"$src" ;;
deep_calls)
	{ printf '%s' "$header"; printf 'forward {\n  loss = sum('; rep 'relu(' 10000; printf 'x @ w'
	  rep ')' 10000; printf ')\n}\n'; } >"$src" ;;
deep_blocks)
	{ printf '%s' "$header"; printf 'forward {\n  h = x\n'; rep 'for i in 0 .. 1 { ' 10000
	  printf 'h = h @ nope '; rep '} ' 10000; printf '\n  loss = sum(h)\n}\n'; } >"$src" ;;
many_errors)
	{ printf '%s' "$header"; printf 'forward {\n'; rep $'  h = nope @ w + )\n' 10000
	  printf '  loss = sum(x)\n}\n'; } >"$src" ;;
*)
	echo "stress.sh: unknown kind '$kind'" >&2
	exit 2 ;;
esac

to=()
if command -v timeout >/dev/null 2>&1; then
	to=(timeout 30)
fi
"${to[@]}" "$dtmc" check "$src" >"$work/$kind.out" 2>"$work/$kind.err" </dev/null
rc=$?
errbytes=$(wc -c <"$work/$kind.err")
fail=""
if [ $rc -eq 124 ]; then
	fail="timed out (30 s)"
elif [ $rc -ne $want_rc ]; then
	fail="exit status $rc, expected $want_rc"
elif grep -aqE 'Sanitizer|runtime error:|internal error|Segmentation' "$work/$kind.err"; then
	fail="crashed or tripped a sanitizer"
elif [ $want_rc -eq 1 ] && ! grep -aqE '(^|: )error: ' "$work/$kind.err"; then
	fail="no error message"
elif [ "$errbytes" -gt 65536 ]; then
	fail="printed $errbytes bytes of diagnostics (more than 64 KB)"
fi
if [ -n "$fail" ]; then
	echo "FAIL $kind ($(wc -c <"$src") byte input): $fail"
	echo "--- stderr (first 40 lines, cut to 300 columns)"
	head -n 40 "$work/$kind.err" | cut -c 1-300
	exit 1
fi
echo "ok $kind: exit $rc, $errbytes bytes of diagnostics"
head -n 3 "$work/$kind.err" | cut -c 1-200
exit 0
