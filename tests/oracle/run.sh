#!/usr/bin/env bash
# run.sh DTMC MODEL.dtm [oracle.py options] - the oracle test's entry (ctest).
#
# Debian's python3-torch is installed for /usr/bin/python3; a python3 that
# comes first in PATH (pyenv, a venv) may not see it, so use the first
# interpreter that can import torch.  With none, oracle.py itself fails
# with the install command (a missing oracle is a failure, not a skip).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dtmc=$1
shift
py=""
for cand in /usr/bin/python3 python3; do
	if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch, numpy' >/dev/null 2>&1; then
		py=$cand
		break
	fi
done
if [ -z "$py" ]; then
	echo "oracle: FAIL: no python3 can import torch and numpy; install them with" >&2
	echo "  apt-get install python3-torch python3-numpy   (scripts/deps.sh does this as root)" >&2
	exit 1
fi
exec "$py" "$here/oracle.py" --dtmc "$dtmc" "$@"
