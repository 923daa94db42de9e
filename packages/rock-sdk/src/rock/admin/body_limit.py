"""The admin's limit on request bodies: a pure ASGI layer, so it sees the bytes before any parsing.

A body above its limit (``max_json_body``, 10 MiB by default; ``max_upload_body``, 100 MiB, for
``/upload``) is answered with HTTP 413 and ROCK's ``Failed`` envelope, whether its
``Content-Length`` says so or a chunked body grows past it while a route reads it.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rock.admin.envelope import failure
from rock.admin.metrics import Metrics
from rock_core.errors import PayloadTooLarge

__all__ = ["BodyLimit", "BodyTooLarge", "too_large_response"]


class BodyTooLarge(Exception):
    """The request body passed its limit (``limit`` bytes) while it was being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than the limit of {limit} bytes")
        self.limit = limit


def too_large_response(limit: int) -> Response:
    """The HTTP 413 answer to a body above ``limit`` bytes."""
    exc = PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")
    response = failure("payload too large", exc)
    response.status_code = 413
    return response


class BodyLimit:
    """Answers HTTP 413 when a request body passes its limit (checked on ``Content-Length`` and
    again while reading, for chunked bodies); ``upload_paths`` get ``upload_limit``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        json_limit: int,
        upload_limit: int,
        upload_paths: set[str],
        metrics: Metrics,
        known_paths: set[str] | None = None,
    ) -> None:
        self.app = app
        # Requests are counted by path only when it is a route's own (bounded label values).
        self.known_paths = known_paths or set()
        self.json_limit = json_limit
        self.upload_limit = upload_limit
        self.upload_paths = upload_paths
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        limit = self.upload_limit if path in self.upload_paths else self.json_limit
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    self.metrics.count(path if path in self.known_paths else "(other)", "too_large")
                    await too_large_response(limit)(scope, receive, send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            # Routes answer it themselves; this catches reads outside them.
            if started:
                raise
            self.metrics.count(path if path in self.known_paths else "(other)", "too_large")
            await too_large_response(limit)(scope, receive, send)
