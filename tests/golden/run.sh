#!/usr/bin/env bash
# run.sh - golden and round-trip tests of the IR text form.
#
#   run.sh [--update] DTMC [MODEL...]       dtmc print --after=lower models/MODEL.dtm
#                                           must equal tests/golden/MODEL.lower.ir
#   run.sh --roundtrip DTMC [MODEL...]      print --after=lower | print - must give
#                                           identical text
#   run.sh --resume DTMC [MODEL...]         for every pass P, the IR printed after P
#                                           and fed back (`after P`) goes on to the
#                                           IR of the whole pipeline; gpt also on
#                                           pp=2,dp=2 with 2 micro-batches and ZeRO-3
# Without MODEL names, every models/*.dtm.  Run from the repository root.
# --update rewrites the expected files (read the diff before committing it).
set -uo pipefail

mode=golden
case "${1-}" in
--update) mode=update; shift ;;
--roundtrip) mode=roundtrip; shift ;;
--resume) mode=resume; shift ;;
esac
dtmc=${1:?usage: run.sh [--update|--roundtrip|--resume] DTMC [MODEL...]}
shift
cd "$(dirname "$0")/../.."
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
	for f in models/*.dtm; do
		models+=("$(basename "$f" .dtm)")
	done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# resume MODEL [OPTIONS...]: every pass's IR fed back and run to the end
resume() {
	local m=$1 src=models/$1.dtm
	shift
	local passes p
	passes=$("$dtmc" help print | sed -n 's/^passes, in pipeline order: //p' | tr -d ',')
	if [ -z "$passes" ] || ! "$dtmc" print "$src" "$@" >"$tmp/full" 2>"$tmp/err"; then
		echo "FAIL $m $*: no pass list, or dtmc print failed:"
		cat "$tmp/err"
		return 1
	fi
	for p in $passes; do
		if ! "$dtmc" print --after="$p" "$src" "$@" >"$tmp/at.ir" 2>"$tmp/err" ||
			! "$dtmc" print --after=memplan "$tmp/at.ir" >"$tmp/rest" 2>>"$tmp/err"; then
			echo "FAIL $m $*: the IR after $p does not go on:"
			cat "$tmp/err"
			return 1
		fi
		if ! cmp -s "$tmp/full" "$tmp/rest"; then
			echo "FAIL $m $*: the IR after $p, fed back, ends elsewhere than the pipeline:"
			diff -u "$tmp/full" "$tmp/rest" | head -n 40
			return 1
		fi
	done
	echo "ok $m $* (after each of $(echo $passes | wc -w) passes)"
}

fail=0
for m in "${models[@]}"; do
	if [ $mode = resume ]; then
		resume "$m" || fail=1
		if [ "$m" = gpt ]; then
			resume "$m" --mesh pp=2,dp=2 --train microbatches=2 --train zero=3 || fail=1
		fi
		continue
	fi
	src=models/$m.dtm
	want=tests/golden/$m.lower.ir
	if ! "$dtmc" print --after=lower "$src" >"$tmp/out" 2>"$tmp/err"; then
		echo "FAIL $m: dtmc print --after=lower $src failed:"
		cat "$tmp/err"
		fail=1
		continue
	fi
	case $mode in
	update)
		cp "$tmp/out" "$want"
		echo "updated $want"
		;;
	golden)
		if [ ! -f "$want" ]; then
			echo "FAIL $m: no $want (run tests/golden/run.sh --update DTMC $m)"
			fail=1
		elif ! diff -u "$want" "$tmp/out"; then
			echo "FAIL $m: IR after lower differs from $want"
			fail=1
		else
			echo "ok $m"
		fi
		;;
	roundtrip)
		if ! "$dtmc" print - <"$tmp/out" >"$tmp/again" 2>"$tmp/err"; then
			echo "FAIL $m: dtmc print - could not read back its own output:"
			cat "$tmp/err"
			fail=1
		elif ! diff -u "$tmp/out" "$tmp/again"; then
			echo "FAIL $m: print | parse | print is not identical"
			fail=1
		# the .ir file path reads the same way as stdin
		elif ! cp "$tmp/out" "$tmp/m.ir" || ! "$dtmc" print "$tmp/m.ir" >"$tmp/again2" 2>"$tmp/err" ||
			! cmp -s "$tmp/out" "$tmp/again2"; then
			echo "FAIL $m: dtmc print FILE.ir differs from dtmc print -"
			cat "$tmp/err"
			fail=1
		else
			echo "ok $m"
		fi
		;;
	esac
done
exit $fail
