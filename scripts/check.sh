#!/usr/bin/env bash
# The static checks `make test` runs before the tests: ruff's lint and format check on every
# Python file of the workspace, then mypy (strict on rock_core, mypy's defaults elsewhere; the
# settings are in pyproject.toml). Fix formatting with `.venv/bin/ruff format`.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[rock] ruff check" >&2
.venv/bin/ruff check packages tests scripts
echo "[rock] ruff format --check" >&2
.venv/bin/ruff format --check packages tests scripts
echo "[rock] mypy" >&2
.venv/bin/mypy packages/*/src
