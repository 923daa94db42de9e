"""The wire of rock's admin API as the remote driver speaks it: where the routes live, the headers
of every call, timeouts, and the error a ``Failed`` envelope stands for (no I/O here).
"""

from __future__ import annotations

import ipaddress
import math
import os
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any, TypeVar

import httpx

from rock_core.errors import InvalidParameter, NonZeroExitCode, RockError, error_for_code

__all__ = [
    "API_PREFIX",
    "DEFAULT_TIMEOUT",
    "IDEMPOTENT_POSTS",
    "MAX_HELD",
    "awaited",
    "close_with_loop",
    "command_timeout",
    "error_from_envelope",
    "is_envelope",
    "is_loopback",
    "remote_headers",
]

T = TypeVar("T")

API_PREFIX = "/apis/envs/sandbox/v1"
"""Where ROCK's (and rock's) sandbox routes live on the admin server."""

# Headroom over a command's own timeout before the HTTP call gives up: the server answers a
# timed-out command with an error, and that answer should win over a bare read timeout.
TIMEOUT_MARGIN = 30.0
# Lifecycle calls (stop removes a container) may take a while; anything slower is a hung server.
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
# Held requests at once per driver (each keeps a connection open); waits beyond it poll instead.
MAX_HELD = 512
# POST routes that may be sent twice with the same effect.
IDEMPOTENT_POSTS = frozenset({"/stop", "/delete"})


def remote_headers(
    headers: Mapping[str, str] | None = None, *, api_key: str | None = None
) -> dict[str, str]:
    """The headers of every call: ``headers`` (ROCK's ``_build_headers``), plus the API key.

    ``api_key`` (default: the ``ROCK_API_KEY`` environment variable) is sent as ``X-API-Key``
    unless ``headers`` already carry ``X-API-Key`` or ``Authorization`` (any case), which win.
    """
    out = dict(headers or {})
    key = api_key if api_key is not None else os.environ.get("ROCK_API_KEY") or None
    present = {name.lower() for name in out}
    if key and "x-api-key" not in present and "authorization" not in present:
        out["X-API-Key"] = key
    return out


def error_from_envelope(
    body: Mapping[str, Any], *, sandbox_id: str | None = None, attempted: str | None = None
) -> RockError:
    """The error a ``Failed`` envelope stands for.

    ``result.code`` picks the most specific class (:func:`~rock_core.errors.error_for_code`); an
    envelope without a code (ROCK's validation errors, unexpected server errors) is a plain
    :class:`~rock_core.errors.RockError` carrying the server's words.
    """
    result = body.get("result")
    message = str(body.get("error") or body.get("message") or "the admin server reported a failure")
    kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": attempted}
    # rock's finer code where the admin sends it (rock_code), else ROCK's own.
    code = (result.get("rock_code") or result.get("code")) if isinstance(result, Mapping) else None
    err: RockError | None = None
    if isinstance(code, int) and not isinstance(code, bool):
        err = error_for_code(code, message, **kw)
    if err is None:
        if body.get("message") == "invalid parameter":  # ROCK's request validation failures
            return InvalidParameter(message, **kw)
        return RockError(message, **kw)
    if isinstance(err, NonZeroExitCode) and isinstance(result, Mapping):
        err.exit_code = result.get("exit_code")
        err.output = str(result.get("output") or result.get("failure_reason") or "")
    return err


def is_loopback(base_url: str) -> bool:
    host = urllib.parse.urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def command_timeout(timeout: float | None) -> httpx.Timeout:
    """The HTTP timeout of a call that runs a command for up to ``timeout`` seconds."""
    if timeout is None or not math.isfinite(float(timeout)):
        return httpx.Timeout(None, connect=10.0)
    return httpx.Timeout(float(timeout) + TIMEOUT_MARGIN, connect=10.0)


async def awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def close_with_loop(http: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    # Suspended for the loop's lifetime: asyncio.run() finalizes async generators at shutdown,
    # which closes this loop's client while the loop still runs.
    try:
        yield
    finally:
        await http.aclose()


def is_envelope(response: httpx.Response) -> bool:
    """Whether ``response`` carries ROCK's ``{status, ..., result}`` envelope."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "status" in body and ("result" in body or "error" in body)
