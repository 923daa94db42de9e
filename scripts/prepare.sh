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
# E2B's Python SDK, in a virtual environment of its own, for rock-e2b's tests (issue #29).
"$ROCK_REPO/scripts/ensure-e2b-sdk.sh"
# HAProxy and nginx (Debian's haproxy and nginx-light packages, some 5 MB together) for
# tests/test_deploy_ha_end_to_end.py: deploy/ha's two admins behind each balancer, end to end.
# The tests run their own balancer processes on their own configuration. Without them those
# tests skip, saying so.
balancers=""
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then balancers="haproxy"; fi
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then balancers="$balancers nginx-light"; fi
if [ -n "$balancers" ] && is_root && is_debian; then
    say "installing Debian's$balancers package(s) (apt-get)"
    apt_get() { DEBIAN_FRONTEND=noninteractive apt-get "$@" </dev/null >&2; }
    # shellcheck disable=SC2086 # the list splits into package names
    apt_get install -y -qq --no-install-recommends $balancers \
        || { apt_get update -qq && apt_get install -y -qq --no-install-recommends $balancers; } \
        || say "could not install$balancers: deploy/ha's tests of them will skip"
fi
"$ROCK_REPO/scripts/ensure-test-images.sh"
