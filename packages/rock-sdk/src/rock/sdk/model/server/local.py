"""``local`` mode: the agent's model calls are handed to the trainer, which answers them.

ROCK's file protocol is kept line for line: each call is appended to the communication file as
``LLM_REQUEST_START{request}LLM_REQUEST_END{"timestamp": ms, "index": n}`` (``n`` from 1), and
the call is answered by a line ``LLM_RESPONSE_START{response}LLM_RESPONSE_END{..."index": n}``
that anyone may append (ROCK's ``rock model-service anti-call-llm``, run in the sandbox, does).
``SESSION_END`` ends the episode: calls waiting, and any later call, fail with 500 (ROCK's
"No response received from Roll process").

rock's faster path for its own SDK, beside the file (which it writes as well, so ROCK's readers
see the same record): ``GET /v1/rock/next?index=n&wait=s`` holds until call ``n`` is made (or
the session ends: ``{"session_end": true}``; nothing within ``wait``: 204), ``POST
/v1/rock/answer`` answers a call at once, ``POST /v1/rock/end`` ends the session, ``GET
/v1/rock/trajectory`` gives every call. A response written to the file by someone else is
noticed within 0.1 s (ROCK's interval), or at once after ``POST /v1/rock/wake``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from rock.sdk.model.server import config as cfg
from rock.sdk.model.server.traj import TrajectoryRecorder


class SessionEnded(Exception):
    """The session ended before the call was answered."""


class Call:
    """One model call of the agent's and what became of it."""

    def __init__(self, index: int, request: Any, request_text: str) -> None:
        self.index = index
        self.request = request
        self.request_text = request_text
        self.response: Any = None
        self.status = "pending"
        self.start_time = time.time()
        self.end_time: Optional[float] = None
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()

    def as_dict(self) -> dict[str, Any]:
        end = self.end_time
        return {
            "index": self.index,
            "request": self.request,
            "response": self.response,
            "status": self.status,
            "start_time": self.start_time,
            "end_time": end,
            "response_time": None if end is None else end - self.start_time,
            "model": self.request.get("model") if isinstance(self.request, dict) else None,
            "stream": bool(self.request.get("stream")) if isinstance(self.request, dict) else False,
            "usage": self.response.get("usage") if isinstance(self.response, dict) else None,
        }


class LocalBackend:
    """The calls of one session, the communication file and the trainer's waits."""

    def __init__(
        self,
        log_file: str = cfg.LOG_FILE,
        recorder: Optional[TrajectoryRecorder] = None,
        poll_interval: float = cfg.POLLING_INTERVAL_SECONDS,
    ) -> None:
        self.log_file = log_file
        self.recorder = recorder
        self.poll_interval = poll_interval
        self.calls: dict[int, Call] = {}
        self.session_ended = False
        self.end_reason: Optional[str] = None
        self.agent_exit: Optional[dict[str, Any]] = None
        self._counter = 0
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._offset = 0
        self._rest = b""
        self._watcher: Optional[asyncio.Task] = None
        path = Path(log_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        path.touch()

    # -- the agent's side ------------------------------------------------------------------

    async def chat(self, body: Any) -> Any:
        """Record the call, wait for its answer and return it; :class:`SessionEnded` if none."""
        self._counter += 1
        index = self._counter
        text = json.dumps(body, ensure_ascii=False)
        call = Call(index, body, text)
        self.calls[index] = call
        meta = json.dumps({"timestamp": int(time.time() * 1000), "index": index})
        self._append(f"{cfg.REQUEST_START_MARKER}{text}{cfg.REQUEST_END_MARKER}{meta}\n")
        self._notify()
        if self.session_ended:
            self._finish(call, None, "session_end")
            raise SessionEnded()
        self._ensure_watcher()
        try:
            return await call.future
        except asyncio.CancelledError:
            if not call.future.done():
                self._finish(call, None, "cancelled")
            raise

    # -- the trainer's side ----------------------------------------------------------------

    async def next(self, index: int, wait: float) -> Optional[dict[str, Any]]:
        """Call ``index`` once it is made, ``{"session_end": True}`` once the session ended
        without it, or ``None`` after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            call = self.calls.get(index)
            if call is not None:
                return {"index": index, "request": call.request, "request_text": call.request_text}
            if self.session_ended:
                return {"index": index, "session_end": True, "reason": self.end_reason}
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:  # noqa: UP041 - Python 3.8+ in the image
                return None

    def answer(self, index: int, response_text: str, write: bool = True) -> bool:
        """Answer call ``index``; ``False`` when it was answered already. ``ValueError``: no such
        call, or a response that is not JSON."""
        call = self.calls.get(index)
        if call is None:
            raise ValueError(f"no model call {index} (calls made: {self._counter})")
        response = json.loads(response_text)
        if call.future.done():
            return False
        if write:
            meta = json.dumps({"timestamp": int(time.time() * 1000), "index": index})
            self._append(
                f"{cfg.RESPONSE_START_MARKER}{response_text}{cfg.RESPONSE_END_MARKER}{meta}\n"
            )
        self._finish(call, response, "success")
        call.future.set_result(response)
        return True

    def end_session(self, reason: str, write: bool = True) -> None:
        """End the session: waiting calls fail, later ones too."""
        if self.session_ended:
            return
        if write:
            self._append(f"{cfg.SESSION_END_MARKER}\n")
        self.session_ended = True
        self.end_reason = reason
        for call in self.calls.values():
            if not call.future.done():
                self._finish(call, None, "session_end")
                call.future.set_exception(SessionEnded())
        self._notify()

    def trajectory(self) -> dict[str, Any]:
        return {
            "calls": [self.calls[i].as_dict() for i in sorted(self.calls)],
            "session_end": self.session_ended,
            "reason": self.end_reason,
            "agent_exit": self.agent_exit,
        }

    def wake(self) -> None:
        """Read the file now (someone appended a response or ``SESSION_END``)."""
        self._wake.set()
        self._ensure_watcher()

    # -- the file ------------------------------------------------------------------------------

    def _append(self, line: str) -> None:
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write(line)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _finish(self, call: Call, response: Any, status: str) -> None:
        call.response = response
        call.status = status
        call.end_time = time.time()
        if self.recorder is not None:
            self.recorder.record_call(call.as_dict())

    def _pending(self) -> bool:
        return any(not c.future.done() for c in self.calls.values())

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        # ROCK's look at the file every 0.1 s, only while a call waits for its answer.
        while True:
            self._read_new()
            if not self._pending() or self.session_ended:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except asyncio.TimeoutError:  # noqa: UP041 - Python 3.8+ in the image
                pass
            self._wake.clear()

    def _read_new(self) -> None:
        try:
            size = os.stat(self.log_file).st_size
        except OSError:
            return
        if size <= self._offset:
            return
        with open(self.log_file, "rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for raw in lines:
            self._take_line(raw.decode("utf-8", "replace"))

    def _take_line(self, line: str) -> None:
        if cfg.RESPONSE_START_MARKER in line and cfg.RESPONSE_END_MARKER in line:
            start = line.find(cfg.RESPONSE_START_MARKER) + len(cfg.RESPONSE_START_MARKER)
            end = line.find(cfg.RESPONSE_END_MARKER)
            try:
                meta = json.loads(line[end + len(cfg.RESPONSE_END_MARKER) :].strip() or "{}")
                self.answer(int(meta["index"]), line[start:end], write=False)
            except (ValueError, KeyError, TypeError) as exc:
                print(f"model service: skipped a response line ({exc}): {line[:200]}", flush=True)
        elif line.strip() == cfg.SESSION_END_MARKER:
            self.end_session("SESSION_END written to the file", write=False)


def trajectory_lines(calls: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in calls)
