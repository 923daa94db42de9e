#!/usr/bin/env bash
# Everything the two README commands need, each step idempotent:
#   uv (pinned), the workspace's packages (.venv), a Docker engine, a PostgreSQL server for
#   rock-postgres's tests (socket only, under .rock-state/postgres/), the offline test images.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROCK_REPO"
export UV_PYTHON_DOWNLOADS=never  # use the machine's Python; never download one

uv="$("$ROCK_REPO/scripts/ensure-uv.sh")"
say "syncing the uv workspace into .venv ($("$uv" --version))"
# Bytecode is compiled once here: a machine with PYTHONDONTWRITEBYTECODE set (or a read-only
# venv) would otherwise compile every module again in each process, some 0.4 s of CPU for each
# `rock` command and each test that starts one. rock's own sources are editable installs, so
# they are compiled in place (__pycache__ is ignored by git).
"$uv" sync --quiet --compile-bytecode
.venv/bin/python -m compileall -q -j 0 packages/*/src >/dev/null
"$ROCK_REPO/scripts/ensure-docker.sh"
"$ROCK_REPO/scripts/ensure-postgres.sh"
"$ROCK_REPO/scripts/ensure-test-images.sh"
