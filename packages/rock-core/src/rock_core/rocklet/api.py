"""The rocklet's endpoints: ROCK's set with ROCK's field names, and rock's extras.

Request bodies use the field names of ROCK's server-side models (reference §2.6); ``sandbox_id``
and unknown keys are accepted and ignored, known keys are type-checked (a wrong type is HTTP 400
``{"detail": ...}`` naming the field). Answers are bare JSON, as ROCK's rocklet answers.

The route table is built by :func:`build_router`; a later module (GEM's ``/env/*``) adds its
routes to the same :class:`~.server.Router`. Modules with heavy imports (sessions, processes,
files, statistics) are imported on first use or by :meth:`Rocklet.warm_up` right after the
server listens, so the rocklet is listening before they are compiled.
"""

from __future__ import annotations

import os
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Callable
    from typing import Any

from .errors import BadRequest
from .front import PROBE_BODY
from .http_messages import Request, Response
from .server import Router

__all__ = ["Rocklet", "build_router"]

_MISSING = object()


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_str_dict(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )


def _is_command(v: Any) -> bool:
    return isinstance(v, str) or (_is_str_list(v) and len(v) > 0)


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_is_str, "a string"),
    "bool": (_is_bool, "a boolean"),
    "number": (_is_number, "a number"),
    "int": (_is_int, "an integer"),
    "str_list": (_is_str_list, "a list of strings"),
    "str_dict": (_is_str_dict, "an object of string values"),
    "command": (_is_command, "a string or a non-empty list of strings"),
}


def field(body: dict[str, Any], name: str, kind: str, default: Any = _MISSING) -> Any:
    """``body[name]`` checked to be of ``kind``; ``default`` when absent or null.

    Without a default the field is required. A wrong type or a missing required field is a 400.
    """
    value = body.get(name)
    if value is None:
        if default is _MISSING:
            raise BadRequest("field %r is required" % name)
        return default
    check, what = _KINDS[kind]
    if not check(value):
        import json

        shown = json.dumps(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise BadRequest("field %r must be %s, got %s" % (name, what, shown))
    return value


def _choice(body: dict[str, Any], name: str, choices: tuple[str, ...], default: str) -> str:
    value: str = field(body, name, "str", default)
    if value not in choices:
        raise BadRequest("field %r must be one of %s, got %r" % (name, ", ".join(choices), value))
    return value


def _non_negative(body: dict[str, Any], name: str, default: Any) -> float | None:
    value: float | None = field(body, name, "number", default)
    if value is not None and value < 0:
        raise BadRequest("field %r must not be negative, got %r" % (name, value))
    return value


def _path(body: dict[str, Any]) -> str:
    path: str = field(body, "path", "str")
    if not path:
        raise BadRequest("field 'path' must not be empty")
    return path


#: ``GET /is_alive``'s answer, as json would write it (and the front sends it).
_ALIVE = PROBE_BODY


def _ndjson(events: Any) -> Any:
    import json

    for event in events:
        yield json.dumps(event, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"


class Rocklet:
    """The state behind the endpoints: sessions, background processes, statistics.

    :param state_dir: a private directory for session scratch files and process output.
    """

    def __init__(
        self, state_dir: str, *, owns_process: bool = False, sandbox_agent: bool = False
    ) -> None:
        self.state_dir = state_dir
        #: Whether this rocklet is its own program; one served inside another program (tests)
        #: is never a sandbox's agent, whatever it was told.
        self.owns_process = owns_process
        #: Whether it was started as a sandbox's agent (``--sandbox``: its PID namespace is the
        #: sandbox's), so that ``/end_processes`` may kill every other process it sees.
        self.sandbox_agent = sandbox_agent and owns_process
        self._sessions: Any = None
        self._processes: Any = None
        self._stats: Any = None
        self._envs: Any = None
        self._init_lock = threading.Lock()

    # -- lazily built parts -------------------------------------------------------------

    @property
    def sessions(self) -> Any:
        """The :class:`~.sessions.SessionManager`."""
        if self._sessions is None:
            with self._init_lock:
                if self._sessions is None:
                    from .sessions import SessionManager

                    # Makes its scratch root with its first session: nothing written before.
                    self._sessions = SessionManager(os.path.join(self.state_dir, "sessions"))
        return self._sessions

    @property
    def processes(self) -> Any:
        """The :class:`~.processes.ProcessTable`."""
        if self._processes is None:
            with self._init_lock:
                if self._processes is None:
                    from .processes import ProcessTable

                    self._processes = ProcessTable(os.path.join(self.state_dir, "processes"))
        return self._processes

    @property
    def envs(self) -> Any:
        """The :class:`~.envs.EnvChannel` (GEM environments, a process each)."""
        if self._envs is None:
            with self._init_lock:
                if self._envs is None:
                    from .envs import EnvChannel

                    self._envs = EnvChannel(self.state_dir)
        return self._envs

    def warm_up(self) -> None:
        """Import (compile) the endpoint modules so the first requests do not pay for it."""
        import json  # noqa: F401 - every JSON request and answer but the readiness probe's

        from . import execute, files, processes, sessions, stats  # noqa: F401

        _ = self.sessions
        _ = self.processes
        if os.environ.get(
            "ROCK_ENV_PRESTART"
        ):  # an env image: GEM's worker ready before the first env
            self.envs.prestart()
        if self.owns_process and not getattr(self, "_said_warm", False):
            # The sandbox's log says when (a warm pool's member: before it can be claimed).
            import sys

            self._said_warm = True

            sys.stderr.write("rocklet: endpoints warmed up\n")
            sys.stderr.flush()

    def shutdown(self) -> None:
        """Close every session, kill background processes, remove the state directory."""
        if self._sessions is not None:
            self._sessions.close_all()
        if self._processes is not None:
            self._processes.kill_all()
        if self._envs is not None:
            self._envs.close_all()

    def remove_state(self) -> None:
        """Delete the state directory (process output included)."""
        import shutil  # here: most of its imports are not needed to start

        shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- ROCK's endpoints ---------------------------------------------------------------

    def root(self, req: Request) -> Any:
        """``GET /``."""
        return {"message": "hello world"}

    def is_alive(self, req: Request) -> Any:
        """``GET /is_alive``: the engine's readiness probe, answered without json (imported at
        the warm-up, after this first answer)."""
        return Response(_ALIVE)

    def end_processes(self, req: Request) -> Any:
        """``POST /end_processes`` (rock addition): kill every process of the sandbox but this
        rocklet and the sandbox's init; answer ``{"killed": n}``.

        The engine's way to end a sandbox whose container waits for removal: nothing in it runs
        on, while the container itself does not exit yet (a thousand containers exiting at once
        can deadlock Docker 20.10's network code). Only a rocklet started with ``--sandbox``, as
        rock's launch command does, serves it; its PID namespace is the sandbox's.
        """
        if not self.sandbox_agent:
            raise BadRequest(
                "this rocklet is not a sandbox's agent (started without --sandbox): it ends no process",
                status=409,
            )
        from .processes import end_other_processes

        return {"killed": end_other_processes()}

    def warm(self, req: Request) -> Any:
        """``POST /warm_up`` (rock addition): warm the endpoints up (:meth:`warm_up`) and answer
        ``{"warm": true}`` once they are: how a warm pool readies a member before any claim, as
        the rocklet itself loads them only at its first real request."""
        self.warm_up()
        return {"warm": True}

    def get_statistics(self, req: Request) -> Any:
        """``GET /get_statistics``: cpu, mem, disk (percent), net (bytes) and raw figures."""
        if self._stats is None:
            from .stats import Statistics

            self._stats = Statistics()
        return self._stats.collect()

    def create_session(self, req: Request) -> Any:
        """``POST /create_session``: start a persistent bash session."""
        body = req.json()
        _choice(body, "session_type", ("bash",), "bash")
        name = field(body, "session", "str", "default")
        startup_source = field(body, "startup_source", "str_list", [])
        env_enable = field(body, "env_enable", "bool", False)
        env = field(body, "env", "str_dict", None)
        remote_user = field(body, "remote_user", "str", None)
        startup_timeout = _non_negative(body, "startup_timeout", None)
        # ROCK's default is 1 s after a fixed 0.3 s sleep; a slow .bashrc should not fail here.
        timeout = 30.0 if startup_timeout is None else max(float(startup_timeout), 1.0)
        output = self.sessions.create(
            name,
            startup_source=startup_source,
            env_enable=env_enable,
            env=env,
            remote_user=remote_user or None,
            startup_timeout=timeout,
        )
        return {"output": output, "session_type": "bash"}

    def run_in_session(self, req: Request) -> Any:
        """``POST /run_in_session``: run a command in a session (ROCK's ``BashObservation``)."""
        body = req.json()
        command = field(body, "command", "str")
        name = field(body, "session", "str", "default")
        timeout = _non_negative(body, "timeout", None)
        check = _choice(body, "check", ("silent", "raise", "ignore"), "raise")
        expect = field(body, "expect", "str_list", [])
        error_msg = field(body, "error_msg", "str", "")
        interactive = field(body, "is_interactive_command", "bool", False) or field(
            body, "is_interactive_quit", "bool", False
        )
        return self.sessions.run(
            name,
            command,
            timeout=timeout,
            check=check,
            expect=expect,
            error_msg=error_msg,
            interactive=interactive,
        )

    def close_session(self, req: Request) -> Any:
        """``POST /close_session``."""
        body = req.json()
        self.sessions.close(field(body, "session", "str", "default"))
        return {"session_type": "bash"}

    def execute(self, req: Request) -> Any:
        """``POST /execute``: a one-shot command (ROCK's ``CommandResponse`` plus usage)."""
        from .execute import execute

        args = self._command_args(req.json())
        return execute(**args)

    def read_file(self, req: Request) -> Any:
        """``POST /read_file``."""
        from .files import read_file

        body = req.json()
        return read_file(
            _path(body), field(body, "encoding", "str", None), field(body, "errors", "str", None)
        )

    def write_file(self, req: Request) -> Any:
        """``POST /write_file``."""
        from .files import write_file

        body = req.json()
        return write_file(_path(body), field(body, "content", "str"))

    def upload(self, req: Request) -> Any:
        """``POST /upload`` (multipart: ``file``, ``target_path``, ``unzip``)."""
        from .files import save_upload

        scratch = os.path.join(self.state_dir, "uploads")
        return save_upload(req.reader, req.headers.get("content-type", ""), scratch)

    def close(self, req: Request) -> Any:
        """``POST /close``: close every session."""
        if self._sessions is not None:
            self._sessions.close_all()
        return {}

    # -- rock's extras ------------------------------------------------------------------

    def interrupt_session(self, req: Request) -> Any:
        """``POST /interrupt_session {session}``: Ctrl-C the session's running command."""
        body = req.json()
        return self.sessions.interrupt(field(body, "session", "str", "default"))

    def execute_stream(self, req: Request) -> Any:
        """``POST /execute_stream``: like ``/execute``, answered as NDJSON events while it runs."""
        from .execute import CommandRun, stream_events

        args = self._command_args(req.json())
        args.pop("check")
        args.pop("error_msg")
        run = CommandRun(**args)
        return Response(
            None, content_type="application/x-ndjson", stream=_ndjson(stream_events(run))
        )

    def download(self, req: Request) -> Any:
        """``POST /download {path}`` or ``GET /download?path=``: the file's raw bytes."""
        from .files import open_download

        body = req.json() if req.method == "POST" else dict(req.query)
        chunks, size = open_download(_path(body))
        return Response(None, content_type="application/octet-stream", stream=chunks, length=size)

    def list_dir(self, req: Request) -> Any:
        """``POST /list_dir {path}``: the directory's entries."""
        from .files import list_dir

        return list_dir(_path(req.json()))

    def start_process(self, req: Request) -> Any:
        """``POST /processes {command, shell?, cwd?, env?, timeout?}`` → ``{process_id, pid}``."""
        body = req.json()
        command = field(body, "command", "command")
        proc = self.processes.start(
            command,
            shell=field(body, "shell", "bool", None),
            cwd=field(body, "cwd", "str", None),
            env=field(body, "env", "str_dict", None),
            timeout=_non_negative(body, "timeout", None),
        )
        return {"process_id": proc.id, "pid": proc.pid}

    def list_processes(self, req: Request) -> Any:
        """``GET /processes``: every background process's status (no output tail)."""
        return {"processes": [p.status(tail_bytes=0) for p in self.processes.all()]}

    def process_status(self, req: Request) -> Any:
        """``GET /processes/{id}?wait=S&tail=N``: status, waiting up to S s for the end."""
        proc = self.processes.get(req.params["id"])
        wait = _query_number(req, "wait", 0.0)
        if wait > 0:
            proc.wait(wait)
        return proc.status(tail_bytes=int(_query_number(req, "tail", 4096)))

    def process_output(self, req: Request) -> Any:
        """``GET /processes/{id}/output?offset=N&limit=M``: raw output bytes from ``offset``."""
        proc = self.processes.get(req.params["id"])
        offset = int(_query_number(req, "offset", 0))
        limit = req.query.get("limit")
        data, size = proc.read_output(
            offset, int(_query_number(req, "limit", 0)) if limit else None
        )
        headers = {
            "x-rock-output-size": str(size),
            "x-rock-next-offset": str(offset + len(data) if offset >= 0 else size),
            "x-rock-running": "true" if proc.running else "false",
        }
        return Response(data, content_type="application/octet-stream", headers=headers)

    def kill_process(self, req: Request) -> Any:
        """``POST /processes/{id}/kill {signal?, group?}``: signal the process (group)."""
        from .processes import parse_signal

        proc = self.processes.get(req.params["id"])
        body = req.json()
        raw = body.get("signal")
        if isinstance(raw, bool) or (raw is not None and not isinstance(raw, (int, str))):
            import json

            raise BadRequest(
                "field 'signal' must be a signal number or name, got %s" % json.dumps(raw)
            )
        try:
            sig = parse_signal(raw)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        proc.kill(sig, group=field(body, "group", "bool", True))
        wait = _non_negative(body, "wait", 0)
        if wait:
            proc.wait(wait)
        return proc.status()

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _command_args(body: dict[str, Any]) -> dict[str, Any]:
        return {
            "command": field(body, "command", "command"),
            "shell": field(body, "shell", "bool", False),
            "cwd": field(body, "cwd", "str", None),
            "env": field(body, "env", "str_dict", None),
            # ROCK's default is 1200 s; an explicit null means no limit.
            "timeout": None
            if "timeout" in body and body["timeout"] is None
            else _non_negative(body, "timeout", 1200),
            "check": field(body, "check", "bool", False),
            "error_msg": field(body, "error_msg", "str", ""),
        }


def _query_number(req: Request, name: str, default: float) -> float:
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest("query parameter %r must be a number, got %r" % (name, raw)) from None
    return value


class _Router(Router):
    """The route table, plus the ``POST`` routes :mod:`.files` declares in its ``ROUTES`` (a
    path and a function of the JSON body): found on the first request to a path no other route
    serves, so that declaring one touches that module only and the rocklet imports nothing more
    to start."""

    def resolve(self, method: str, path: str) -> tuple[Any, dict[str, str]]:
        try:
            return super().resolve(method, path)
        except BadRequest as exc:
            if exc.status != 404:
                raise
            from . import files

            declared = files.ROUTES.get(path)
            if declared is None:
                raise
            self.add("POST", path, lambda req: declared(req.json()))
            return super().resolve(method, path)  # another method than POST: 405


def build_router(rocklet: Rocklet) -> Router:
    """The route table of ``rocklet``: ROCK's endpoints first, then rock's extras (and those
    :mod:`.files` declares, on first use)."""
    router = _Router()
    routes: list[tuple[str, str, Callable[[Request], Any]]] = [
        # ROCK (reference §3.1)
        ("GET", "/", rocklet.root),
        ("GET", "/is_alive", rocklet.is_alive),
        ("GET", "/get_statistics", rocklet.get_statistics),
        ("POST", "/create_session", rocklet.create_session),
        ("POST", "/run_in_session", rocklet.run_in_session),
        ("POST", "/close_session", rocklet.close_session),
        ("POST", "/execute", rocklet.execute),
        ("POST", "/read_file", rocklet.read_file),
        ("POST", "/write_file", rocklet.write_file),
        ("POST", "/close", rocklet.close),
        # rock's extras
        ("POST", "/interrupt_session", rocklet.interrupt_session),
        ("POST", "/execute_stream", rocklet.execute_stream),
        ("POST", "/download", rocklet.download),
        ("GET", "/download", rocklet.download),
        ("POST", "/list_dir", rocklet.list_dir),
        ("POST", "/processes", rocklet.start_process),
        ("GET", "/processes", rocklet.list_processes),
        ("GET", "/processes/{id}", rocklet.process_status),
        ("GET", "/processes/{id}/output", rocklet.process_output),
        ("POST", "/processes/{id}/kill", rocklet.kill_process),
        ("POST", "/end_processes", rocklet.end_processes),
        ("POST", "/warm_up", rocklet.warm),
    ]
    for method, path, handler in routes:
        router.add(method, path, handler)
    router.add("POST", "/upload", rocklet.upload, raw_body=True)
    router.add("GET", "/tunnel", _tunnel)
    router.add("GET", "/pty", _pty)
    _add_env_routes(router, rocklet)
    return router


# The /env/* routes (rocklet/env_routes.py), imported on their first call: most sandboxes run no env.
_ENV_ROUTES = (
    ("POST", "/env/make", "make"),
    ("POST", "/env/reset", "reset"),
    ("POST", "/env/step", "step"),
    ("POST", "/env/close", "close"),
    ("POST", "/env/list", "list_ids"),
    ("POST", "/env/batch", "batch"),
    ("GET", "/env", "describe"),
)


def _add_env_routes(router: Router, rocklet: Rocklet) -> None:
    def route(name: str) -> Callable[[Request], Any]:
        def handler(req: Request) -> Any:
            from . import env_routes

            return getattr(env_routes, name)(rocklet, req)

        return handler

    for method, path, name in _ENV_ROUTES:
        router.add(method, path, route(name))


def _tunnel(request: Request) -> Any:
    from .tunnel import open_tunnel  # imported on first use: most sandboxes never tunnel

    return open_tunnel(request)


def _pty(request: Request) -> Any:
    from .terminal import open_pty  # imported on first use: most sandboxes never open a terminal

    return open_pty(request)
