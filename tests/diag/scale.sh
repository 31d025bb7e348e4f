#!/usr/bin/env bash
# scale.sh DTMC WORKDIR - the compiler is linear in the parameter count.
#
# A model of 100,000 small params (each added to a chain: 200,000 nodes
# before autodiff) must check and inspect in CPU seconds: before, name
# lookup, propagation (a user of every grad: the grad norm) and inspect's
# parameter count were quadratic (check 79 s at 30k params, inspect 2 min at
# 100k).  The bound is CPU time, not wall time, and generous (40 s each,
# about 1 s on a 2-core VM): a quadratic step fails it by far, noise cannot.
set -u
dtmc=$1 work=$2
fail() { echo "FAIL scale: $*" >&2; exit 1; }
mkdir -p "$work"
n=100000
m=$work/many.dtm
{
	printf 'model many\nmesh (dp = 1)\ninput x : f32[4, 2]\ninput y : f32[4, 2]\n'
	awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) printf "param p%d : f32[2] init zeros\n", i }'
	printf 'forward {\n  h = x\n'
	awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) printf "  h = h + p%d\n", i }'
	printf '  loss = mse(h, y)\n}\ntrain {\n  optimizer sgd(lr = 0.1)\n}\n'
} >"$m"
cpu() { # cpu SECONDS-LIMIT COMMAND...: runs it, fails past the limit of user + sys
	local limit=$1
	shift
	local t0 t1
	t0=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
	"$@" >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; fail "$* failed"; }
	t1=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
	local s
	s=$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
	echo "$2 of $n params: $s s of CPU"
	awk -v s="$s" -v l="$limit" 'BEGIN { exit !(s <= l) }' || fail "$2 took $s s of CPU (limit $limit)"
}
cpu 40 "$dtmc" check "$m"
grep -q "200,000" "$work/out" || { cat "$work/out" >&2; fail "check did not count 200,000 elements"; }
cpu 40 "$dtmc" inspect "$m"
echo ok
