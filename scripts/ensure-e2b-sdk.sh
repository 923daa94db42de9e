#!/bin/sh
# E2B's Python SDK in a virtual environment of its own (.rock-state/e2b-sdk-venv), for the tests
# that drive rock's admin with it (packages/rock-sdk/tests/test_e2b_sdk.py). Made when missing.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.rock-state/e2b-sdk-venv"
uv="$root/.rock-state/uv-venv/bin/uv"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import e2b" 2>/dev/null; then
    exit 0
fi
"$uv" venv --quiet --python 3.11 "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" "e2b==2.63.0"
