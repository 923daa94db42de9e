"""The rocklet's environment channel: GEM environments, each in a process of its own or sharing
one of a few.

The rocklet never imports GEM. On the first ``/env/make`` it starts a worker, the image's
``python3`` (with its site-packages, unlike the rocklet's ``-I -S``) running
:mod:`.env_worker`: a fork server that imports GEM once. Each env process is a child forked from
it, reached over a unix socket pair the rocklet made (one end handed over with ``SCM_RIGHTS``).

By default an env has a process of its own, so a slow reset of one (Sokoban-hard: seconds)
blocks only its own caller. A make with ``share=N`` puts the env in one of N shared processes
(the one with the fewest envs; a new one while there are fewer than N): their envs take turns,
and a batch costs one message per process rather than per env. Each env keeps its own generator
states there (:class:`.env_worker.ProcessEnvs`), so its trajectory is what it would be alone; but
a slow call holds up the other envs of its process, and a crash or timeout ends them all.

Where GEM comes from: the worker's ``PYTHONPATH`` is ``$ROCK_ENV_PYTHONPATH`` (set by an env
image, e.g. ``/opt/rock-gem/site``) before the image's own; the rocklet's environment is not
changed, nor that of the sandbox's commands.

One env's process and its socket are :mod:`.env_process`'s; the ``/env/*`` routes that call
this channel are in :mod:`.env_routes`.
"""

from __future__ import annotations

import json
import os
import pkgutil
import socket
import subprocess
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .env_process import EnvProcess, LineReader, env_error, result_of
from .errors import EnvError

__all__ = ["EnvChannel", "DEFAULT_TIMEOUT"]

#: Seconds a call to an env may take unless the request says otherwise (ROCK's client waits 300 s).
DEFAULT_TIMEOUT = 300.0
#: Seconds the worker may take to import GEM at its start.
START_TIMEOUT = 120.0
_PYTHONPATH_ENV = "ROCK_ENV_PYTHONPATH"
_PYTHON_ENV = "ROCK_ENV_PYTHON"
#: A process's split batch answer (env_worker's ``SPLIT``, ``SEPARATOR``): each call's answer
#: line is passed on as it came, never read as JSON here unless it is an error.
_SPLIT = b"\x1d"
_SEPARATOR = b"\x1e"
_OK = b'{"ok":'


class _Worker:
    """The fork server for one Python executable."""

    def __init__(
        self,
        python: str,
        process: subprocess.Popen[bytes],
        control: socket.socket,
        hello: dict[str, Any],
    ) -> None:
        self.python = python
        self.process = process
        self.control = control
        self.hello = hello
        self.lock = threading.Lock()
        self.log_path = ""

    def alive(self) -> bool:
        return self.process.poll() is None


class EnvChannel:
    """The envs of one rocklet.

    :param state_dir: where the worker's script and log are written.
    :param python: the interpreter of the worker (default ``$ROCK_ENV_PYTHON`` or ``python3``).
    :param pythonpath: directories put first on the worker's ``PYTHONPATH`` (default
        ``$ROCK_ENV_PYTHONPATH``).
    """

    def __init__(
        self, state_dir: str, python: str | None = None, pythonpath: str | None = None
    ) -> None:
        self.state_dir = os.path.join(state_dir, "envs")
        self.python = python or os.environ.get(_PYTHON_ENV) or "python3"
        self.pythonpath = (
            pythonpath if pythonpath is not None else os.environ.get(_PYTHONPATH_ENV, "")
        )
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._worker_lock = threading.Lock()
        self._script_written = False
        #: env key -> its process (a shared process under each of its envs' keys).
        self._envs: dict[str, EnvProcess] = {}
        self._env_ids: dict[str, str] = {}
        #: pythonpath -> its shared processes.
        self._shared: dict[str, list[EnvProcess]] = {}
        self._share_lock = threading.Lock()
        self._gone: dict[str, str] = {}
        self._next = 0
        self._closed = False

    # -- the worker ------------------------------------------------------------------------

    def _script(self) -> str:
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        path = os.path.join(self.state_dir, "env_worker.py")
        if not self._script_written:  # written once per channel: this rocklet's own version
            self._script_written = True
            for name in ("env_generators.py", "env_worker.py"):  # the worker imports the first
                data = pkgutil.get_data(__package__ or "rocklet", name)
                assert data is not None
                tmp = os.path.join(self.state_dir, name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(self.state_dir, name))
        return path

    def _start_worker(self, pythonpath: str) -> _Worker:
        script = self._script()
        env = dict(os.environ)
        paths = [p for p in (pythonpath, env.get("PYTHONPATH", "")) if p]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, "1")  # no BLAS thread pools: a fork server must not have threads
        env["PYTHONUNBUFFERED"] = "1"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_path = os.path.join(self.state_dir, "worker%s.log" % (len(self._workers) or ""))
        try:
            with open(log_path, "ab") as log:
                process = subprocess.Popen(
                    [self.python, script, str(theirs.fileno())],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=(theirs.fileno(),),
                    env=env,
                    cwd=self.state_dir,
                    start_new_session=True,
                )
        except OSError as exc:
            ours.close()
            raise env_error(
                "runtime", "cannot start the env worker %r: %s" % (self.python, exc)
            ) from None
        finally:
            theirs.close()
        reader = LineReader(ours)
        try:
            line = reader.line(time.monotonic() + START_TIMEOUT)
        except TimeoutError:
            process.kill()
            ours.close()
            raise env_error(
                "runtime",
                "the env worker (%s) did not start within %gs" % (self.python, START_TIMEOUT),
            ) from None
        if line is None:
            process.wait()
            ours.close()
            raise env_error(
                "runtime",
                "the env worker %s exited at start (status %s); it needs Python 3.8 or newer: %s"
                % (self.python, process.returncode, _tail(log_path)),
            )
        hello = json.loads(line)
        if not hello.get("ready"):
            process.wait()
            ours.close()
            raise env_error(
                str(hello.get("kind", "runtime")),
                str(hello.get("message", "the env worker failed to start")),
                python=hello.get("python"),
                pythonpath=pythonpath,
            )
        worker = _Worker(self.python, process, ours, hello)
        worker.log_path = log_path
        return worker

    def worker(self, pythonpath: str | None = None) -> _Worker:
        """The running fork server of ``pythonpath`` (default: the channel's), started (again)
        when needed."""
        path = self.pythonpath if pythonpath is None else pythonpath
        with self._worker_lock:
            if self._closed:
                raise env_error("runtime", "the env channel is closed")
            worker = self._workers.get(path)
            if worker is None or not worker.alive():
                if worker is not None:
                    worker.control.close()
                worker = self._workers[path] = self._start_worker(path)
            return worker

    def prestart(self) -> None:
        """Start the default worker now (``$ROCK_ENV_PRESTART``: a sandbox of an env image, maybe
        waiting in a warm pool), so the first env does not wait for GEM's import; a failure is
        left for the first make to report."""
        try:
            self.worker()
        except EnvError:
            pass

    def _fork(self, pythonpath: str | None = None) -> tuple[socket.socket, int]:
        """A new env process and the socket to it."""
        for attempt in (0, 1):
            worker = self.worker(pythonpath)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with worker.lock:
                    worker.control.sendmsg(
                        [b"s"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes(theirs.fileno()))]
                    )
            except OSError:
                ours.close()
                if attempt:
                    raise env_error("runtime", "the env worker is not taking requests") from None
                continue  # it died since: start it again once
            finally:
                theirs.close()
            reader = LineReader(ours)
            try:
                line = reader.line(time.monotonic() + 30.0)
            except TimeoutError:
                line = None
            if line is None:
                ours.close()
                raise env_error(
                    "runtime",
                    "the env worker did not fork a process for the env: %s"
                    % _tail(worker.log_path),
                )
            pid = int(json.loads(line)["pid"])
            return ours, pid
        raise AssertionError("unreachable")

    # -- envs ------------------------------------------------------------------------------

    def get(self, key: str) -> EnvProcess:
        """The env ``key``; a closed or unknown one is ``no_env``."""
        env = self._envs.get(key)
        if env is None:
            why = self._gone.get(key)
            raise env_error(
                "no_env",
                "no env %r in this sandbox%s" % (key, (": " + why) if why else ""),
                env=key,
            )
        return env

    def make(
        self,
        env_id: str,
        kwargs: dict[str, Any],
        timeout: float | None,
        pythonpath: str | None = None,
        share: int = 0,
    ) -> dict[str, Any]:
        """Make ``env_id`` in a process forked for it, or with ``share`` > 0 in one of that many
        shared processes (GEM found on ``pythonpath`` first, default the channel's)."""
        with self._lock:
            self._next += 1
            key = "e%d" % self._next
        if share > 0:
            return self._make_shared(key, env_id, kwargs, timeout, pythonpath, share)
        sock, pid = self._fork(pythonpath)
        env = EnvProcess(key, sock, pid)
        env.envs.append(key)
        try:
            env.call({"op": "make", "s": key, "env_id": env_id, "kwargs": kwargs}, timeout)
        except BaseException:
            env.kill()
            raise
        env.env_id = env_id
        self._add(key, env_id, env)
        return {"env": key, "env_id": env_id, "pid": pid}

    def _add(self, key: str, env_id: str, process: EnvProcess) -> None:
        with self._lock:
            if self._closed:
                process.kill()
                raise env_error("runtime", "the env channel is closed")
            self._envs[key] = process
            self._env_ids[key] = env_id

    def _make_shared(
        self,
        key: str,
        env_id: str,
        kwargs: dict[str, Any],
        timeout: float | None,
        pythonpath: str | None,
        share: int,
    ) -> dict[str, Any]:
        path = self.pythonpath if pythonpath is None else pythonpath
        with self._share_lock:
            live = [p for p in self._shared.get(path, []) if p.dead is None]
            if len(live) < share:
                sock, pid = self._fork(pythonpath)
                live.append(EnvProcess("p%d" % pid, sock, pid, shared=True))
            process = min(live, key=lambda p: len(p.envs))
            process.envs.append(key)
            self._shared[path] = live
        try:
            process.call({"op": "make", "s": key, "env_id": env_id, "kwargs": kwargs}, timeout)
        except EnvError as exc:
            if exc.extra_info.get("kind") in ("env_died", "timeout"):
                self._forget(process)
            else:
                self._drop(process, key)
            raise
        except BaseException:
            self._drop(process, key)
            raise
        self._add(key, env_id, process)
        return {"env": key, "env_id": env_id, "pid": process.pid}

    def _drop(self, process: EnvProcess, key: str) -> None:
        """``key`` no longer in ``process``; a process left without envs is ended."""
        with self._share_lock:
            if key in process.envs:
                process.envs.remove(key)
            empty = not process.envs
            if empty:
                for processes in self._shared.values():
                    if process in processes:
                        processes.remove(process)
        if empty:
            process.kill()

    def close(self, key: str) -> dict[str, Any]:
        """End the env (its process, unless other envs share it); an env closed before is fine."""
        with self._lock:
            env = self._envs.pop(key, None)
            self._env_ids.pop(key, None)
            if env is not None:
                self._gone[key] = "it was closed"
        if env is None:
            if key in self._gone:
                return {"env": key, "closed": False}
            raise env_error("no_env", "no env %r in this sandbox" % key, env=key)
        if env.shared and len(env.envs) > 1:
            try:
                env.call({"op": "close", "s": key}, 30.0)
            except EnvError:
                pass  # the process is gone or stuck: its envs learn it on their next call
        self._drop(env, key)
        return {"env": key, "closed": True}

    def call(self, key: str, request: dict[str, Any], timeout: float | None) -> Any:
        """One request to one env; an env whose process died is dropped from the table (with the
        other envs of its process)."""
        env = self.get(key)
        try:
            return env.call(dict(request, s=key), timeout)
        except EnvError as exc:
            if exc.extra_info.get("kind") in ("env_died", "timeout"):
                self._forget(env)
            raise

    def _forget(self, process: EnvProcess) -> None:
        """Drop every env of a dead process."""
        with self._lock:
            for key in list(process.envs):
                if self._envs.get(key) is process:
                    del self._envs[key]
                    self._env_ids.pop(key, None)
                    self._gone[key] = process.dead or "its process ended"
        with self._share_lock:
            for processes in self._shared.values():
                if process in processes:
                    processes.remove(process)

    def list_ids(
        self, key: str | None, timeout: float | None, pythonpath: str | None = None
    ) -> Any:
        """The registered ids, asked of env ``key`` or of a short-lived process; with ``key``,
        also ``busy``: the envs of this sandbox whose process is serving a request."""
        if key is not None:
            answer = self.call(key, {"op": "list"}, timeout)
            return dict(answer, busy=self.busy()) if isinstance(answer, dict) else answer
        sock, pid = self._fork(pythonpath)
        env = EnvProcess("list", sock, pid)  # a short-lived process of its own
        try:
            return env.call({"op": "list"}, timeout)
        finally:
            env.kill()

    def batch(self, calls: list[dict[str, Any]], timeout: float | None) -> list[bytes]:
        """Run ``calls`` (``{env, op, ...}``) concurrently across envs; one result per call, as
        JSON text (``{"ok": ...}`` as the env's process wrote it, or ``{"error": {kind,
        message}}``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        results: list[bytes] = [b""] * len(calls)
        by_process: dict[int, tuple[EnvProcess, list[int]]] = {}
        for i, call in enumerate(calls):
            key = call.get("env")
            try:
                if not isinstance(key, str):
                    raise env_error(
                        "bad_request",
                        "calls[%d].env must be a string, got %s" % (i, json.dumps(key)),
                    )
                if call.get("op") not in ("reset", "step"):
                    raise env_error(
                        "bad_request",
                        "calls[%d].op must be 'reset' or 'step', got %s"
                        % (i, json.dumps(call.get("op"))),
                    )
                process = self.get(key)
            except EnvError as exc:
                results[i] = _json(_failure(exc))
                continue
            by_process.setdefault(id(process), (process, []))[1].append(i)
        sent: list[tuple[EnvProcess, list[int], int]] = []
        for process, indexes in by_process.values():  # the calls of each env in their order
            requests = [dict(calls[i], s=calls[i]["env"]) for i in indexes]
            for request in requests:
                request.pop("env", None)
            try:
                keys = frozenset(calls[i]["env"] for i in indexes)
                ticket = process.send({"op": "batch", "calls": requests, "split": True}, keys)
                sent.append((process, indexes, ticket))
            except EnvError as exc:
                for i in indexes:
                    results[i] = _json(_failure(exc))
        for process, indexes, ticket in sent:
            try:
                line = process.receive_line(ticket, deadline)
                pieces = line[1:].split(_SEPARATOR) if line[:1] == _SPLIT else None
                if pieces is None or len(pieces) != len(indexes):
                    if not line.startswith(_OK):  # the batch's own error
                        result_of(_error_line(line), process)
                    raise env_error(
                        "env_error",
                        "%s answered a batch of %d calls with %r"
                        % (process.describe(), len(indexes), line[:200]),
                    )
            except EnvError as exc:
                for i in indexes:
                    results[i] = _json(_failure(exc))
                continue
            for i, piece in zip(indexes, pieces):
                results[i] = piece if piece.startswith(_OK) else _json(_error_line(piece))
        for process, _indexes in by_process.values():
            if process.dead is not None:
                self._forget(process)
        return results

    def busy(self) -> list[str]:
        """The envs with a request sent to their process and its answer not yet read."""
        return sorted(key for key, p in list(self._envs.items()) if key in p.pending)

    def describe(self) -> dict[str, Any]:
        """``GET /env``: the envs (``busy``: serving a request) and the worker."""
        return {
            "envs": [
                {
                    "env": key,
                    "env_id": self._env_ids.get(key),
                    "pid": p.pid,
                    "busy": key in p.pending,
                    "shared": p.shared,
                }
                for key, p in list(self._envs.items())
            ],
            "workers": [
                dict(
                    w.hello,
                    pid=w.process.pid,
                    executable=w.python,
                    pythonpath=path,
                    alive=w.alive(),
                )
                for path, w in list(self._workers.items())
            ],
        }

    def close_all(self) -> None:
        """End every env and the worker (the rocklet's shutdown)."""
        with self._lock:
            self._closed = True
            envs, self._envs = list(self._envs.values()), {}
        for env in {id(e): e for e in envs}.values():
            env.kill()
        for worker in list(self._workers.values()):
            worker.control.close()  # the server returns at EOF
            try:
                worker.process.wait(2.0)
            except subprocess.TimeoutExpired:
                worker.process.kill()


def _failure(exc: EnvError) -> dict[str, Any]:
    return {"error": {"kind": exc.extra_info.get("kind", "env_error"), "message": exc.message}}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("ascii")


def _error_line(line: bytes) -> dict[str, Any]:
    """``{"error": {kind, message}}`` of a process's answer line that is not ``ok``."""
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        answer = {"error": {"kind": "env_error", "message": "unreadable answer %r" % line[:200]}}
    return {"error": _error_of(answer)}


def _error_of(answer: dict[str, Any]) -> dict[str, Any]:
    err = answer.get("error") or {}
    return {"kind": str(err.get("kind", "env_error")), "message": str(err.get("message", ""))}


def _fd_bytes(fd: int) -> bytes:
    import array

    return array.array("i", [fd]).tobytes()


def _tail(path: str, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            text = f.read().decode("utf-8", "replace").strip()
    except OSError:
        return "(no log)"
    return text or "(the worker wrote nothing)"
