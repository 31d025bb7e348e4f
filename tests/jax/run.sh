#!/usr/bin/env bash
# run.sh DTMC MODEL.dtm [jax_spmd.py options] - the jax test's entry (ctest).
#
# JAX for CPU comes from PyPI into a venv outside the repository,
# $JAX_VENV (default ~/.cache/dtm-bench/jax-venv, the one bench/ uses).  When
# the venv is missing or cannot import jax, it is created here with
# `pip install jax[cpu]` (about 20 s with PyPI reachable); a flock keeps two
# tests started together (ctest -j) from installing at once.  If that fails,
# the test fails and says why: JAX is the reference here, never optional.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dtmc=$1
shift
JAX_VENV=${JAX_VENV:-$HOME/.cache/dtm-bench/jax-venv}
py=$JAX_VENV/bin/python

have_jax() { [ -x "$py" ] && "$py" -c 'import jax, numpy' >/dev/null 2>&1; }

install_jax() {
	have_jax && return 0
	echo "jax: creating $JAX_VENV (python3 -m venv; pip install jax[cpu])"
	rm -rf "$JAX_VENV"
	local log
	log=$(mktemp /tmp/dtm_jax_pip.XXXXXX)
	if ! { python3 -m venv "$JAX_VENV" && "$JAX_VENV/bin/pip" install -q 'jax[cpu]'; } >"$log" 2>&1; then
		echo "jax: FAIL: could not install JAX into $JAX_VENV:" >&2
		tail -5 "$log" >&2
		echo "jax: needs python3-venv (apt-get install python3-venv) and network access to PyPI;" >&2
		echo "  by hand: python3 -m venv $JAX_VENV && $JAX_VENV/bin/pip install 'jax[cpu]'" >&2
		rm -f "$log"
		exit 1
	fi
	rm -f "$log"
}

if ! have_jax; then
	if ! mkdir -p "$(dirname "$JAX_VENV")"; then
		echo "jax: FAIL: cannot create $(dirname "$JAX_VENV") for the JAX venv (set JAX_VENV)" >&2
		exit 1
	fi
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$JAX_VENV.lock"
		flock 9
	fi
	install_jax
fi
if ! have_jax; then
	echo "jax: FAIL: $py cannot import jax after installing it:" >&2
	"$py" -c 'import jax' >&2 || true
	exit 1
fi
exec "$py" "$here/jax_spmd.py" --dtmc "$dtmc" "$@"
