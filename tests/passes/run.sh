#!/usr/bin/env bash
# run.sh - the pass tests: IR text in, one pass (`dtmc opt`), IR text out.
#
#   tests/passes/run.sh [--update|--inputs] DTMC [PASS|PASS/CASE]...
#   tests/passes/run.sh --coverage DTMC
#
# tests/passes/PASS/CASE.ir is the input of pass PASS, its first lines
# comments (then the IR, as `dtmc print` writes it):
#   # opt --pass=PASS [ARGS]        the command: dtmc opt --pass=PASS ARGS CASE.ir
#   # input: ARGS [| FILTER]        how the IR below was made: dtmc ARGS, from the
#                                   repository root, through FILTER (a sed that
#                                   breaks it, for an error case) when given
#   # ...                           what the case shows
# and what dtmc opt must print: CASE.out, its standard output, when it exits
# 0 (CASE.err then holds what it warns, if anything); without CASE.out it
# must exit 1, with CASE.err exactly its standard error.
#
# --update rewrites CASE.out and CASE.err from what dtmc prints now (read the
# diff before keeping it).  --inputs makes each CASE.ir's IR again from its
# input line, keeping its comment lines (after the IR printer or a pass
# before PASS changed), then checks as without it.  --coverage checks that
# every pass `dtmc help opt` lists has a folder here with a case that
# succeeds and one that fails.  Runs from the repository root.
set -u
mode=check
case "${1:-}" in
--update | --inputs | --coverage)
	mode=${1#--}
	shift
	;;
esac
dtmc=${1:?usage: run.sh [--update|--inputs|--coverage] DTMC [PASS|PASS/CASE]...}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dir=tests/passes

if [ $mode = coverage ]; then
	passes=$("$dtmc" help opt | sed -n 's/^passes, in pipeline order: //p' | tr -d ',' |
		tr ' ' '\n' | grep -v '^lower$')
	[ -n "$passes" ] || { echo "FAIL: dtmc help opt lists no passes"; exit 1; }
	bad=0
	for p in $passes; do
		ok=$(ls $dir/$p/*.out 2> /dev/null | wc -l)
		nerr=0
		for f in $dir/$p/*.ir; do
			[ -f "$f" ] && [ ! -f "${f%.ir}.out" ] && nerr=$((nerr + 1))
		done
		if [ "$ok" -lt 1 ] || [ "$nerr" -lt 1 ]; then
			echo "FAIL: $dir/$p/ needs a case that succeeds and one that fails (has $ok and $nerr)"
			bad=1
		fi
	done
	[ $bad = 0 ] && echo "passes: every pass ($(echo $passes | wc -w)) has its tests"
	exit $bad
fi

cases=()
if [ $# = 0 ]; then
	cases=($dir/*/*.ir)
else
	for a in "$@"; do
		if [ -d "$dir/$a" ]; then
			cases+=($dir/$a/*.ir)
		else
			cases+=("$dir/$a.ir")
		fi
	done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for f in "${cases[@]}"; do
	[ -f "$f" ] || { echo "FAIL $f: no such case"; fail=1; continue; }
	name=${f#$dir/}
	name=${name%.ir}
	args=$(sed -n '1s/^# opt //p' "$f")
	if [ -z "$args" ]; then
		echo "FAIL $name: the first line is not '# opt --pass=PASS ...'"
		fail=1
		continue
	fi
	if [ $mode = inputs ]; then
		input=$(sed -n 's/^# input: //p' "$f" | head -n 1)
		if [ -n "$input" ]; then
			awk '!/^#/ { exit } { print }' "$f" > "$tmp/head"
			if ! bash -c "\"\$0\" $input" "$dtmc" > "$tmp/ir" 2> "$tmp/ir.err"; then
				echo "FAIL $name: the input line failed: $(head -n 3 "$tmp/ir.err")"
				fail=1
				continue
			fi
			cat "$tmp/head" "$tmp/ir" > "$f"
		fi
	fi
	n=$((n + 1))
	# shellcheck disable=SC2086 # the args are words
	"$dtmc" opt $args "$f" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	exp=${f%.ir}
	if [ $mode = update ]; then
		if [ $rc = 0 ]; then
			cp "$tmp/out" "$exp.out"
		else
			rm -f "$exp.out"
		fi
		if [ -s "$tmp/err" ] || [ $rc != 0 ]; then
			cp "$tmp/err" "$exp.err"
		else
			rm -f "$exp.err"
		fi
		echo "updated $name (exit $rc)"
		continue
	fi
	want_rc=1
	[ -f "$exp.out" ] && want_rc=0
	: > "$tmp/empty"
	want_err=$tmp/empty
	[ -f "$exp.err" ] && want_err=$exp.err
	if [ $rc != $want_rc ]; then
		echo "FAIL $name: exit $rc, expected $want_rc"
		head -n 5 "$tmp/err"
		fail=1
	elif [ $rc = 0 ] && ! cmp -s "$tmp/out" "$exp.out"; then
		echo "FAIL $name: the IR differs from $exp.out"
		diff "$exp.out" "$tmp/out" | head -n 20
		fail=1
	elif ! cmp -s "$tmp/err" "$want_err"; then
		echo "FAIL $name: standard error differs from ${want_err/#$tmp\/empty/(nothing)}"
		diff "$want_err" "$tmp/err" | head -n 20
		fail=1
	elif [ $rc != 0 ] && [ -s "$tmp/out" ]; then
		echo "FAIL $name: printed IR on standard output and failed"
		fail=1
	fi
done
[ $mode = update ] && exit 0
if [ $fail = 0 ]; then
	echo "passes: $n cases as expected"
fi
exit $fail
