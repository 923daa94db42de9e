# Shared helpers for rock's dev-machine scripts. Source it; do not run it.
# shellcheck shell=bash

ROCK_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Runtime state of these scripts (dockerd's log and pid, image build folders); ignored by git.
ROCK_STATE_DIR="${ROCK_STATE_DIR:-$ROCK_REPO/.rock-state}"
mkdir -p "$ROCK_STATE_DIR"

say() { printf '[rock] %s\n' "$*" >&2; }
die() { printf '[rock] error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
is_debian() { [ -f /etc/debian_version ]; }
