"""``proxy`` mode: forward each ``/v1/chat/completions`` call to an inference server, record it.

The upstream is ``proxy_base_url`` (else ``proxy_rules[model]``, else ``proxy_rules["default"]``)
plus ``/chat/completions``. A connection error or an answer whose status is one of
``retryable_status_codes`` is tried again (``retry_attempts`` in all, ``retry_backoff`` seconds
doubling between); an upstream that does not answer within ``request_timeout`` seconds is a 504
(a stream: each chunk within it). A stream is passed on chunk by chunk as it comes and
aggregated into one ChatCompletion for the trajectory. ``replay_file`` serves a recorded
trajectory instead, call by call, with no upstream (404 once it is used up).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, Optional

from rock.sdk.model.server import http
from rock.sdk.model.server.config import ModelServiceConfig
from rock.sdk.model.server.traj import SequentialCursor, TrajectoryExhausted, TrajectoryRecorder

_PASSED_HEADERS = ("authorization", "api-key", "x-api-key", "openai-organization", "user-agent")


def sse_events(data: bytes) -> list[str]:
    """The ``data:`` payloads of complete SSE lines in ``data``."""
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            out.append(line[5:].strip())
    return out


class StreamAggregator:
    """Builds one ChatCompletion from a stream's chunks (content, reasoning, tool calls, usage)."""

    def __init__(self) -> None:
        self.base: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self._buffer = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for payload in sse_events(b"\n".join(complete)):
            if payload == "[DONE]" or not payload:
                continue
            try:
                self.add(json.loads(payload))
            except ValueError:
                continue

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self.base:
                self.base[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            slot = self.choices.setdefault(
                choice.get("index", 0), {"message": {"role": "assistant"}, "finish_reason": None}
            )
            delta = choice.get("delta") or {}
            message = slot["message"]
            for key, value in delta.items():
                if key == "tool_calls":
                    _merge_tool_calls(message.setdefault("tool_calls", []), value or [])
                elif isinstance(value, str) and key != "role":
                    message[key] = (message.get(key) or "") + value
                elif value is not None:
                    message[key] = value
            if choice.get("finish_reason"):
                slot["finish_reason"] = choice["finish_reason"]

    def result(self) -> dict[str, Any]:
        out = {**self.base, "object": "chat.completion"}
        out["choices"] = [
            {"index": i, "message": s["message"], "finish_reason": s["finish_reason"]}
            for i, s in sorted(self.choices.items())
        ]
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def _merge_tool_calls(calls: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    for delta in deltas:
        i = delta.get("index", len(calls))
        while len(calls) <= i:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        call = calls[i]
        if delta.get("id"):
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        for key in ("name", "arguments"):
            if function.get(key):
                call["function"][key] += function[key]


async def completion_as_stream(response: dict[str, Any]) -> AsyncIterator[bytes]:
    """A whole ChatCompletion as a stream: one chunk with each message, then ``[DONE]``."""
    chunk = {k: v for k, v in response.items() if k not in ("choices", "object")}
    chunk["object"] = "chat.completion.chunk"
    chunk["choices"] = [
        {
            "index": c.get("index", 0),
            "delta": c.get("message") or {},
            "finish_reason": c.get("finish_reason"),
        }
        for c in response.get("choices") or []
    ]
    yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8") + b"\n\n"
    yield b"data: [DONE]\n\n"


class ReplayBackend:
    """Answers from a recorded trajectory, in order."""

    def __init__(self, cursor: SequentialCursor) -> None:
        self.cursor = cursor

    async def serve(self, body: dict[str, Any], headers: dict[str, str]) -> http.Response:
        try:
            record = self.cursor.next(expected_model=body.get("model"))
        except TrajectoryExhausted as exc:
            return http.error_response(404, str(exc), "trajectory_exhausted")
        response = record.get("response")
        if record.get("status") not in (None, "success") or not isinstance(response, dict):
            return http.error_response(
                500, f"recorded call {self.cursor.position - 1} failed: {record.get('error')}"
            )
        if body.get("stream"):
            return http.Response(200, completion_as_stream(response), "text/event-stream")
        return http.json_response(response)


class ForwardBackend:
    """Forwards to the upstream with retries and a timeout, recording each call."""

    def __init__(self, config: ModelServiceConfig, recorder: Optional[TrajectoryRecorder]) -> None:
        self.config = config
        self.recorder = recorder

    def _base_url(self, model: Optional[str]) -> str:
        if self.config.proxy_base_url:
            return self.config.proxy_base_url
        rules = self.config.proxy_rules
        if model and model in rules:
            return rules[model]
        if "default" in rules:
            return rules["default"]
        raise LookupError(
            f"no upstream for model {model!r}: set --proxy-base-url or proxy_rules "
            f"(known: {sorted(rules)})"
        )

    async def _open(self, url: str, body: bytes, headers: dict[str, str]) -> Any:
        """The upstream's answer, tried again on a connection error or a retryable status;
        ``(answer, attempts)``. A timeout raises :class:`asyncio.TimeoutError`."""
        attempts = max(1, self.config.retry_attempts)
        delay = self.config.retry_backoff
        for attempt in range(1, attempts + 1):
            try:
                answer = await http.request(
                    "POST", url, body, headers, timeout=self.config.request_timeout
                )
            except asyncio.TimeoutError:  # noqa: UP041 - an OSError on 3.11: not retried
                raise
            except (OSError, ConnectionError) as exc:
                if attempt >= attempts:
                    raise ConnectionError(f"{url}: {exc} (after {attempt} attempts)") from exc
            else:
                if answer.status not in self.config.retryable_status_codes or attempt >= attempts:
                    return answer, attempt
                answer.close()
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    async def serve(self, body: dict[str, Any], headers: dict[str, str]) -> http.Response:
        start = time.time()
        model = body.get("model")
        try:
            url = self._base_url(model).rstrip("/") + "/chat/completions"
        except LookupError as exc:
            return http.error_response(400, str(exc), "invalid_request_error")
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8")
        sent = {k: v for k, v in headers.items() if k in _PASSED_HEADERS}
        try:
            answer, attempts = await self._open(url, raw, sent)
        except asyncio.TimeoutError:  # noqa: UP041 - Python 3.8+ in the image
            self._record(body, None, "failure", start, "timeout", attempts=None)
            return http.error_response(
                504, f"Upstream timed out after {self.config.request_timeout} s"
            )
        except ConnectionError as exc:
            self._record(body, None, "failure", start, str(exc), attempts=None)
            return http.error_response(502, f"Upstream request failed: {exc}")
        content_type = answer.headers.get("content-type", "application/json")
        if body.get("stream") and answer.status < 400:
            return http.Response(
                answer.status, self._relay(answer, body, start, attempts), content_type
            )
        try:
            data = await answer.read()
        except asyncio.TimeoutError:  # noqa: UP041 - Python 3.8+ in the image
            self._record(body, None, "failure", start, "timeout", attempts=attempts)
            return http.error_response(
                504, f"Upstream timed out after {self.config.request_timeout} s"
            )
        try:
            parsed: Any = json.loads(data.decode("utf-8"))
        except ValueError:
            parsed = data.decode("utf-8", "replace")
        ok = answer.status < 400
        error = None if ok else f"upstream_status={answer.status}"
        self._record(body, parsed, "success" if ok else "failure", start, error, attempts=attempts)
        return http.Response(answer.status, data, content_type)

    async def _relay(
        self, answer: Any, body: dict[str, Any], start: float, attempts: int
    ) -> AsyncIterator[bytes]:
        aggregate = StreamAggregator()
        status, error = "success", None
        try:
            async for chunk in answer.iter_chunks():
                aggregate.feed(chunk)
                yield chunk
        except asyncio.TimeoutError:  # noqa: UP041 - Python 3.8+ in the image
            status, error = "failure", "timeout while streaming"
            yield b'data: {"error": {"message": "upstream timed out", "code": 504}}\n\n'
        except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
            status, error = "failure", f"upstream broke off: {exc!r}"
        aggregate.feed(b"\n")
        self._record(body, aggregate.result(), status, start, error, attempts=attempts)

    def _record(
        self,
        body: Any,
        response: Any,
        status: str,
        start: float,
        error: Optional[str],
        attempts: Optional[int],
    ) -> None:
        if self.recorder is not None:
            self.recorder.record(
                request=body,
                response=response,
                status=status,
                start_time=start,
                end_time=time.time(),
                error=error,
                attempts=attempts,
            )
