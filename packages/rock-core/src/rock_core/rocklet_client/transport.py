"""The engine's HTTP client of rocklets: one keep-alive pool per rocklet, over TCP or its unix
socket (:class:`RockletTransport`), with the cap on every answer (:class:`RockletHttp`)."""

from __future__ import annotations

import hashlib
import ssl
from typing import Any

import httpx

from rock_core.rocklet_client.lean import LeanPools

__all__ = ["DEFAULT_MAX_ANSWER", "RockletHttp", "RockletTransport", "new_http_client", "uds_host"]


#: Host names under this domain stand for unix sockets (see :class:`RockletTransport`).
_UDS_DOMAIN = ".uds.rock.invalid"
# Socket path of each such host name; the name is a digest of the path, so entries never clash.
_UDS_PATHS: dict[str, str] = {}


def uds_host(path: str) -> str:
    name = hashlib.sha256(path.encode()).hexdigest()[:24] + _UDS_DOMAIN
    _UDS_PATHS[name] = path
    return name


class RockletTransport(httpx.AsyncBaseTransport):
    """Sends requests over TCP, or over the unix socket a ``*.uds.rock.invalid`` host stands for.

    Rocklets of sandboxes without a network listen on a unix socket; :class:`RockletClient`
    gives them a made-up host name, and this transport keeps one keep-alive pool per socket.
    Rocklets reached over TCP (a cluster's nodes) get one pool per address too: httpx's pool
    looks at every connection it holds for each of its idle ones whenever a request comes or
    goes, and one pool for 1,000 sandboxes on Nomad made that most of a restarted admin's CPU.
    """

    def __init__(self, max_connections: int) -> None:
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        # Rocklets speak plain HTTP: one TLS context that loads no certificates serves every
        # pool (httpx's default loads the CA bundle: some 25 ms of CPU per pool, per sandbox).
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._tcp: dict[tuple[str, int | None], httpx.AsyncHTTPTransport] = {}
        self._uds: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if not host.endswith(_UDS_DOMAIN):
            key = (host, request.url.port)
            pool = self._tcp.get(key)
            if pool is None:
                pool = self._tcp[key] = httpx.AsyncHTTPTransport(
                    limits=self._limits, verify=self._tls
                )
            return await pool.handle_async_request(request)
        path = _UDS_PATHS[host]
        transport = self._uds.get(path)
        if transport is None:
            transport = self._uds[path] = httpx.AsyncHTTPTransport(
                uds=path, limits=httpx.Limits(max_connections=64), verify=self._tls
            )
        return await transport.handle_async_request(request)

    async def forget(self, path: str, port: int | None = None) -> None:
        """Close the pool of the unix socket ``path``, or of TCP address ``path:port`` (its
        sandbox is gone); harmless if none."""
        transport = self._uds.pop(path, None) if port is None else self._tcp.pop((path, port), None)
        if transport is not None:
            await transport.aclose()

    async def aclose(self) -> None:
        for transport in [*self._tcp.values(), *self._uds.values()]:
            await transport.aclose()
        self._tcp.clear()
        self._uds.clear()


#: The largest rocklet answer read by default (``EngineConfig.max_rocklet_answer``).
DEFAULT_MAX_ANSWER = 64 * 1024 * 1024
# Answers whose content is small by nature (liveness, errors of streamed routes).
SMALL_ANSWER = 65536


class RockletHttp(httpx.AsyncClient):
    """The engine's HTTP client of rocklets, with the cap on each answer it reads (``max_answer``)
    and the transport it was given (``rocklet_transport``: httpx keeps its own private).

    ``lean``: the catalog's calls (:meth:`RockletClient.call
    <rock_core.rocklet_client.client.RockletClient.call>`) go over :class:`LeanPools` instead of
    httpx (asyncio only: a client made in an asyncio loop, used in that loop)."""

    def __init__(
        self, *, max_answer: int = DEFAULT_MAX_ANSWER, lean: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.max_answer = max_answer
        self.rocklet_transport: httpx.AsyncBaseTransport | None = kwargs.get("transport")
        self.lean: LeanPools | None = LeanPools() if lean else None

    async def aclose(self) -> None:
        if self.lean is not None:
            self.lean.close()
        await super().aclose()


def new_http_client(
    max_connections: int = 1000, max_answer: int = DEFAULT_MAX_ANSWER, *, lean: bool = False
) -> httpx.AsyncClient:
    """The pooled client an engine shares across all its sandboxes' rocklets; no answer is read
    past ``max_answer`` bytes.

    Rocklets listen on 127.0.0.1 (or a unix socket) only, so proxies from the environment never
    apply. Answers come unencoded (``Accept-Encoding: identity``): a compressed one could unpack
    far beyond its cap. ``lean``: the catalog's calls skip httpx (:class:`RockletHttp`); only
    for a client made and used in one asyncio loop (the embedded SDK's, one per caller loop).
    """
    return RockletHttp(
        max_answer=max_answer,
        lean=lean,
        timeout=httpx.Timeout(30.0, connect=5.0),
        transport=RockletTransport(max_connections),
        trust_env=False,
        headers={"Accept-Encoding": "identity"},
    )
