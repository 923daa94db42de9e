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

# stale_pid_file FILE NAME: true when FILE exists and names no live process called NAME (the
# process died, by SIGKILL or a crash, and left it; or its pid now belongs to another program).
stale_pid_file() {
    local file="$1" name="$2" pid
    [ -f "$file" ] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]
}
