#!/bin/sh
# E2B's Python SDK in a virtual environment of its own (.rock-state/e2b-sdk-venv), for the tests
# that drive rock's admin with it (packages/rock-sdk/tests/test_e2b_sdk.py): E2B's SDK is never
# installed beside rock. Made when missing; the version is pinned here.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.rock-state/e2b-sdk-venv"
version="2.63.0"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "
import importlib.metadata as m, sys
sys.exit(m.version('e2b') != '$version')" 2>/dev/null; then
    exit 0
fi
uv="$("$root/scripts/ensure-uv.sh")"
export UV_PYTHON_DOWNLOADS=never
"$uv" venv --quiet --allow-existing --python python3 "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" "e2b==$version"
