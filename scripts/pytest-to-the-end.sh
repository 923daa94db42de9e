#!/usr/bin/env bash
# Run the workspace's pytest with the given arguments, and fail unless it reached its end: a run
# cut short by a test that ended the process (status 0, no summary) must not pass as green.
set -uo pipefail
cd "$(dirname "$0")/.."
marker="$(mktemp "${TMPDIR:-/tmp}/rock-pytest-finished.XXXXXX")"
rm -f "$marker"
ROCK_PYTEST_FINISHED="$marker" .venv/bin/python -m pytest "$@"
status=$?
if [ ! -s "$marker" ]; then
    echo "pytest stopped before the end of the run (exit status $status, no summary): a test ended the process" >&2
    exit 3
fi
rm -f "$marker"
exit "$status"
