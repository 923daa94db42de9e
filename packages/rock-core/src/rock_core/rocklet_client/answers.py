"""Reading a rocklet's answers, which are as hostile as its sandbox: each read with a cap
(:func:`read_capped`, :func:`capped_lines`), and its errors (HTTP 511 ``rockletexception``)
translated into the most specific rock error (:func:`rock_error`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from rock_core.errors import (
    CommandRockError,
    CommandTimeout,
    InternalServerRockError,
    InvalidParameter,
    NonZeroExitCode,
    RockError,
    SessionAlreadyExists,
    SessionNotFound,
)
from rock_core.http1 import TooLarge

__all__ = ["TooLarge", "capped_lines", "read_capped", "rock_error"]


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The body of a streamed ``response``, at most ``limit`` bytes.

    :raises TooLarge: it says or turns out to be larger.
    :raises httpx.DecodingError: it is compressed (rock asks for no encoding).
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise httpx.DecodingError(
            f"the answer is {encoding}-encoded; rock asks rocklets for no encoding"
        )
    declared = response.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > limit:
            raise TooLarge(limit)
    return bytes(body)


async def capped_lines(response: httpx.Response, limit: int) -> AsyncIterator[str]:
    """The lines of a streamed ``response``, each at most ``limit`` bytes (:class:`TooLarge` past it)."""
    pending = bytearray()
    async for chunk in response.aiter_raw():
        pending += chunk
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            line = bytes(pending[:end])
            del pending[: end + 1]
            yield line.decode("utf-8", "replace").rstrip("\r")
        if len(pending) > limit:
            raise TooLarge(limit)
    if pending:
        yield pending.decode("utf-8", "replace")


def rock_error(
    name: str, message: str, extra: Mapping[str, Any], sandbox_id: str | None, attempted: str
) -> RockError:
    kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": attempted}
    if name == "SessionDoesNotExistError":
        return SessionNotFound(message, **kw)
    if name == "SessionExistsError":
        return SessionAlreadyExists(message, **kw)
    if name == "NonZeroExitCodeError":
        return NonZeroExitCode(
            message, exit_code=extra.get("exit_code"), output=extra.get("output", ""), **kw
        )
    if name == "CommandTimeoutError":
        return CommandTimeout(message, **kw)
    if name in (
        "BashIncorrectSyntaxError",
        "NoExitCodeError",
        "SessionExitedError",
        "SessionNotInitializedError",
    ):
        return CommandRockError(message, **kw)
    if name in (
        "FileDecodeError",
        "FileNotFoundError",
        "IsADirectoryError",
        "NotADirectoryError",
        "PermissionError",
    ):
        return InvalidParameter(message, **kw)
    if name == "ProcessDoesNotExistError":
        return InvalidParameter(message, **kw)
    if name == "EnvError":
        from rock_core.envs import EnvFailed

        return EnvFailed(
            message,
            kind=str(extra.get("kind", "env_error")),
            env_id=extra.get("env_id"),
            traceback=extra.get("traceback") or (),
            **kw,
        )
    return InternalServerRockError(f"rocklet error ({name}): {message}", **kw)
