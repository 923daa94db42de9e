"""The model service's routes and its ``serve`` entry point.

Routes (ROCK's): ``GET /health``, ``POST /v1/chat/completions``, ``POST /v1/agent/watch``
(``{"pid": n}``: ``SESSION_END`` once that process ends). rock's (local mode), for rock's SDK:
``GET /v1/rock/next``, ``POST /v1/rock/answer``, ``POST /v1/rock/end``, ``POST /v1/rock/wake``,
``GET /v1/rock/trajectory`` (see :mod:`.local`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any, Optional, Union

from rock.sdk.model.server import config as cfg
from rock.sdk.model.server import http
from rock.sdk.model.server.local import LocalBackend, SessionEnded
from rock.sdk.model.server.proxy import ForwardBackend, ReplayBackend, completion_as_stream
from rock.sdk.model.server.traj import SequentialCursor, TrajectoryRecorder

Backend = Union[LocalBackend, ForwardBackend, ReplayBackend]


async def _process_exit(pid: int) -> None:
    """Return once process ``pid`` has ended (a pidfd where the kernel has them: no polling)."""
    try:
        fd = os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(fd, _settle, done)
        try:
            await done
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        return
    while _alive(pid):  # noqa: ASYNC110 - no pidfd: look every 0.2 s
        await asyncio.sleep(0.2)


def _settle(done: asyncio.Future) -> None:
    if not done.done():
        done.set_result(None)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class App:
    """The routes over one backend."""

    def __init__(self, kind: str, backend: Backend) -> None:
        self.kind = kind
        self.backend = backend
        self.watched: dict = {}

    async def __call__(self, request: http.Request) -> http.Response:
        path, method = request.path.rstrip("/") or "/", request.method
        if path == "/health":
            return http.json_response({"status": "healthy", "type": self.kind})
        if path == "/v1/chat/completions" and method == "POST":
            return await self._chat(request)
        if path == "/v1/agent/watch" and method == "POST":
            return self._watch(request)
        if path.startswith("/v1/rock/") and isinstance(self.backend, LocalBackend):
            return await self._rock(path[len("/v1/rock/") :], request, self.backend)
        return http.error_response(404, f"no route {method} {request.path} ({self.kind} mode)")

    async def _chat(self, request: http.Request) -> http.Response:
        try:
            body = request.json()
        except ValueError:
            return http.error_response(400, "Request body is not valid JSON.")
        if not isinstance(body, dict):
            return http.error_response(400, "Request body must be a JSON object.")
        if not isinstance(self.backend, LocalBackend):
            return await self.backend.serve(body, request.headers)
        try:
            answer = await self.backend.chat(body)
        except SessionEnded:
            return http.error_response(500, "No response received from Roll process")
        if body.get("stream") and isinstance(answer, dict):
            return http.Response(200, completion_as_stream(answer), "text/event-stream")
        return http.json_response(answer)

    def _watch(self, request: http.Request) -> http.Response:
        try:
            pid = int((request.json() or {})["pid"])
        except (ValueError, KeyError, TypeError):
            return http.error_response(400, "Missing 'pid' in request body")
        if pid not in self.watched:
            self.watched[pid] = asyncio.get_running_loop().create_task(self._on_exit(pid))
        return http.json_response({"status": "watching", "pid": pid})

    async def _on_exit(self, pid: int) -> None:
        await _process_exit(pid)
        print(f"model service: agent process {pid} exited; SESSION_END", flush=True)
        if isinstance(self.backend, LocalBackend):
            self.backend.agent_exit = {"pid": pid, "time": time.time()}
            self.backend.end_session(f"agent process {pid} exited")

    async def _rock(self, name: str, request: http.Request, backend: LocalBackend) -> http.Response:
        if name == "next" and request.method == "GET":
            try:
                index = int(request.query.get("index", "1"))
                wait = min(float(request.query.get("wait", "20")), 300.0)
            except ValueError:
                return http.error_response(400, "index and wait must be numbers")
            found = await backend.next(index, wait)
            return http.Response(204) if found is None else http.json_response(found)
        if name == "answer" and request.method == "POST":
            return self._answer(request, backend)
        if name == "end" and request.method == "POST":
            reason = (request.json() or {}).get("reason") or "ended by the trainer"
            backend.end_session(str(reason))
            return http.json_response({"session_end": True})
        if name == "wake" and request.method == "POST":
            backend.wake()
            return http.json_response({"ok": True})
        if name == "channel" and request.method == "GET":
            try:
                first = int(request.query.get("index", "1"))
            except ValueError:
                return http.error_response(400, "index must be a number")
            return http.Takeover(lambda r, w: channel(backend, first, r, w))
        if name == "trajectory" and request.method == "GET":
            return http.json_response(backend.trajectory())
        return http.error_response(404, f"no route {request.method} {request.path}")

    def _answer(self, request: http.Request, backend: LocalBackend) -> http.Response:
        try:
            body = request.json() or {}
            index = int(body["index"])
            response = body["response"]
        except (ValueError, KeyError, TypeError):
            return http.error_response(400, 'the body must be {"index": n, "response": ...}')
        text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
        try:
            fresh = backend.answer(index, text)
        except ValueError as exc:
            return http.error_response(400, str(exc))
        return http.json_response({"index": index, "answered": fresh})


async def channel(
    backend: LocalBackend,
    first: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """rock's duplex channel (``GET /v1/rock/channel?index=n``): after the 200 head, the service
    writes one JSON line per call from ``n`` on (``{"index", "request_text"}``), then
    ``{"index", "session_end": true, "reason"}``; the trainer writes ``{"answer": n, "response":
    text}`` or ``{"end": reason}`` lines, unacknowledged (a bad one gets an ``{"error"}`` line).
    One connection per sandbox, no request per call."""

    async def push() -> None:
        index = first
        while True:
            found = await backend.next(index, 3600.0)
            if found is None:
                continue
            found.pop("request", None)  # the text says it all, parsed once by the trainer
            writer.write(json.dumps(found, ensure_ascii=False).encode("utf-8") + b"\n")
            await writer.drain()
            if found.get("session_end"):
                return
            index += 1

    pusher = asyncio.get_running_loop().create_task(push())
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                message = json.loads(line)
                if "answer" in message:
                    backend.answer(int(message["answer"]), str(message["response"]))
                elif "end" in message:
                    backend.end_session(str(message["end"] or "ended by the trainer"))
            except (ValueError, KeyError, TypeError) as exc:
                writer.write(json.dumps({"error": str(exc)}).encode("utf-8") + b"\n")
    finally:
        pusher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pusher


def make_backend(kind: str, config: cfg.ModelServiceConfig) -> Backend:
    if kind == "local":
        recorder = TrajectoryRecorder(cfg.TRAJ_FILE, append=cfg.traj_append_mode())
        return LocalBackend(cfg.LOG_FILE, recorder)
    if config.replay_file:
        return ReplayBackend(SequentialCursor.load(config.replay_file))
    return ForwardBackend(config, TrajectoryRecorder(config.recording_file or cfg.TRAJ_FILE))


async def run(kind: str, config: cfg.ModelServiceConfig, ready: Optional[Any] = None) -> None:
    """Serve until SIGTERM or SIGINT."""
    app = App(kind, make_backend(kind, config))
    server = await http.serve(app, config.host, config.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"model service ({kind}) on {config.host}:{config.port}, pid {os.getpid()}", flush=True)
    if ready is not None:
        ready()
    await stop.wait()
    server.close()
