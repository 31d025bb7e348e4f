#!/usr/bin/env bash
# run.sh DTMC MODEL.dtm [jax_spmd.py options] - the jax test's entry (ctest).
#
# JAX for CPU comes from PyPI into a venv outside the repository,
# $JAX_VENV (default ~/.cache/dtm-bench/jax-venv, the one bench/ uses), which
# scripts/deps.sh creates (`make test` runs it first).  Without it the test
# fails and says so: JAX is the reference here, never optional.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dtmc=$1
shift
JAX_VENV=${JAX_VENV:-$HOME/.cache/dtm-bench/jax-venv}
py=$JAX_VENV/bin/python

have_jax() { [ -x "$py" ] && "$py" -c 'import jax, numpy' >/dev/null 2>&1; }

if ! have_jax; then
	echo "jax: FAIL: $py cannot import jax: scripts/deps.sh creates the venv" >&2
	echo "  (python3 -m venv $JAX_VENV && $JAX_VENV/bin/pip install 'jax[cpu]')" >&2
	exit 1
fi
exec "$py" "$here/jax_spmd.py" --dtmc "$dtmc" "$@"
