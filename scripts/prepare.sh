#!/usr/bin/env bash
# Everything the two README commands need, each step idempotent:
#   uv (pinned), the workspace's packages (.venv), a Docker engine, the offline test images.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROCK_REPO"
export UV_PYTHON_DOWNLOADS=never  # use the machine's Python; never download one

uv="$("$ROCK_REPO/scripts/ensure-uv.sh")"
say "syncing the uv workspace into .venv ($("$uv" --version))"
"$uv" sync --quiet
"$ROCK_REPO/scripts/ensure-docker.sh"
"$ROCK_REPO/scripts/ensure-test-images.sh"
