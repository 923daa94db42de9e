#!/usr/bin/env bash
# Print the path of a usable `uv`, installing the pinned version first when none is on PATH.
# Idempotent: a second run finds the uv the first one installed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
UV_VERSION="0.13.9"

if command -v uv >/dev/null 2>&1; then command -v uv; exit 0; fi
local_uv="$ROCK_STATE_DIR/uv-venv/bin/uv"
if [ -x "$local_uv" ]; then echo "$local_uv"; exit 0; fi

say "uv not found: installing uv==$UV_VERSION into $ROCK_STATE_DIR/uv-venv"
command -v python3 >/dev/null 2>&1 || die "python3 is needed to install uv; install Python 3.11 first"
if ! python3 -m venv "$ROCK_STATE_DIR/uv-venv" >&2 2>/dev/null; then
    # Debian's python3 without python3-venv: fall back to a user install.
    python3 -m pip install --quiet --user "uv==$UV_VERSION" >&2 \
        || python3 -m pip install --quiet --user --break-system-packages "uv==$UV_VERSION" >&2 \
        || die "could not install uv; install it by hand (pip install uv==$UV_VERSION) and retry"
    python3 -c 'import site, sys; sys.stdout.write(site.USER_BASE + "/bin/uv\n")'
    exit 0
fi
"$ROCK_STATE_DIR/uv-venv/bin/python" -m pip install --quiet "uv==$UV_VERSION" >&2
echo "$local_uv"
