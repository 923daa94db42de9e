#!/usr/bin/env bash
# Make a Docker engine available to this user. Idempotent.
#
# When `docker info` answers, nothing is done. Otherwise, on Debian as root, Debian's docker.io
# package is installed if dockerd is missing, and dockerd is started in the background (without
# inter-container traffic on its default bridge: --icc=false; containers that outlive a restart
# of the daemon: --live-restore) with its log and pid under
# .rock-state/; a dockerd started so earlier that no longer answers is restarted first.
# Anywhere else the script stops and says what to do.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# `docker info` under a time limit: a wedged dockerd accepts the connection and never answers.
answers() { timeout 20 docker info >/dev/null 2>&1; }

pidfile="$ROCK_STATE_DIR/dockerd.pid"
logfile="$ROCK_STATE_DIR/dockerd.log"

if answers; then say "Docker engine is running"; exit 0; fi

# A dockerd this script started that is alive but does not answer is wedged. Debian's docker.io
# 20.10.24 can deadlock in libnetwork when many containers exit while others start (moby/moby
# issue 46661, fixed only in later 20.10 releases): every create and `docker info` then hangs.
# Only our own daemon (its pid in our pid file) is restarted. It runs with --live-restore, so its
# containers keep running across the restart and the new daemon takes them over.
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && grep -q "API listen on" "$logfile" 2>/dev/null; then
    pid="$(cat "$pidfile")"
    say "dockerd (pid $pid) does not answer 'docker info' within 20 s: restarting it (its containers keep running)"
    kill -USR1 "$pid" 2>/dev/null || true  # its goroutine stacks, for the record (path in its log)
    children="$(pgrep -P "$pid" || true)"  # its containerd
    sleep 1
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    for child in $children; do kill "$child" 2>/dev/null || true; done
    for _ in $(seq 1 20); do
        alive=""
        for child in $children; do kill -0 "$child" 2>/dev/null && alive=1; done
        [ -z "$alive" ] && break
        sleep 0.5
    done
    rm -f "$pidfile"
fi

# A daemon that died outright (SIGKILL, a crash, the OOM killer), whoever started it, leaves
# /var/run/docker.pid behind, and the next dockerd refuses to start while it is there.
if stale_pid_file /var/run/docker.pid dockerd; then
    say "removing /var/run/docker.pid: it names no running dockerd (one that died left it)"
    rm -f /var/run/docker.pid
fi

if ! is_root || ! is_debian; then
    die "no Docker engine answers 'docker info'. Start one (e.g. 'sudo systemctl start docker' or Docker Desktop), make sure this user may use it, and retry. Automatic set-up is done only on Debian as root."
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    say "installing Debian's docker.io package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed; check the machine's apt sources"
    apt-get install -y -qq docker.io >&2 || die "apt-get install docker.io failed"
fi

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "dockerd (pid $(cat "$pidfile")) is starting; waiting for it"
else
    say "starting dockerd in the background (log: $logfile)"
    # setsid: the daemon outlives this script and the make/pytest process group.
    # --icc=false: no traffic between containers on Docker's default bridge, so rock's sandboxes
    # can use it isolated (docs/security.md), without a network of their own (which costs each
    # start ~50 ms for Docker's embedded DNS).
    # --live-restore: containers outlive the daemon, so restarting a wedged one (above) loses no
    # sandbox.
    setsid dockerd --icc=false --live-restore >"$logfile" 2>&1 < /dev/null &
    echo $! >"$pidfile"
fi

for _ in $(seq 1 120); do
    if answers; then say "Docker engine is running (pid $(cat "$pidfile"))"; exit 0; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        tail -n 20 "$logfile" >&2 || true
        die "dockerd exited at start; its log is $logfile"
    fi
    sleep 0.5
done
tail -n 20 "$logfile" >&2 || true
die "dockerd did not answer within 60 s; its log is $logfile"
