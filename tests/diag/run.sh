#!/usr/bin/env bash
# run.sh - diagnostic tests: each tests/diag/NAME.dtm is a bad program (or
# NAME.ir bad IR text) and tests/diag/NAME.expected the exact stderr of
# `dtmc check` on it.
#
#   run.sh [--update] DTMC [NAME...]     (without NAMEs: every case)
#
# A case's first lines may be comments that say how to run it:
#   # args: -D foo=1 --mesh dp=2   extra arguments (split on spaces)
#   # command: print               the dtmc command (default check; build
#                                  gets -o in a scratch folder)
#   # ulimit-v: KB                 run under `ulimit -v KB`, so an attempt to
#                                  allocate more fails the case (skipped for a
#                                  sanitizer build, whose shadow memory alone
#                                  is terabytes of address space)
# Every case must exit with status 1, print nothing on stdout, and never
# crash (no sanitizer report, no internal error).  --update rewrites the
# .expected files; read each one before committing it.
set -uo pipefail

update=0
if [ "${1-}" = --update ]; then
	update=1
	shift
fi
dtmc=${1:?usage: run.sh [--update] DTMC [NAME...]}
shift
cd "$(dirname "$0")/../.."
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
	for f in tests/diag/*.dtm tests/diag/*.ir; do
		[ -e "$f" ] || continue
		n=$(basename "$f")
		names+=("${n%.*}")
	done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
to=()
if command -v timeout >/dev/null 2>&1; then
	to=(timeout 30)
fi
# a sanitizer build reserves terabytes of address space for its shadow
# (the symbols read whole: grep -q would end nm early, which pipefail
# counts as a failure)
sanitized=0
syms=$( (nm -D "$dtmc"; nm "$dtmc") 2>/dev/null)
if grep -q '__asan_init\|__ubsan_handle' <<<"$syms"; then
	sanitized=1
fi
fail=0
for n in "${names[@]}"; do
	src=tests/diag/$n.dtm
	[ -f "$src" ] || src=tests/diag/$n.ir
	want=tests/diag/$n.expected
	args=() cmd=check vm=""
	while IFS= read -r line; do
		case $line in
		"# args:"*) read -r -a args <<<"${line#\# args:}" ;;
		"# command:"*) read -r cmd <<<"${line#\# command:}" ;;
		"# ulimit-v:"*) read -r vm <<<"${line#\# ulimit-v:}" ;;
		"#"*) ;;
		*) break ;;
		esac
	done < <(head -n 8 "$src" | tr -d '\0')
	[ "$cmd" = build ] && args+=(-o "$tmp/bin")
	[ $sanitized = 1 ] && vm=""
	(
		[ -z "$vm" ] || ulimit -v "$vm"
		exec "${to[@]}" "$dtmc" "$cmd" "${args[@]}" "$src"
	) >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	bad=""
	if [ $rc -ne 1 ]; then
		bad="exit status $rc, expected 1"
	elif [ -s "$tmp/out" ]; then
		bad="printed on stdout after an error"
	elif grep -aqE 'Sanitizer|runtime error:|internal error|Segmentation' "$tmp/err"; then
		bad="crashed or tripped a sanitizer"
	fi
	if [ -n "$bad" ]; then
		echo "FAIL $n: $bad"
		echo "--- stdout"; cat "$tmp/out"
		echo "--- stderr"; cat "$tmp/err"
		fail=1
		continue
	fi
	if [ $update = 1 ]; then
		cp "$tmp/err" "$want"
		echo "updated $want"
	elif [ ! -f "$want" ]; then
		echo "FAIL $n: no $want (run tests/diag/run.sh --update DTMC $n, then read it)"
		cat "$tmp/err"
		fail=1
	elif ! diff -u --text "$want" "$tmp/err"; then
		echo "FAIL $n: diagnostics differ from $want"
		fail=1
	else
		echo "ok $n"
	fi
done
exit $fail
