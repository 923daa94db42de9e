#!/usr/bin/env bash
# Make a PostgreSQL server available to rock's tests (rock-postgres's record store). Idempotent,
# and fast when the server already answers.
#
# The cluster lives in .rock-state/postgres/cluster/ (data/, its log server.log, its socket
# folder run/), made with initdb, and listens only on a unix socket in that folder: no TCP port.
# Its superuser `rock` is trusted on that socket, which only the cluster's owner and root can
# reach (the folder is theirs alone, mode 0700). The URL of its database `rock` is written to
# .rock-state/postgres/url (mode 0600), where rock_postgres.testing finds it.
#
# No initdb (in /usr/lib/postgresql/*/bin or on PATH): on Debian as root, Debian's `postgresql`
# package is installed with apt-get (the machine's own apt sources). initdb and the server refuse
# to run as root: as root the cluster belongs to the `postgres` system user (the package makes
# it), run with runuser; otherwise to the user running this script. When that user cannot pass
# through the folders above the checkout (a clone under /root), the cluster goes to
# /var/lib/rock-postgres/<digest of the state folder> instead, .rock-state/postgres/cluster a link to it.
#
# Where none of that can be done, the script says what to do, writes the reason to
# .rock-state/postgres/unavailable (the PostgreSQL tests then skip with it) and exits 0, so the
# rest of the set-up goes on.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

pg_state="$ROCK_STATE_DIR/postgres"
cluster="$pg_state/cluster"
data="$cluster/data"
log="$cluster/server.log"
url_file="$pg_state/url"
reason_file="$pg_state/unavailable"
port=5432  # only names the socket file (.s.PGSQL.5432): no TCP port is opened

unavailable() {
    say "PostgreSQL is not available: $1"
    say "the PostgreSQL tests will skip; to run them, $2, then run scripts/ensure-postgres.sh again"
    mkdir -p "$pg_state"
    rm -f "$url_file"
    printf '%s\n' "$1" >"$reason_file"
    exit 0
}

# The newest server binaries: Debian's /usr/lib/postgresql/<version>/bin, else PATH.
find_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v initdb)")"
        return 0
    fi
    return 1
}

mkdir -p "$pg_state"
exec 9>"$pg_state/lock"
flock 9  # two concurrent runs make one cluster

if ! bin="$(find_bin)"; then
    if ! is_root || ! is_debian; then
        unavailable "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH" \
            "install PostgreSQL's server (Debian: apt-get install postgresql)"
    fi
    say "installing Debian's postgresql package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # Its output goes to a file, and it gets none of this script's open files: a server the
    # package's scripts may start must not hold the caller's pipes (or this script's lock).
    apt-get update -qq >"$pg_state/apt.log" 2>&1 </dev/null 9>&- \
        || unavailable "apt-get update failed (see $pg_state/apt.log)" "check the machine's apt sources"
    apt-get install -y -qq postgresql >>"$pg_state/apt.log" 2>&1 </dev/null 9>&- \
        || unavailable "apt-get install postgresql failed (see $pg_state/apt.log)" "check the machine's apt sources"
    bin="$(find_bin)" || unavailable "the postgresql package brought no initdb" "install PostgreSQL's server by hand"
fi

# Who runs the cluster: this user, or as root the postgres system user.
if is_root; then
    owner=postgres
    id -u "$owner" >/dev/null 2>&1 || unavailable "there is no 'postgres' system user to run the server as (initdb refuses root)" \
        "create one (Debian's postgresql package does: apt-get install postgresql)"
    as_owner() { runuser -u "$owner" -- "$@"; }
else
    owner="$(id -un)"
    as_owner() { "$@"; }
fi

chmod 0711 "$pg_state"  # others may pass (to the cluster's folder), not look
rm -f "$reason_file"

# The cluster's folder belongs to its owner alone (0700); the server must pass through every
# folder above it. A checkout it cannot reach gets its cluster in /var/lib instead.
if [ ! -L "$cluster" ] && ! as_owner test -x "$pg_state"; then
    elsewhere="/var/lib/rock-postgres/$(printf '%s' "$ROCK_STATE_DIR" | sha256sum | cut -c1-12)"
    say "user '$owner' cannot pass through the folders above $pg_state: the cluster goes to $elsewhere"
    mkdir -p "$elsewhere"
    rm -rf "$cluster"
    ln -s "$elsewhere" "$cluster"
fi
if [ -L "$cluster" ]; then
    cluster="$(readlink -f "$cluster")"
    data="$cluster/data"
    log="$cluster/server.log"
fi
mkdir -p "$cluster"
if is_root; then chown "$owner:" "$cluster"; fi
chmod 0700 "$cluster"
if ! as_owner test -w "$cluster"; then
    unavailable "user '$owner' cannot write to $cluster" \
        "clone rock where '$owner' may pass (e.g. not under /root), or open the folders above it to that user (chmod o+x)"
fi
sock="$cluster/run"
as_owner mkdir -p -m 0700 "$sock"
if [ "${#sock}" -gt 90 ]; then  # sun_path holds 107 bytes, the socket's name included
    unavailable "the socket folder's path $sock is too long for a unix socket" "clone rock in a shorter path"
fi

url="postgresql://rock@/rock?host=$sock&port=$port"
answers() { "$bin/pg_isready" -q -h "$sock" -p "$port" -t 5 >/dev/null 2>&1; }
write_url() { printf '%s\n' "$url" >"$url_file"; chmod 0600 "$url_file"; }

if answers; then say "PostgreSQL is running ($sock)"; write_url; exit 0; fi

if [ ! -s "$data/PG_VERSION" ]; then
    say "making a PostgreSQL cluster in $data ($("$bin/initdb" --version))"
    as_owner rm -rf "$data"
    as_owner "$bin/initdb" -D "$data" -U rock -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=reject >"$pg_state/initdb.log" 2>&1 </dev/null 9>&- \
        || { tail -n 20 "$pg_state/initdb.log" >&2; die "initdb failed; its output is $pg_state/initdb.log"; }
fi

say "starting PostgreSQL (socket in $sock, log: $log)"
# setsid: the server outlives this script and the make/pytest process group. It gets no file
# this script holds open (its lock, a caller's pipe), which would outlive the script with it.
start_server() {
    local fd
    for fd in $(ls /proc/$BASHPID/fd); do
        if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    as_owner setsid "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories='$sock' -p $port -c unix_socket_permissions=0700" \
        start >&2 </dev/null
}
if ! (start_server); then
    tail -n 20 "$log" >&2 || true
    die "PostgreSQL did not start; its log is $log"
fi
answers || die "PostgreSQL started but does not answer on $sock; its log is $log"

psql=("$bin/psql" -X -q -h "$sock" -p "$port" -U rock -d postgres -v ON_ERROR_STOP=1)
if [ -z "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'rock'")" ]; then
    "${psql[@]}" -c "CREATE DATABASE rock" >/dev/null
fi
write_url
say "PostgreSQL is running ($url)"
