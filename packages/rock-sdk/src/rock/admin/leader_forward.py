"""Calls only the leader makes, sent on to it: :class:`LeaderForward` (issue #24 point 2).

Every admin of a cluster (``[engine] cluster``, a PostgreSQL store) answers every call. Calls
into a sandbox (commands, sessions, files, the proxy and shell) and reads of records (status,
listings) are served by the admin that got them, from the shared store
(:mod:`rock_core.engine.following`). What changes the cluster's sandboxes (starts, stops,
deletions, restarts, archives, warm pools) and every plugin route (GEM envs, EnvHub: their
state lives with the engine that serves them) only the leader does: an admin that does not
lead sends such a call on to the leader's address (the lease keeps it), with the client's
headers (its API key: the leader checks it again), and streams the answer back.

- The body is read first (it is small: the JSON limit applies, ``max_json_body``), so a call
  can be sent again when the leader could not be reached at all.
- With no leader (the old one died and the lease has not run out), the call waits for the next
  one, up to ``wait`` seconds; if this admin becomes the leader meanwhile, it serves the call.
- When the leader changes while it has the call (it hung and lost its lease, or died), the
  call is answered at once with the reason, HTTP 503: its outcome is unknown. A start that
  carries an ``Idempotency-Key`` and a stop or delete are sent again to the new leader instead
  (they cannot be made twice).
- A call that was forwarded once is never forwarded again (``X-Rock-Forwarded-By``): an admin
  that got one while not leading answers 503 instead of bouncing it on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rock.admin.envelope import failure
from rock_core.errors import InternalServerRockError, PayloadTooLarge, RockError

if TYPE_CHECKING:
    from rock_core.engine.leadership import Role
    from rock_core.engine.manager import SandboxManager

__all__ = ["FORWARDED_BY", "LeaderForward"]

log = logging.getLogger("rock.admin")

#: The header an admin adds to a call it forwards (its own URL).
FORWARDED_BY = "x-rock-forwarded-by"

# Not passed on: the connection's own, and what the forwarding sets itself.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)

# Calls that cannot be made twice however often they are sent, and those that cannot when they
# carry an Idempotency-Key (the engine answers a repeated key with the first start's sandbox).
_REPEATABLE = ("/stop", "/delete")
_KEYED = ("/start", "/start_async")


class LeaderUnavailable(InternalServerRockError):
    """No leader took a call only the leader makes (none elected in time, or it went away)."""


class LeaderForward:
    """ASGI middleware: calls for the leader (``for_leader(path)``) made on an admin that does
    not lead are sent on to the leader.

    :param manager: the admin's engine (``None`` while it starts or stops).
    :param own_url: this admin's address in the lease (never forwarded to).
    :param max_body: the largest body read (``max_json_body``).
    :param wait: seconds a call waits for a leader to be elected.
    :param timeout: seconds the leader may take to answer.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        for_leader: Callable[[str], bool],
        manager: Callable[[], SandboxManager | None],
        own_url: str,
        max_body: int,
        wait: float = 10.0,
        timeout: float = 600.0,
    ) -> None:
        self.app = app
        self.for_leader = for_leader
        self.manager = manager
        self.own_url = own_url
        self.max_body = max_body
        self.wait = wait
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        """Close the connections to the leader."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _role(self) -> Role | None:
        manager = self.manager()
        return None if manager is None else manager.role

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        role = self._role() if scope["type"] == "http" else None
        if role is None or role.leading or not self.for_leader(scope["path"]):
            await self.app(scope, receive, send)
            return
        cluster = self.manager().config.cluster  # type: ignore[union-attr]
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP]
        if any(k.lower() == FORWARDED_BY.encode() for k, _ in headers):
            error = LeaderUnavailable(
                f"this admin was sent {scope['path']} as cluster {cluster!r}'s leader, and does "
                "not lead it (the lease moved meanwhile): send the call again"
            )
            await _answer(scope, receive, send, error)
            return
        try:
            body = await _read_body(receive, self.max_body)
        except PayloadTooLarge as exc:
            await _answer(scope, receive, send, exc, 413)
            return
        path = scope["path"]
        repeatable = path.endswith(_REPEATABLE) or (
            path.endswith(_KEYED) and any(k.lower() == b"idempotency-key" for k, _ in headers)
        )
        deadline = time.monotonic() + self.wait
        while True:
            if role.leading:  # this admin took the lease meanwhile: it serves the call
                await self.app(scope, _replay(body), send)
                return
            address = await _leader(role)
            if address is not None and address != self.own_url:
                outcome = await self._forward(role, address, scope, headers, body, send)
                if outcome is None:
                    return  # answered
                if not outcome[0] and not repeatable:
                    await _answer(scope, receive, send, LeaderUnavailable(outcome[1]))
                    return
                log.warning("%s: %s; trying the next leader", scope["path"], outcome[1])
            if time.monotonic() > deadline:
                error = LeaderUnavailable(
                    f"no leader of cluster {cluster!r} took {scope['path']} within "
                    f"{self.wait:g} s: is any admin of the cluster running?"
                )
                await _answer(scope, receive, send, error)
                return
            await anyio.sleep(0.2)

    async def _forward(
        self,
        role: Role,
        address: str,
        scope: Scope,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Send,
    ) -> tuple[bool, str] | None:
        """Send the call to ``address`` and stream its answer back: ``None`` when answered;
        else ``(unsent, why)``: ``unsent`` when the leader surely never got it."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=2.0), follow_redirects=False
            )
        query = scope.get("query_string", b"").decode("latin-1")
        url = address + scope["path"] + (f"?{query}" if query else "")
        request = self._client.build_request(
            scope["method"],
            url,
            headers=[*headers, (FORWARDED_BY.encode(), self.own_url.encode())],
            content=body,
        )
        moved: list[str] = []
        got: list[httpx.Response | httpx.HTTPError] = []
        client = self._client

        async def sending(scope: anyio.CancelScope) -> None:
            try:
                got.append(await client.send(request, stream=True))
            except httpx.HTTPError as exc:
                got.append(exc)
            scope.cancel()  # the watch is over

        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, role, address, moved, tg.cancel_scope)
            tg.start_soon(sending, tg.cancel_scope)
        response = got[0] if got else None
        if isinstance(response, (httpx.ConnectError, httpx.ConnectTimeout)):
            return True, f"the leader at {address} could not be reached ({response!r})"
        if isinstance(response, httpx.HTTPError):
            return False, f"the leader at {address} went away during the call ({response!r})"
        if moved or response is None:
            if response is not None:
                await response.aclose()
            return False, (
                f"the leader at {address} lost the lease during the call (to {moved[:1]}): "
                "its outcome is unknown"
            )
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
        return None


async def _leader(role: Role) -> str | None:
    """The leader's address by the lease (``None``: none now, or the store did not answer)."""
    try:
        return await anyio.to_thread.run_sync(role.leadership.leader)
    except RockError as exc:
        log.warning("could not read the cluster's leader: %s", exc)
        return None


async def _watch(role: Role, address: str, moved: list[str], scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` once the lease names another leader than ``address``."""
    while True:
        await anyio.sleep(1.0)
        now = await _leader(role)
        if now is not None and now != address:
            moved.append(now)
            scope.cancel()
            return


async def _read_body(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body larger than max_json_body ({limit} bytes)")
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that gives ``body`` once, then waits (as a client that stays)."""
    messages: Iterable[Message] = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> Message:
        for message in messages:
            return message
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


async def _answer(
    scope: Scope, receive: Receive, send: Send, error: RockError, status: int = 503
) -> None:
    response = failure(str(error), error)
    response.status_code = status
    await response(scope, receive, send)
