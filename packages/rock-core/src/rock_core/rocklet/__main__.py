"""Command line: ``python3 rocklet.pyz [--host 0.0.0.0] [--port 22555 | --unix PATH | --listen-fd-from PATH] [--state-dir DIR] [--no-auth] [--sandbox]``.

The sandbox's secret comes in the environment variable ``ROCK_ROCKLET_TOKEN`` (taken out of the
rocklet's environment at once, so commands never inherit it); without it the rocklet refuses to
start unless ``--no-auth`` says that every caller may be served.

Also ``python3 -m rock_core.rocklet`` from a source tree. ``--version`` prints the version.
Arguments are parsed by hand: :mod:`argparse` would cost milliseconds of start-up.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's own, without its enums
import posix
import sys

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


def _take_token(name: str) -> str | None:
    """The secret in ``$name``, taken out of the environment (commands must not inherit it)."""
    os = sys.modules.get("os")
    if os is not None:  # os.environ is made: it is what commands get
        return os.environ.pop(name, "") or None
    # Before os is imported (its module costs a start milliseconds): from the environment it
    # will copy, and from the process's own.
    key = name.encode()
    value = posix.environ.pop(key, b"")
    if key in posix.environ or value:
        posix.unsetenv(key)
    return value.decode(sys.getfilesystemencoding(), "surrogateescape") or None


def _serve_as_init() -> None:
    """When started as PID 1 (a container's entry point), stay PID 1 as a tiny init.

    Orphans in a container are re-parented to PID 1; without someone reaping them every
    finished background job stays a zombie. So PID 1 forks the rocklet proper, forwards
    termination signals to it, reaps every child, and exits with the rocklet's status. Returns
    only in the child. Runs before any thread exists, so the fork is safe.
    """
    if posix.getpid() != 1:
        return
    child = posix.fork()
    if child == 0:
        return

    def forward(signum: int, frame: object) -> None:
        try:
            posix.kill(child, signum)
        except OSError:
            pass

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT):
        _signal.signal(sig, forward)
    while True:
        try:
            pid, status = posix.wait()
        except ChildProcessError:
            posix._exit(0)
        if pid == child:
            if posix.WIFEXITED(status):
                posix._exit(posix.WEXITSTATUS(status))
            posix._exit(128 + (posix.WTERMSIG(status) if posix.WIFSIGNALED(status) else 0))


def _listen(opts: dict[str, Any]) -> Any:
    """The listening ``_socket.socket`` the options name (handed over, unix or TCP)."""
    import _socket

    if opts["listen_fd_from"] is not None:
        from .handoff import receive_listener

        return receive_listener(opts["listen_fd_from"])
    if opts["unix"] is not None:
        path = opts["unix"]
        try:
            posix.unlink(path)  # left by an earlier run of this container
        except FileNotFoundError:
            pass
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.bind(path)
            posix.chmod(path, 0o666)  # its directory is what guards it
            sock.listen(1024)
        except OSError:
            sock.close()
            raise
        return sock
    host = opts["host"]
    sock = _socket.socket(_socket.AF_INET6 if ":" in host else _socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind((host, opts["port"]))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def _make_state_dir(path: str) -> None:
    try:
        posix.mkdir(path, 0o711)
    except FileExistsError:
        pass
    except FileNotFoundError:  # a --state-dir whose parents are missing
        import os

        os.makedirs(path, mode=0o711, exist_ok=True)


def _is_writable_dir(path: str) -> bool:
    try:
        is_dir = posix.stat(path).st_mode & 0o170000 == 0o040000
    except OSError:
        return False
    return is_dir and posix.access(path, posix.W_OK)


def main(argv: list[str] | None = None) -> int:
    """Run the rocklet until SIGTERM/SIGINT; the exit status.

    Until its first real request the rocklet is its front (:mod:`.front`): it listens and
    answers the readiness probe with the interpreter's own modules; the server, the endpoints
    and their imports are loaded at that request (the endpoints warmed up after its answer),
    or at ``POST /warm_up`` (how a warm pool readies its members before a claim).
    """
    opts = _parse(sys.argv[1:] if argv is None else argv)
    from .front import TOKEN_ENV, Front

    # Out of the environment before anything starts: commands must not inherit the secret.
    token = _take_token(TOKEN_ENV)
    if token is None and not opts["no_auth"]:
        sys.stderr.write(
            "rocklet: no secret in $%s; pass --no-auth to serve every caller\n" % TOKEN_ENV
        )
        return 2
    _serve_as_init()

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # Installed first: a SIGTERM during start-up must still clean up what was created.
    _signal.signal(_signal.SIGTERM, stop)
    _signal.signal(_signal.SIGINT, stop)

    own_state = opts["state_dir"] is None
    if own_state:
        environ = sys.modules["os"].environ if "os" in sys.modules else None
        if environ is not None:
            base = environ.get("TMPDIR") or "/tmp"
        else:
            base = (posix.environ.get(b"TMPDIR") or b"/tmp").decode(
                sys.getfilesystemencoding(), "surrogateescape"
            )
        if opts["sandbox"] and _is_writable_dir("/run"):
            base = "/run"  # rock's own files, where a user's `ls /tmp` does not meet them
        state_dir = "%s/rocklet-%d-%s" % (base.rstrip("/"), posix.getpid(), posix.urandom(3).hex())
    else:
        state_dir = opts["state_dir"]
    rocklets: list[Any] = []  # the full rocklet, once loaded
    front = None
    try:
        _make_state_dir(state_dir)
        try:
            listener = _listen(opts)
        except OSError as exc:
            if opts["listen_fd_from"] is not None:
                where = "the socket handed over on %s" % opts["listen_fd_from"]
            else:
                where = opts["unix"] or "%s:%s" % (opts["host"], opts["port"])
            sys.stderr.write("rocklet: cannot listen on %s: %s\n" % (where, exc))
            return 1
        unix = listener.family == 1  # AF_UNIX

        def load() -> Any:
            import threading

            from .api import Rocklet, build_router
            from .server import RockletServer

            rocklet = Rocklet(state_dir, owns_process=True, sandbox_agent=opts["sandbox"])
            rocklets.append(rocklet)
            server = RockletServer.for_connections(build_router(rocklet), token, unix=unix)
            # The endpoints are warmed up once the first full answer is out and the rocklet is
            # idle: importing them before would hold the GIL while that request waits, in a
            # sandbox's small share, and a short busy sandbox (an RL rollout's) never needs
            # sessions, processes or statistics. An env image's warm-up starts GEM's worker:
            # at once, as its first env waits for it.
            idle = 0.0 if b"ROCK_ENV_PRESTART" in posix.environ else IDLE_BEFORE_WARM_UP
            server.after_first_answer.append(
                lambda: threading.Thread(
                    target=warm_when_idle, args=(server, rocklet, idle), daemon=True
                ).start()
            )
            return server

        front = Front(listener, load)
        if unix:
            where = "unix:%s" % (opts["unix"] or listener.getsockname() or "(a socket handed in)")
        else:
            where = "http://%s:%d" % listener.getsockname()[:2]
        auth = "secret required" if token else "no secret: every caller is served"
        sys.stderr.write(
            "rocklet %s listening on %s (state in %s; %s)\n" % (__version__, where, state_dir, auth)
        )
        sys.stderr.flush()
        if b"ROCK_ENV_PRESTART" in posix.environ:
            # An env image: GEM's worker is made ready before the first env, as soon as the
            # sandbox is known to run.
            def prestart() -> None:
                front.full()
                rocklets[0].warm_up()

            front.after_first_answer.append(lambda: _start_thread(prestart))
        front.serve_forever()
    except SystemExit:
        pass
    finally:
        if front is not None:
            front.shutdown()
        for rocklet in rocklets:
            rocklet.shutdown()
        if own_state:
            if rocklets:
                rocklets[0].remove_state()
            else:
                try:
                    posix.rmdir(state_dir)  # nothing ran: it is empty
                except OSError:
                    import shutil

                    shutil.rmtree(state_dir, ignore_errors=True)
    return 0


#: Seconds without a request starting or ending before the endpoints are warmed up.
IDLE_BEFORE_WARM_UP = 0.5


def warm_when_idle(server: Any, rocklet: Any, idle: float = IDLE_BEFORE_WARM_UP) -> None:
    """Warm ``rocklet``'s endpoints up (:meth:`.api.Rocklet.warm_up`) once ``server`` saw no
    request start or end for ``idle`` seconds (0: at once): between a user's calls, not amid a
    rollout's."""
    import time

    seen = -1
    while idle and seen != server.activity:
        seen = server.activity
        time.sleep(idle)
    rocklet.warm_up()


def _start_thread(target: Any) -> None:
    import _thread

    _thread.start_new_thread(target, ())


if __name__ == "__main__":
    sys.exit(main())
