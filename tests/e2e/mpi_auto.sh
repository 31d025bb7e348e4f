#!/usr/bin/env bash
# mpi_auto.sh DTMC MPIRUN - under a launcher the mpi backend is the default.
#
# `mpirun -np 4 ./NAME` without --backend must run one rank per process
# (before, each process ran the whole 4-rank mesh as threads: four copies).
# Checks: exactly one `alloc:` line per rank 0..3 across the 4 processes, and
# the losses of the local backend's run of the same binary.
set -u
dtmc=$1 mpirun=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtm_mpi_auto_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL mpi_auto: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

"$dtmc" build models/mlp.dtm --mesh dp=4 -o "$tmp/mlp" >/dev/null 2>"$tmp/build.txt" ||
	{ cat "$tmp/build.txt" >&2; fail "dtmc build failed"; }
"$tmp/mlp" --steps 3 -q --log "$tmp/local.jsonl" || fail "the local run failed"
timeout 300 "$mpirun" -np 4 --allow-run-as-root --oversubscribe "$tmp/mlp" --steps 3 -q -v \
	--log "$tmp/mpi.jsonl" >"$tmp/mpi.txt" 2>&1 || { cat "$tmp/mpi.txt" >&2; fail "mpirun failed"; }
ranks=$(sed -n 's/^alloc: rank \([0-9]*\) .*/\1/p' "$tmp/mpi.txt" | sort -n | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 " ] ||
	{ cat "$tmp/mpi.txt" >&2; fail "want one alloc line per rank 0..3, got ranks: $ranks"; }
losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
# the backends sum in their own orders: equal to 1e-6, as in equiv.sh
paste <(losses "$tmp/local.jsonl") <(losses "$tmp/mpi.jsonl") | awk '
	{ d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1; n++
	  if (!(d <= 1e-6 * s)) { print "step " NR ": local " $1 ", mpi " $2; bad = 1 } }
	END { exit bad || n != 3 }' || fail "mpi losses differ from the local backend's"
echo "mpirun -np 4 without --backend: one rank per process, the local backend's losses"
