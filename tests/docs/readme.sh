#!/usr/bin/env bash
# readme.sh DTMC - README.md matches the program.
#
#   1. every command `dtmc --help` lists has a line in README's synopsis
#      (`dtmc CMD ...` in the fenced block of "The dtmc command line") and
#      `dtmc help CMD` prints its usage, exit 0;
#   2. every builtin of the language (frontend/builtins.c's table) is named in
#      README's "- Ops:" paragraph;
#   3. `dtmc inspect --rank 99` prints exactly one error line, exit 1.
set -u
dtmc=$1
fail() { echo "FAIL docs.readme: $*" >&2; exit 1; }
readme=README.md
synopsis=$(awk '/^## The dtmc command line/ { in_sec = 1 } in_sec && /^```/ { n++; next }
	in_sec && n == 1 { print } n >= 2 { exit }' "$readme")
[ -n "$synopsis" ] || fail "no synopsis block under '## The dtmc command line'"
cmds=$("$dtmc" --help | awk '/^commands:/ { c = 1; next } c && /^$/ { exit } c { print $1 }')
[ -n "$cmds" ] || fail "dtmc --help lists no commands"
for c in $cmds; do
	[ "$c" = help ] && continue
	out=$("$dtmc" help "$c" 2>&1) || fail "dtmc help $c exited $?: $out"
	echo "$out" | grep -q "usage:" || fail "dtmc help $c prints no usage: $out"
	echo "$synopsis" | grep -q "^dtmc $c\b" || fail "README's synopsis has no 'dtmc $c' line"
done
ops=$(awk '/^- Ops:/ { p = 1 } p && /^$/ { exit } p && /^- / && !/^- Ops:/ { exit } p { print }' "$readme")
[ -n "$ops" ] || fail "README has no '- Ops:' paragraph"
names=$(sed -n 's/^[[:space:]]*{"\([a-z_0-9]*\)", BK_.*/\1/p' frontend/builtins.c)
[ -n "$names" ] || fail "no builtins found in frontend/builtins.c"
for n in $names; do
	echo "$ops" | tr -c 'a-z_0-9' '\n' | grep -qx "$n" || fail "README's op list lacks '$n'"
done
err=$("$dtmc" inspect models/mlp.dtm --rank 99 2>&1 >/dev/null)
rc=$?
[ $rc = 1 ] || fail "inspect --rank 99 exited $rc"
[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "inspect --rank 99 printed more than one line: $err"
echo "$err" | grep -q "the mesh has ranks 0..3" || fail "inspect --rank 99: $err"
echo "README: $(echo $cmds | wc -w) commands, $(echo $names | wc -w) builtins; inspect --rank 99: one line"
