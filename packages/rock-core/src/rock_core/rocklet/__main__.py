"""Command line: ``python3 rocklet.pyz [--host 0.0.0.0] [--port 22555 | --unix PATH | --listen-fd-from PATH] [--state-dir DIR] [--no-auth] [--sandbox]``.

The sandbox's secret comes in the environment variable ``ROCK_ROCKLET_TOKEN`` (taken out of the
rocklet's environment at once, so commands never inherit it); without it the rocklet refuses to
start unless ``--no-auth`` says that every caller may be served.

Also ``python3 -m rock_core.rocklet`` from a source tree. ``--version`` prints the version.
Arguments are parsed by hand: :mod:`argparse` would cost milliseconds of start-up.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

from . import __version__

USAGE = """usage: rocklet [--host HOST] [--port PORT | --unix PATH | --listen-fd-from PATH] [--state-dir DIR]
               [--no-auth] [--sandbox] [--version]

rock's in-sandbox agent: ROCK's rocklet HTTP API on HOST:PORT (default 0.0.0.0:22555).
Every request but GET /is_alive must carry the secret given in $ROCK_ROCKLET_TOKEN
(header X-Rock-Rocklet-Token).
  --unix PATH      listen on a unix socket instead (a sandbox without a network)
  --listen-fd-from PATH
                   serve on the listening socket the engine hands over on the unix
                   socket PATH (once, at start): how rock's Docker sandboxes are reached
  --state-dir DIR  session scratch files and background process output
                   (default: a new directory under $TMPDIR or /tmp, removed on exit)
  --no-auth        serve every caller without a secret (development only)
  --sandbox        this rocklet is a sandbox's agent, its PID namespace the sandbox's:
                   POST /end_processes may kill every other process it sees
"""


def _parse(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "host": "0.0.0.0",
        "port": 22555,
        "state_dir": None,
        "unix": None,
        "listen_fd_from": None,
        "no_auth": False,
        "sandbox": False,
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, value = arg.partition("=")
        if key in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if key in ("-v", "--version"):
            sys.stdout.write(__version__ + "\n")
            raise SystemExit(0)
        if key in ("--no-auth", "--sandbox"):
            opts[key[2:].replace("-", "_")] = True
            i += 1
            continue
        if key not in ("--host", "--port", "--state-dir", "--unix", "--listen-fd-from"):
            sys.stderr.write("rocklet: unknown argument %r\n%s" % (arg, USAGE))
            raise SystemExit(2)
        if not eq:
            i += 1
            if i >= len(argv):
                sys.stderr.write("rocklet: %s needs a value\n" % key)
                raise SystemExit(2)
            value = argv[i]
        if key == "--port":
            try:
                opts["port"] = int(value)
            except ValueError:
                sys.stderr.write("rocklet: --port must be a number, got %r\n" % value)
                raise SystemExit(2) from None
        else:
            opts[key[2:].replace("-", "_")] = value
        i += 1
    return opts


def _serve_as_init() -> None:
    """When started as PID 1 (a container's entry point), stay PID 1 as a tiny init.

    Orphans in a container are re-parented to PID 1; without someone reaping them every
    finished background job stays a zombie. So PID 1 forks the rocklet proper, forwards
    termination signals to it, reaps every child, and exits with the rocklet's status. Returns
    only in the child. Runs before any thread exists, so the fork is safe.
    """
    if os.getpid() != 1:
        return
    child = os.fork()
    if child == 0:
        return

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(child, signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            if os.WIFEXITED(status):
                os._exit(os.WEXITSTATUS(status))
            os._exit(128 + (os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0))


def main(argv: list[str] | None = None) -> int:
    """Run the rocklet until SIGTERM/SIGINT; the exit status."""
    opts = _parse(sys.argv[1:] if argv is None else argv)
    from .server import TOKEN_ENV

    # Out of the environment before anything starts: commands must not inherit the secret.
    token = os.environ.pop(TOKEN_ENV, "") or None
    if token is None and not opts["no_auth"]:
        sys.stderr.write(
            "rocklet: no secret in $%s; pass --no-auth to serve every caller\n" % TOKEN_ENV
        )
        return 2
    _serve_as_init()
    from .api import Rocklet, build_router
    from .server import RockletServer

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # Installed first: a SIGTERM during start-up must still clean up what was created.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    own_state = opts["state_dir"] is None
    if own_state:
        base = os.environ.get("TMPDIR") or "/tmp"
        if opts["sandbox"] and os.path.isdir("/run") and os.access("/run", os.W_OK):
            base = "/run"  # rock's own files, where a user's `ls /tmp` does not meet them
        state_dir = os.path.join(base, "rocklet-%d-%s" % (os.getpid(), os.urandom(3).hex()))
    else:
        state_dir = opts["state_dir"]
    rocklet = Rocklet(state_dir, owns_process=True, sandbox_agent=opts["sandbox"])
    server = None
    try:
        os.makedirs(state_dir, mode=0o711, exist_ok=True)
        try:
            handed = None
            if opts["listen_fd_from"] is not None:
                from .handoff import receive_listener

                handed = receive_listener(opts["listen_fd_from"])
            server = RockletServer(
                build_router(rocklet), opts["host"], opts["port"], opts["unix"], token, handed
            )
        except OSError as exc:
            if opts["listen_fd_from"] is not None:
                where = "the socket handed over on %s" % opts["listen_fd_from"]
            else:
                where = opts["unix"] or "%s:%s" % (opts["host"], opts["port"])
            sys.stderr.write("rocklet: cannot listen on %s: %s\n" % (where, exc))
            return 1
        auth = "secret required" if token else "no secret: every caller is served"
        sys.stderr.write(
            "rocklet %s listening on %s (state in %s; %s)\n"
            % (__version__, server.url, state_dir, auth)
        )
        sys.stderr.flush()
        # Warm the endpoints up once the first answer (the engine's readiness probe) is out:
        # importing them before would hold the GIL while the probe waits, in a sandbox's
        # small CPU share.
        server.after_first_answer.append(
            lambda: threading.Thread(target=rocklet.warm_up, daemon=True).start()
        )
        server.serve_forever()
    except SystemExit:
        pass
    finally:
        if server is not None:
            server.shutdown()
        rocklet.shutdown()
        if own_state:
            rocklet.remove_state()
    return 0


if __name__ == "__main__":
    sys.exit(main())
