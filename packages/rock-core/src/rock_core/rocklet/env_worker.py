"""The process an environment runs in: a fork server that pre-imports GEM, and one forked child per env.

Run by the rocklet as a script with the image's ``python3`` and its site-packages (never
inside the rocklet's own process, which runs with ``-I -S``)::

    python3 env_worker.py CONTROL_FD

Standard library only at import; ``gem`` (package ``gem-llm``) is imported by :func:`serve`.

Why a fork server: ``import gem`` pulls numpy and GEM's registry; importing it once and forking
makes a new env cost a few milliseconds and lets every env share those pages (proportional set
size). GEM's ``reset(seed)`` seeds the process-global ``random`` and ``numpy.random``
generators, and most games draw from them; so an env has a process of its own, or shares one
(the rocklet's ``share``) with its generator states kept apart: each env's states are put in
place before its call and taken back when another env of the process is called, so a seed gives
the same trajectory as alone, whatever the other envs of the process draw meanwhile.

Control channel (``CONTROL_FD``, a unix stream socket from the rocklet): the server first
writes one JSON line, ``{"ready": true, "gem": "0.1.0", "python": "3.11.2"}`` or ``{"ready":
false, "kind", "message"}``. Then each message from the rocklet is one byte ``b"s"`` carrying
one file descriptor (``SCM_RIGHTS``): a socket for a new env. The server forks; the child
serves that socket until it closes.

Env channel (one socket per process): newline-delimited JSON both ways. The child first writes
``{"pid": N}``; then for each request ``{"op": "make"|"reset"|"step"|"close"|"list", "s": KEY,
...}`` it answers ``{"ok": result}`` or ``{"error": {"kind", "message", "traceback"}}``, in
order. ``s`` names the env in the process (default ``""``): a ``make`` adds it, a ``close`` drops
it. ``{"op": "batch", "calls": [request, ...]}`` runs the calls in their order and answers
``{"ok": [answer, ...]}``, one answer per call; with ``"split": true`` the line is ``\x1d`` and
the answers apart by ``\x1e`` instead (the rocklet passes them on without reading them).

Error kinds: ``unknown_env`` (the id is not registered; the message lists close matches),
``missing_dependency`` (a Python package the env needs is not installed), ``missing_data``
(data the env needs is not available offline: NLTK's ``words`` corpus, a Hugging Face
dataset), ``no_env`` (reset/step before make), ``episode_ended`` (a step after the episode
ended: call reset), ``bad_request``, ``env_error`` (anything the env itself raised).
"""

from __future__ import annotations

import array
import json
import os
import random
import socket
import sys
import traceback

if __package__:
    from .env_generators import NumpyGlobal, RandomGlobal
else:  # run as a script: the rocklet writes env_generators.py beside it
    from env_generators import NumpyGlobal, RandomGlobal  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Seeds are what GEM accepts: non-negative integers numpy can take.
_MAX_SEED = 2**32 - 1

#: A split batch answer (``{"op": "batch", "split": true}``): ``SPLIT`` then each call's answer
#: line, apart by ``SEPARATOR``. Neither byte occurs in an answer: :func:`dumps` writes ASCII
#: JSON, where control characters only appear escaped.
SPLIT = b"\x1d"
SEPARATOR = b"\x1e"


class EnvFailure(Exception):
    """A failure with a kind the rocklet passes on (see the module's docstring)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# -- GEM, made quiet and offline -------------------------------------------------------------


def _stub_reasoning_gym() -> None:
    """``gem.envs`` imports ``reasoning_gym`` unconditionally; a games-only runtime leaves it out.

    Without it the ``rg:*`` ids are simply not registered (its factory lists no datasets).
    """
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        import types

        stub = types.ModuleType("reasoning_gym")
        stub.factory = types.SimpleNamespace(DATASETS={})  # type: ignore[attr-defined]
        stub.__rock_stub__ = True  # type: ignore[attr-defined]
        sys.modules["reasoning_gym"] = stub


def _patch_nltk(nltk: Any) -> None:
    """GEM's word games call ``nltk.download("words")`` in their constructor, which always asks
    the network for NLTK's index (a stall offline). Answer from the local data instead, and fail
    at once with the reason when the corpus is not there."""

    def download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        name = str(info_or_id)
        for where in ("corpora/%s" % name, "corpora/%s.zip" % name, name):
            try:
                nltk.data.find(where)
                return True
            except LookupError:
                continue
        raise EnvFailure(
            "missing_data",
            "NLTK data %r is not available offline (searched %s); put the corpus under a directory "
            "named in NLTK_DATA in the sandbox's image" % (name, ", ".join(nltk.data.path)),
        )

    nltk.download = download


class _NltkHook:
    """Patches ``nltk`` when something first imports it (importing it costs 0.2-0.4 s, and only
    the word games need it)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "nltk":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("nltk")
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch_nltk(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _offline_nltk() -> None:
    if "nltk" in sys.modules:
        _patch_nltk(sys.modules["nltk"])
    else:
        sys.meta_path.insert(0, _NltkHook())


def import_gem() -> Any:
    """Import ``gem`` with its side effects undone: GEM's ``logging.basicConfig(level=INFO)``
    would make every library in the process log at INFO; dataset hubs are told to stay offline."""
    import logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    _stub_reasoning_gym()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import gem

    root.handlers[:] = handlers
    root.setLevel(level if level != logging.NOTSET else logging.WARNING)
    _offline_nltk()
    return gem


def _registry() -> dict[str, Any]:
    from gem.envs.registration import ENV_REGISTRY

    registry: dict[str, Any] = ENV_REGISTRY
    return registry


def _unknown(env_id: str) -> EnvFailure:
    import difflib

    ids = sorted(_registry())
    close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.6)
    if not close:  # a family or a name without its difficulty: game:Sokoban-v0
        close = [i for i in ids if i.startswith(env_id) or env_id.lower() in i.lower()][:5]
    hint = ("; close matches: %s" % ", ".join(close)) if close else ""
    return EnvFailure(
        "unknown_env",
        "env_id %r is not a registered GEM environment%s (%d ids registered)"
        % (env_id, hint, len(ids)),
    )


#: GEM envs whose constructor ends by starting an episode (``self.reset()``) nobody sees (rock's
#: make answers no observation): Sokoban's unseeded room, retried until solvable (seconds for
#: ``-hard``, up to a minute for ``-random``). See :class:`EnvSession`.
FIRST_RESET_DEFERRED = frozenset({"gem.envs.game_env.sokoban:SokobanEnv"})


def _deferred_class(env_id: str) -> Any:
    """The class of ``env_id`` when its constructor's episode is deferred, else ``None``."""
    entry_point = getattr(_registry()[env_id], "entry_point", None)
    if entry_point not in FIRST_RESET_DEFERRED:
        return None
    import importlib

    module, _, name = str(entry_point).partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls if "reset" in vars(cls) else None


def _construct(gem: Any, env_id: str, kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """``(env, deferred)``: ``gem.make``, with a deferred class's own reset skipped meanwhile."""
    cls = _deferred_class(env_id)
    if cls is None:
        return gem.make(env_id, **kwargs), False
    reset = vars(cls)["reset"]
    cls.reset = lambda self, seed=None: ("", {})
    try:
        return gem.make(env_id, **kwargs), True
    finally:
        cls.reset = reset


def make_env(gem: Any, env_id: str, kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """``(env, deferred)``: ``gem.make(env_id, **kwargs)`` with its failures sorted into kinds;
    ``deferred``: the env's first episode is not started yet (:data:`FIRST_RESET_DEFERRED`)."""
    if env_id not in _registry():
        raise _unknown(env_id)
    try:
        return _construct(gem, env_id, kwargs)
    except EnvFailure:
        raise
    except ImportError as exc:
        import re

        text = "%s %s" % (exc, exc.__cause__ or "")
        found = re.search(r"No module named '([^']+)'", text)
        missing = found.group(1) if found else (getattr(exc, "name", None) or "?")
        raise EnvFailure(
            "missing_dependency",
            "env %r needs the Python package %r, which is not installed where the env runs (%s)"
            % (env_id, missing.split(".")[0], str(exc).strip()),
        ) from None
    except LookupError as exc:
        raise EnvFailure(
            "missing_data", "env %r needs data that is not available offline: %s" % (env_id, exc)
        ) from None
    except (ConnectionError, OSError) as exc:
        if (
            type(exc).__name__
            in ("ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError")
            or "offline" in str(exc).lower()
        ):
            raise EnvFailure(
                "missing_data",
                "env %r needs a dataset that is not available offline: %s" % (env_id, exc),
            ) from None
        raise


# -- one env -------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """numpy scalars and arrays as plain Python values (GEM's games mostly return those already)."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def dumps(obj: Any) -> bytes:
    """One protocol line."""
    return (
        json.dumps(obj, default=_jsonable, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        + b"\n"
    )


def _seed_error(seed: Any) -> EnvFailure | None:
    if seed is None or (type(seed) is int and 0 <= seed <= _MAX_SEED):
        return None
    return EnvFailure(
        "bad_request",
        "seed must be an integer from 0 to %d or null, got %s" % (_MAX_SEED, json.dumps(seed)),
    )


class EnvSession:
    """One env in this process: make, reset, step, and the episode's end.

    An env of :data:`FIRST_RESET_DEFERRED` starts its first episode at its first reset, or at a
    step before any reset (then with the ``seed`` its make's kwargs gave, else unseeded).
    """

    def __init__(self, gem: Any) -> None:
        self.gem = gem
        self.env: Any = None
        self.env_id: str | None = None
        self.ended: tuple[bool, bool] | None = None
        self.turn = 0
        #: ``(seed,)`` while the env's first episode is deferred.
        self.first: tuple[int | None] | None = None

    def handle(self, request: dict[str, Any]) -> Any:
        """The answer to one request (raises :class:`EnvFailure`)."""
        op = request.get("op")
        if op == "make":
            env_id = request.get("env_id")
            if not isinstance(env_id, str) or not env_id.strip():
                raise EnvFailure(
                    "bad_request", "env_id must be a non-empty string, got %s" % json.dumps(env_id)
                )
            kwargs = request.get("kwargs") or {}
            if not isinstance(kwargs, dict):
                raise EnvFailure(
                    "bad_request", "kwargs must be an object, got %s" % json.dumps(kwargs)
                )
            seed = kwargs.get("seed")
            self.env, deferred = make_env(self.gem, env_id, kwargs)
            self.first = ((None if _seed_error(seed) else seed),) if deferred else None
            self.env_id = env_id
            self.ended = None
            self.turn = 0
            return {"env_id": env_id}
        if op == "list":
            return {"env_id": sorted(_registry())}
        if self.env is None:
            raise EnvFailure("no_env", "no env was made in this process yet")
        if op == "reset":
            seed = request.get("seed")
            error = _seed_error(seed)
            if error is not None:
                raise error
            observation, info = self.env.reset(seed=seed)
            self.first = None
            self.ended = None
            self.turn = 0
            return {"observation": observation, "info": info}
        if op == "step":
            action = request.get("action")
            if not isinstance(action, str):
                raise EnvFailure(
                    "bad_request", "action must be a string, got %s" % json.dumps(action)
                )
            if self.ended is not None:
                raise EnvFailure(
                    "episode_ended",
                    "the episode of env %r ended at turn %d (terminated=%s, truncated=%s); call reset() before step()"
                    % (
                        self.env_id,
                        self.turn,
                        json.dumps(self.ended[0]),
                        json.dumps(self.ended[1]),
                    ),
                )
            if self.first is not None:  # the deferred first episode
                self.env.reset(seed=self.first[0])
                self.first = None
            observation, reward, terminated, truncated, info = self.env.step(action)
            self.turn += 1
            if terminated or truncated:
                self.ended = (bool(terminated), bool(truncated))
            return {
                "observation": observation,
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "info": info,
            }
        raise EnvFailure("bad_request", "unknown op %s" % json.dumps(op))


class ProcessEnvs:
    """The envs of one process, each with its own generator states (``random``, ``numpy``)."""

    def __init__(self, gem: Any) -> None:
        self.gem = gem
        self.sessions: dict[str, EnvSession] = {}
        self.states: dict[str, tuple[Any, Any]] = {}
        #: The env whose states the process-global generators hold now.
        self.owner: str | None = None
        np = sys.modules.get("numpy")
        self.numpy = NumpyGlobal(np) if np is not None else None
        self.random = RandomGlobal()
        self.entered: Any = None  # numpy's state as put at the owner's turn

    def _switch(self, key: str) -> None:
        """Put ``key``'s generator states in place (a new env's: fresh ones), keeping the
        previous owner's."""
        if self.owner == key:
            return
        numpy = self.numpy
        if self.owner is not None and self.owner in self.sessions:
            taken = numpy.take(self.entered) if numpy is not None else None
            self.states[self.owner] = (self.random.take(), taken)
        states = self.states.pop(key, None)
        if states is None:
            _reseed()
            self.entered = numpy.take(None) if numpy is not None else None
        else:
            self.random.put(states[0])
            if numpy is not None:
                numpy.put(states[1])
            self.entered = states[1]
        self.owner = key

    def handle(self, request: dict[str, Any]) -> Any:
        """The answer to one request (raises :class:`EnvFailure`)."""
        op = request.get("op")
        key = request.get("s", "")
        if not isinstance(key, str):
            raise EnvFailure("bad_request", "s must be a string, got %s" % json.dumps(key))
        if op == "list":
            return {"env_id": sorted(_registry())}
        if op == "close":
            closed = self.sessions.pop(key, None) is not None
            self.states.pop(key, None)
            if self.owner == key:
                self.owner = None
            return {"closed": closed}
        session = self.sessions.get(key)
        if op == "make":
            if session is None:
                session = EnvSession(self.gem)
            self._switch(key)
            try:
                result = session.handle(request)
            except BaseException:
                if key not in self.sessions and self.owner == key:
                    self.owner = None
                raise
            self.sessions[key] = session
            return result
        if session is None:
            if op in ("reset", "step"):
                raise EnvFailure(
                    "no_env", "no env %s was made in this process yet" % json.dumps(key)
                )
            raise EnvFailure("bad_request", "unknown op %s" % json.dumps(op))
        self._switch(key)
        return session.handle(request)

    def answer(self, request: Any) -> bytes:
        """One request's answer line (without its newline)."""
        try:
            if not isinstance(request, dict):
                raise EnvFailure("bad_request", "a request must be a JSON object")
            if request.get("op") == "batch":
                calls = request.get("calls")
                if not isinstance(calls, list):
                    raise EnvFailure("bad_request", "calls must be a list")
                answers = [self.answer(call) for call in calls]
                if request.get(
                    "split"
                ):  # the answers apart, for the rocklet to pass on as they are
                    return SPLIT + SEPARATOR.join(answers)
                return b'{"ok":[' + b",".join(answers) + b"]}"
            answer: dict[str, Any] = {"ok": self.handle(request)}
        except EnvFailure as exc:
            answer = {"error": {"kind": exc.kind, "message": exc.message, "traceback": []}}
        except Exception as exc:  # noqa: BLE001 - the env's own failure, reported to the caller
            answer = {
                "error": {
                    "kind": "env_error",
                    "message": "%s: %s" % (type(exc).__name__, exc),
                    "traceback": traceback.format_exc().splitlines(),
                }
            }
        try:
            return dumps(answer)[:-1]
        except (TypeError, ValueError) as exc:
            return dumps(
                {
                    "error": {
                        "kind": "env_error",
                        "message": "the env's answer is not JSON: %s" % exc,
                        "traceback": [],
                    }
                }
            )[:-1]


def serve_env(gem: Any, conn: socket.socket) -> None:
    """Serve one process's socket until the rocklet closes it (runs in the forked child)."""
    rfile = conn.makefile("rb")
    conn.sendall(dumps({"pid": os.getpid()}))
    envs = ProcessEnvs(gem)
    for line in rfile:
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = exc
        if isinstance(request, ValueError):
            data = dumps(
                {"error": {"kind": "bad_request", "message": str(request), "traceback": []}}
            )
        else:
            data = envs.answer(request) + b"\n"
        conn.sendall(data)


# -- the fork server ---------------------------------------------------------------------------


def _reseed() -> None:
    """A forked child starts with its parent's generator states; give it its own (an unseeded
    reset must not replay another env's episode)."""
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(int.from_bytes(os.urandom(4), "little"))


def _child(gem: Any, control: socket.socket, fd: int) -> None:
    import signal

    code = 0
    try:
        control.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an env may run and wait for subprocesses
        _reseed()
        conn = socket.socket(fileno=fd)
        serve_env(gem, conn)
    except BaseException:  # noqa: BLE001 - a child never returns into the server's loop
        code = 1
    finally:
        os._exit(code)


def serve(control_fd: int) -> int:
    """The fork server's loop on ``control_fd``; returns when the rocklet closes the channel."""
    import signal

    control = socket.socket(fileno=control_fd)
    # stdout belongs to nobody: GEM and games print; keep it off any channel.
    sys.stdout = sys.stderr
    try:
        gem = import_gem()
        try:
            import numpy  # noqa: F401 - imported here so children share its pages
        except ImportError:
            pass

        hello: dict[str, Any] = {
            "ready": True,
            "gem": getattr(gem, "__version__", None) or _dist_version("gem-llm"),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "ids": len(_registry()),
        }
    except Exception as exc:  # noqa: BLE001 - reported to the rocklet as the reason
        kind = "missing_dependency" if isinstance(exc, ImportError) else "env_error"
        hello = {
            "ready": False,
            "kind": kind,
            "python": "%d.%d" % sys.version_info[:2],
            "message": "cannot import GEM (package gem-llm) with %s (Python %d.%d): %s: %s"
            % (sys.executable, sys.version_info[0], sys.version_info[1], type(exc).__name__, exc),
        }
        control.sendall(dumps(hello))
        return 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    import gc

    gc.collect()
    gc.freeze()  # what is imported now stays shared with the children (no collector writes)
    control.sendall(dumps(hello))
    fds = array.array("i")
    while True:
        try:
            msg, ancdata, flags, addr = control.recvmsg(1, socket.CMSG_SPACE(fds.itemsize))
        except InterruptedError:
            continue
        if not msg:
            return 0
        received: list[int] = []
        for cmsg_level, cmsg_type, data in ancdata:
            if cmsg_level == socket.SOL_SOCKET and cmsg_type == socket.SCM_RIGHTS:
                chunk = array.array("i")
                chunk.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
                received.extend(chunk)
        for fd in received:
            pid = os.fork()
            if pid == 0:
                _child(gem, control, fd)
            os.close(fd)


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
