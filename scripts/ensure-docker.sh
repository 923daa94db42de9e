#!/usr/bin/env bash
# Make a Docker engine available to this user. Idempotent.
#
# When `docker info` answers, nothing is done. Otherwise, on Debian as root, Debian's docker.io
# package is installed if dockerd is missing, and dockerd is started in the background (without
# inter-container traffic on its default bridge: --icc=false) with its log and pid under
# .rock-state/. Anywhere else the script stops and says what to do.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if docker info >/dev/null 2>&1; then say "Docker engine is running"; exit 0; fi

if ! is_root || ! is_debian; then
    die "no Docker engine answers 'docker info'. Start one (e.g. 'sudo systemctl start docker' or Docker Desktop), make sure this user may use it, and retry. Automatic set-up is done only on Debian as root."
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    say "installing Debian's docker.io package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed; check the machine's apt sources"
    apt-get install -y -qq docker.io >&2 || die "apt-get install docker.io failed"
fi

pidfile="$ROCK_STATE_DIR/dockerd.pid"
logfile="$ROCK_STATE_DIR/dockerd.log"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "dockerd (pid $(cat "$pidfile")) is starting; waiting for it"
else
    say "starting dockerd in the background (log: $logfile)"
    # setsid: the daemon outlives this script and the make/pytest process group.
    # --icc=false: no traffic between containers on Docker's default bridge, so rock's sandboxes
    # can use it isolated (docs/security.md), without a network of their own (which costs each
    # start ~50 ms for Docker's embedded DNS).
    setsid dockerd --icc=false >"$logfile" 2>&1 < /dev/null &
    echo $! >"$pidfile"
fi

for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then say "Docker engine is running (pid $(cat "$pidfile"))"; exit 0; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        tail -n 20 "$logfile" >&2 || true
        die "dockerd exited at start; its log is $logfile"
    fi
    sleep 0.5
done
tail -n 20 "$logfile" >&2 || true
die "dockerd did not answer within 60 s; its log is $logfile"
