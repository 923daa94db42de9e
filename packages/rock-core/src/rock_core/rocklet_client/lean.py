"""A lean HTTP/1.1 exchange with rocklets on asyncio (:class:`LeanPools`), for the embedded SDK's
calls straight from the caller's loop.

httpx costs about a millisecond of the caller's CPU per rocklet call; a rocklet call needs
little of it: one request written in one piece to a rocklet the engine named (its unix socket or
``host:port``), one answer read into memory with its cap. This module is that call's policy over
rock-core's lean HTTP/1.1 core (:mod:`rock_core.http1`: the request's bytes, the answer's reader
and kept-alive connections, shared with rock-nomad's client of Nomad), with kept-alive
connections per rocklet address.

What it keeps from the httpx path (:meth:`RockletClient._request
<rock_core.rocklet_client.client.RockletClient._request>` maps its failures to the same rock
errors): the cap on every answer (:class:`~rock_core.rocklet_client.answers.TooLarge`, checked
on the declared length and as bytes come), no encoded answer (:class:`Encoded`), a connection
made within 5 seconds and the whole exchange within the call's timeout (:class:`Timeout`;
``None``: no bound), at most 64 connections per rocklet (the others wait their turn), and a
request never sent twice (a connection that ends without an answer is :class:`Dropped`). An
idle connection the rocklet closed is not reused. asyncio only: the caller checks its loop.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any

from rock_core.http1 import (
    Answer,
    Connection,
    Dropped,
    Encoded,
    Pool,
    Timeout,
    encode_request,
    exchange,
    open_connection,
)

__all__ = ["Answer", "Dropped", "Encoded", "LeanPools", "Timeout", "request_bytes"]

#: Seconds to make a connection, as the httpx path's ``connect=5.0``.
CONNECT_TIMEOUT = 5.0
#: Connections per rocklet at once (as the httpx path's unix-socket pools).
MAX_CONNECTIONS = 64


def request_bytes(method: str, target: str, fixed: str, json_body: Any) -> bytes:
    """A whole request: ``fixed`` the header lines every request to its rocklet carries (each
    ending in CRLF), ``json_body`` encoded as httpx encodes ``json=`` (compact, UTF-8, no NaN)."""
    if json_body is None:
        return encode_request(method, target, fixed, None)
    body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return encode_request(method, target, fixed, body.encode())


class LeanPools:
    """Kept-alive connections to rocklets, one pool per address (a unix socket's path, or
    ``(host, port)``), on the event loop that uses them.

    A pool is dropped once no exchange uses it and it keeps no connection: a sandbox removed
    ends its rocklet's connections, so a trainer that runs sandboxes by the million does not
    keep a pool for each.
    """

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], Pool] = {}

    async def exchange(
        self, host: str, port: int, data: bytes, cap: int, timeout: float | None
    ) -> Answer:
        """Send ``data`` (a whole request) to the rocklet at ``host`` (a path: its unix socket)
        or ``host:port``; its answer, whatever its status, at most ``cap`` bytes of body.

        :raises Dropped: no connection, or it ended without a whole answer.
        :raises Timeout: no whole answer within ``timeout`` seconds (``None``: no bound).
        :raises TooLarge: the body is larger than ``cap``.
        :raises Encoded: the answer is compressed.
        """
        key = (host, port)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = Pool(MAX_CONNECTIONS)
        pool.users += 1
        try:
            async with pool.slots:
                connection = pool.take()
                if connection is None:
                    connection = await _connect(host, port)
                    connection.lost = functools.partial(self._lost, key, pool)
                answer = await exchange(connection, data, cap, timeout)
                pool.give_back(connection, self._pools.get(key) is pool)
                return answer
        finally:
            pool.users -= 1
            self._let_go(key, pool)

    def _lost(self, key: tuple[str, int], pool: Pool, connection: Connection) -> None:
        """A connection of ``pool`` ended: out of its idle list, and the pool let go of."""
        with contextlib.suppress(ValueError):
            pool.idle.remove(connection)
        self._let_go(key, pool)

    def _let_go(self, key: tuple[str, int], pool: Pool) -> None:
        """Drop ``pool`` when nothing uses it and it keeps no connection."""
        if not pool.users and not pool.idle and self._pools.get(key) is pool:
            del self._pools[key]

    def forget(self, host: str, port: int) -> None:
        """Close the kept connections to ``host`` (``port`` 0 for a unix socket); harmless if none."""
        pool = self._pools.pop((host, port), None)
        if pool is not None:
            pool.close()

    def close(self) -> None:
        """Close every kept connection."""
        for key in list(self._pools):
            self.forget(*key)


async def _connect(host: str, port: int) -> Connection:
    try:
        return await open_connection(host, port, Connection("the rocklet"), CONNECT_TIMEOUT)
    except OSError as exc:
        raise Dropped(f"cannot connect: {exc.strerror or exc!r}") from exc
