"""A lean client of one rocklet's ``/env/*`` routes: keep-alive HTTP/1.1 on anyio streams.

Why not the engine's :class:`~rock_core.rocklet_client.RockletClient` (httpx): an env
step is some 0.25 ms inside the sandbox, and httpx's own work per request was about four times
that on this machine; a step is the hot path of a trainer. Everything else (addresses, the
sandbox's secret, its state) still comes from the engine: a channel is made from the
``RockletClient`` that ``SandboxManager.rocklet`` hands out, and errors are the same rock errors.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from rock_core.envs import EnvFailed
from rock_core.errors import InternalServerRockError, InvalidParameter, RockletUnreachable

__all__ = ["RockletChannel"]

_TOKEN_HEADER = "X-Rock-Rocklet-Token"
_MAX_IDLE = 64  # kept-alive connections per sandbox


class _Connection:
    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)


class RockletChannel:
    """``POST /env/{op}`` to one sandbox's rocklet.

    :param host: the rocklet's host, or the path of its unix socket (``port`` 0).
    :param port: its TCP port.
    :param token: the sandbox's rocklet secret.
    :param sandbox_id: for error messages.
    """

    def __init__(self, host: str, port: int, token: str | None, sandbox_id: str) -> None:
        self.host = host
        self.port = port
        self.sandbox_id = sandbox_id
        self._idle: list[_Connection] = []
        self._head = b"Host: rocklet\r\nContent-Type: application/json\r\n"
        if token:
            self._head += f"{_TOKEN_HEADER}: {token}\r\n".encode()
        self.closed = False

    @classmethod
    def of(cls, client: Any, sandbox_id: str) -> RockletChannel:
        """The channel to the rocklet ``client`` (a ``RockletClient``) calls."""
        return cls(client.host, client.port, client.token, sandbox_id)

    async def _connect(self) -> _Connection:
        try:
            if self.host.startswith("/"):
                stream: anyio.abc.ByteStream = await anyio.connect_unix(self.host)
            else:
                stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as exc:
            raise RockletUnreachable(
                f"the rocklet of sandbox {self.sandbox_id} is unreachable: {exc!r}",
                sandbox_id=self.sandbox_id,
                attempted="env",
            ) from exc
        return _Connection(stream)

    async def post(self, op: str, body: dict[str, Any], timeout: float | None) -> Any:
        """The JSON answer of ``POST /env/{op}``; the env's failure is :class:`EnvFailed`."""
        if timeout is not None:
            body = {**body, "timeout": timeout}
        data = json.dumps(body, separators=(",", ":")).encode()
        request = b"POST /env/%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            op.encode(),
            self._head,
            len(data),
            data,
        )
        conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        try:
            with anyio.fail_after(None if timeout is None else timeout + 30.0):
                try:
                    status, payload, keep = await self._exchange(conn, request)
                except (
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    OSError,
                ):
                    if not reused:
                        raise
                    await (
                        conn.stream.aclose()
                    )  # a kept-alive connection the rocklet closed: once more, fresh
                    conn = await self._connect()
                    status, payload, keep = await self._exchange(conn, request)
        except TimeoutError:
            await conn.stream.aclose()
            raise EnvFailed(
                f"the rocklet of sandbox {self.sandbox_id} did not answer env/{op} in time",
                kind="timeout",
                sandbox_id=self.sandbox_id,
            ) from None
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ) as exc:
            await conn.stream.aclose()
            raise RockletUnreachable(
                f"the rocklet of sandbox {self.sandbox_id} closed the connection during env/{op}: {exc!r}",
                sandbox_id=self.sandbox_id,
                attempted=f"env/{op}",
            ) from exc
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.stream.aclose()  # a half-read answer: the connection is unusable
            raise
        if keep and not self.closed and len(self._idle) < _MAX_IDLE:
            self._idle.append(conn)
        else:
            await conn.stream.aclose()
        return self._answer(op, status, payload)

    async def _exchange(self, conn: _Connection, request: bytes) -> tuple[int, bytes, bool]:
        await conn.stream.send(request)
        status_line = await conn.reader.receive_until(b"\r\n", 65536)
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        keep = True
        while True:
            line = await conn.reader.receive_until(b"\r\n", 65536)
            if not line:
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                keep = False
            elif name == b"transfer-encoding":
                keep = False  # the rocklet answers JSON with a length; anything else is not ours
        payload = await conn.reader.receive_exactly(length) if length else b""
        return status, payload, keep

    def _answer(self, op: str, status: int, payload: bytes) -> Any:
        try:
            body = json.loads(payload) if payload else None
        except ValueError:
            body = {"detail": payload[:300].decode("utf-8", "replace")}
        if status == 200:
            return body
        attempted = f"env/{op}"
        if status == 511 and isinstance(body, dict) and "rockletexception" in body:
            info = body["rockletexception"] or {}
            name = str(info.get("class_path", "")).rsplit(".", 1)[-1]
            extra = info.get("extra_info") or {}
            message = str(info.get("message", ""))
            if name == "EnvError":
                failed = EnvFailed(
                    message,
                    kind=str(extra.get("kind", "env_error")),
                    env_id=extra.get("env_id"),
                    traceback=extra.get("traceback") or (),
                    sandbox_id=self.sandbox_id,
                    attempted=attempted,
                )
                failed.details = dict(extra)  # type: ignore[attr-defined] # the rocklet's extra_info (python, pythonpath)
                raise failed
            raise InternalServerRockError(
                f"rocklet error ({name}): {message}",
                sandbox_id=self.sandbox_id,
                attempted=attempted,
            )
        detail = body.get("detail") if isinstance(body, dict) else body
        if status == 400:
            raise InvalidParameter(
                f"{attempted}: {detail}", sandbox_id=self.sandbox_id, attempted=attempted
            )
        if status == 401:
            raise InternalServerRockError(
                f"the rocklet of sandbox {self.sandbox_id} refused {attempted}: rock's secret for it is wrong",
                sandbox_id=self.sandbox_id,
                attempted=attempted,
            )
        if status == 404:
            raise EnvFailed(
                f"the rocklet of sandbox {self.sandbox_id} has no env channel (an older rocklet?)",
                kind="runtime",
                sandbox_id=self.sandbox_id,
            )
        raise InternalServerRockError(
            f"the rocklet of sandbox {self.sandbox_id} answered {attempted} with HTTP {status}: {detail}",
            sandbox_id=self.sandbox_id,
            attempted=attempted,
        )

    async def aclose(self) -> None:
        """Close the kept-alive connections."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            with anyio.CancelScope(shield=True):
                await conn.stream.aclose()
