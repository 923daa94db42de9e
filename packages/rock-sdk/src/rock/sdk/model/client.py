"""ROCK's ``ModelClient``: the trainer's side of ``local`` mode through the communication file,
as ``rock model-service anti-call-llm`` runs it inside the sandbox.

``anti_call_llm(index, last_response)``: with ``index`` 0, wait for the agent's first call and
return its request; otherwise append ``last_response`` as the answer to call ``index`` and wait
for call ``index + 1``. Returns the request's JSON text, or ``"SESSION_END"``. rock looks at the
file every 50 ms (ROCK: every second) and, after writing an answer, tells the service to read it
at once (``POST /v1/rock/wake``) instead of at its next 0.1 s look.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Optional

from rock.sdk.model.server import config as cfg

POLL_SECONDS = 0.05


class ModelClient:
    def __init__(self, log_file_name: Optional[str] = None, port: Optional[int] = None) -> None:
        self.log_file = log_file_name if log_file_name is not None else cfg.LOG_FILE
        self.port = port or int(os.environ.get("ROCK_MODEL_SERVICE_PORT", "8080"))

    async def anti_call_llm(self, index: int, last_response: Optional[str] = None) -> str:
        if index < 0:
            raise ValueError("index must be greater than 0")
        if index == 0:
            if last_response is not None:
                raise ValueError("last_response must be None when index is 0")
            await self.wait_for_first_request()
            return await self.pop_request(1)
        if last_response is None:
            raise ValueError("last_response must not be None when index is greater than 0")
        await self.push_response(index=index, last_response=last_response)
        return await self.pop_request(index + 1)

    async def push_response(self, index: int, last_response: str) -> None:
        last = self._last_response_index()
        if last is not None and index < last:
            raise ValueError(f"index {index} must not be smaller than last_response_index {last}")
        if last == index:
            return  # answered already
        meta = json.dumps({"timestamp": int(time.time() * 1000), "index": index})
        with open(self.log_file, "a", encoding="utf-8") as f:  # noqa: ASYNC230 - one line
            f.write(f"{cfg.RESPONSE_START_MARKER}{last_response}{cfg.RESPONSE_END_MARKER}{meta}\n")
        await asyncio.get_running_loop().run_in_executor(None, self._wake)

    def _wake(self) -> None:
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.port}/v1/rock/wake", data=b"{}", method="POST"
            )
            urllib.request.urlopen(req, timeout=2).close()
        except OSError:
            pass  # the service reads the file at its next look anyway

    async def pop_request(self, index: int) -> str:
        while True:
            text, meta = self._last_request()
            if text == cfg.SESSION_END_MARKER:
                return cfg.SESSION_END_MARKER
            if meta.get("index") == index:
                return text
            await asyncio.sleep(POLL_SECONDS)

    async def wait_for_first_request(self) -> None:
        while True:
            path = Path(self.log_file)
            if path.exists() and path.stat().st_size > 0:  # noqa: ASYNC240 - ROCK's look
                return
            await asyncio.sleep(POLL_SECONDS)

    def _lines(self) -> list:
        try:
            with open(self.log_file, encoding="utf-8") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def _last_request(self) -> tuple[str, dict]:
        for line in reversed(self._lines()):
            if cfg.SESSION_END_MARKER in line and cfg.REQUEST_START_MARKER not in line:
                return cfg.SESSION_END_MARKER, {}
            if cfg.REQUEST_START_MARKER in line:
                return self.parse_request_line(line)
        return "", {}

    def _last_response_index(self) -> Optional[int]:
        for line in reversed(self._lines()):
            if cfg.RESPONSE_START_MARKER in line:
                return int(self.parse_response_line(line)[1]["index"])
        return None

    @staticmethod
    def parse_request_line(line: str) -> tuple[str, dict]:
        if cfg.SESSION_END_MARKER in line and cfg.REQUEST_START_MARKER not in line:
            return cfg.SESSION_END_MARKER, {}
        head, meta = line.split(cfg.REQUEST_END_MARKER, 1)
        return head.split(cfg.REQUEST_START_MARKER, 1)[1], json.loads(meta)

    @staticmethod
    def parse_response_line(line: str) -> tuple[str, dict]:
        head, meta = line.split(cfg.RESPONSE_END_MARKER, 1)
        return head.split(cfg.RESPONSE_START_MARKER, 1)[1], json.loads(meta)
