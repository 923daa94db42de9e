"""A small async client of Nomad's HTTP API, with Nomad's errors turned into rock's.

Every call is a coroutine on the event loop (no worker threads), over HTTP/1.1 with kept-alive
connections. Over plain HTTP the quick calls (every start's Variable write and job
registration among them) and the event stream go over rock-core's lean client
(:mod:`rock_core.lean_http`): httpx's URL parsing, request building and pool cost more of the
admin's CPU per start than the rest of the runtime did. Blocking queries, and every call over
TLS, use httpx. Blocking queries (``index``/``wait``) hold a connection each while they wait,
so their pool is sized for one per sandbox being started. A request that meets a kept-alive
connection the server closed as it was reused is sent once more
on a fresh connection (:data:`_DROPPED`).

Errors name the setting to fix: a refused token names ``plugins.nomad.token``, an unreachable
address ``plugins.nomad.address``, an unknown region or namespace their settings.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import httpx
import orjson

from rock_core.errors import RuntimeFailure, SandboxNotFound
from rock_core.lean_http import LeanHttpClient, LeanHttpError, LeanResponse, LeanStream

__all__ = ["Answer", "NomadApi", "NomadError", "Setting", "decode_json", "encode_json"]

#: An answer of Nomad: httpx's, or the lean client's (the same ``status_code``, ``headers``,
#: ``text`` and ``json()``).
Answer = httpx.Response | LeanResponse
#: What a path keeps unquoted (RFC 3986's pchar and ``/``).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"

#: How much longer than its ``wait`` a blocking query may take before the client gives up
#: (Nomad adds up to wait/16 of jitter).
_WAIT_MARGIN = 15.0
#: Calls that are not blocking queries, in flight at once; the others wait their turn here.
#: They go over small pools of :data:`POOL_CONNECTIONS` each, the call to the one with the
#: fewest in flight: httpcore's pool walks all its connections for each idle one whenever a
#: call comes or goes, and one pool that 5,000 starts at once grew to 512 connections made that
#: walk 3/4 of the admin's CPU.
QUICK_CALLS = 64
POOL_CONNECTIONS = 8


def encode_json(value: Any) -> bytes:
    """A request's JSON body: orjson (a start's job, 3 KB, in a tenth of ``json.dumps``'s
    CPU); a value orjson does not take (a key that is no string, a number past 64 bits) as
    ``json.dumps`` writes it."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return jsonlib.dumps(value).encode()


def decode_json(response: Answer) -> Any:
    """An answer's body as JSON, decoded by orjson (a third of ``json.loads``'s CPU)."""
    return orjson.loads(response.content)


class _QuietNomadRequests(logging.Filter):
    """Drops httpx's INFO line for each request to a Nomad API this process talks to: a start
    is a handful of (blocking) queries, which would otherwise fill the admin's log."""

    addresses: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not self.addresses:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        url = str(args[1]) if len(args) > 1 else ""
        return not any(url.startswith(address) for address in self.addresses)


# (httpcore's per-request ``import sniffio`` is made immediate by rock_core, imported above.)

#: A kept-alive connection the server closed just as it was reused (its idle timeout, a proxy's)
#: fails its request with one of these, before any answer. The request is sent once more, on a
#: fresh connection. That is safe for every call the runtime makes: reads, deletes and the
#: Variable's write are idempotent, and a job is registered create-only (``EnforceIndex``), so
#: a registration that did reach Nomad cannot be made twice.
_DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)

log = logging.getLogger("rock.nomad")

_QUIET = _QuietNomadRequests()
logging.getLogger("httpx").addFilter(_QUIET)


class Setting:
    """Where a setting's value came from, for the errors that ask to fix it."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source

    def __str__(self) -> str:
        return f"plugins.nomad.{self.name} ({self.source})"


class NomadError(RuntimeFailure):
    """Nomad answered with an error: :attr:`status` and Nomad's plain-text :attr:`text`."""

    def __init__(self, message: str, *, status: int = 0, text: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.text = text


class NomadApi:
    """Nomad's HTTP API at ``address``, as the runtime's settings say.

    :param settings: where each setting came from (``address``, ``token``, ``namespace``,
        ``region``) for the error messages.
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None,
        namespace: str,
        region: str | None,
        verify: ssl.SSLContext | bool,
        cert: tuple[str, str] | None,
        timeout: float,
        max_connections: int,
        settings: Mapping[str, Setting],
    ) -> None:
        self.address = address.rstrip("/")
        _QUIET.addresses.add(self.address + "/v1/")
        self.namespace = namespace
        self.region = region
        self.timeout = timeout
        self.settings = dict(settings)
        headers = {"User-Agent": "rock-nomad"}
        if token:
            headers["X-Nomad-Token"] = token
        #: The query of a call without parameters (a start's two), by ``namespaced``.
        self._bare_query = {n: urlencode(self._params(None, n)) for n in (False, True)}
        quick = min(max_connections, QUICK_CALLS)
        self._quick = anyio.Semaphore(quick)

        def client(connections: int, keep: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=self.address,
                headers=headers,
                verify=verify,
                cert=cert,
                timeout=timeout,
                limits=httpx.Limits(max_connections=connections, max_keepalive_connections=keep),
                trust_env=False,
            )

        #: Plain HTTP: the quick calls go over rock-core's lean client (httpx's request
        #: building and pool were most of a start's CPU); over TLS, over small httpx pools.
        self._lean: LeanHttpClient | None = None
        if self.address.startswith("http://"):
            self._lean = LeanHttpClient(
                self.address, headers=headers, timeout=timeout, max_connections=quick
            )
            pools = 0
        else:
            pools = -(-quick // POOL_CONNECTIONS)
        self._pools = [client(POOL_CONNECTIONS, POOL_CONNECTIONS) for _ in range(pools)]
        self._in_flight = [0] * pools
        # Blocking queries (each holds a connection while Nomad waits) and the event stream.
        self._http = client(max_connections, POOL_CONNECTIONS)

    async def aclose(self) -> None:
        if self._lean is not None:
            await self._lean.aclose()
        for http in (*self._pools, self._http):
            await http.aclose()

    def _params(self, params: Mapping[str, Any] | None, namespaced: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if namespaced:
            out["namespace"] = self.namespace
        if self.region:
            out["region"] = self.region
        for key, value in (params or {}).items():
            if value is None:
                continue
            out[key] = ("true" if value else "false") if isinstance(value, bool) else value
        return out

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        attempted: str,
        sandbox_id: str | None = None,
        not_found: str | None = None,
        wait: float | None = None,
        namespaced: bool = True,
    ) -> Answer:
        """One call; Nomad's errors become rock's (see the module docstring).

        :param not_found: a 404 raises :class:`SandboxNotFound` with these words (else a failure).
        :param wait: a blocking query's wait: the read timeout is stretched to cover it.
        """
        if wait is None and self._lean is not None:
            return await self._lean_request(
                method, path, params, json, attempted, sandbox_id, not_found, namespaced
            )
        args = (method, path, params, json, attempted, sandbox_id, not_found, wait, namespaced)
        if wait is not None:
            return await self._request(self._http, *args)
        async with self._quick:
            pool = min(range(len(self._pools)), key=self._in_flight.__getitem__)
            self._in_flight[pool] += 1
            try:
                return await self._request(self._pools[pool], *args)
            finally:
                self._in_flight[pool] -= 1

    async def _lean_request(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        json: Any,
        attempted: str,
        sandbox_id: str | None,
        not_found: str | None,
        namespaced: bool,
    ) -> Answer:
        """A quick call over the lean client (plain HTTP): the same request and errors."""
        assert self._lean is not None
        query = (
            self._bare_query[namespaced]
            if not params
            else urlencode(self._params(params, namespaced))
        )
        target = f"/v1/{quote(path, safe=_PATH_SAFE)}" + (f"?{query}" if query else "")
        body = None if json is None else encode_json(json)
        try:
            response = await self._lean.request(method, target, body=body)
        except LeanHttpError as exc:
            if exc.too_large:
                raise RuntimeFailure(
                    f"the Nomad API at {self.address} answered {method} /v1/{path} with {exc}; "
                    "rock reads no larger answer",
                    sandbox_id=sandbox_id,
                    attempted=attempted,
                ) from exc
            kind = (
                "ReadTimeout" if exc.timed_out else "ReadError" if exc.dropped else "ConnectError"
            )
            raise RuntimeFailure(
                f"cannot reach the Nomad API at {self.address} ({kind}: {exc}); "
                f"check {self.settings['address']}",
                sandbox_id=sandbox_id,
                attempted=attempted,
            ) from exc
        return self._judge(response, method, path, attempted, sandbox_id, not_found)

    def _judge(
        self,
        response: Answer,
        method: str,
        path: str,
        attempted: str,
        sandbox_id: str | None,
        not_found: str | None,
    ) -> Answer:
        """The answer when it is a success; else Nomad's error as rock's."""
        if response.status_code < 300:
            return response
        text = response.text.strip()
        status = response.status_code
        if status == 404 and not_found is not None and text != "404 page not found":
            raise SandboxNotFound(not_found, sandbox_id=sandbox_id, attempted=attempted)
        raise NomadError(
            self._explain(status, text, method, path),
            status=status,
            text=text,
            sandbox_id=sandbox_id,
            attempted=attempted,
        )

    async def _request(
        self,
        http: httpx.AsyncClient,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        json: Any,
        attempted: str,
        sandbox_id: str | None,
        not_found: str | None,
        wait: float | None,
        namespaced: bool,
    ) -> Answer:
        timeout = httpx.Timeout(
            self.timeout if wait is None else wait + _WAIT_MARGIN, connect=self.timeout
        )
        try:
            for attempt in range(2):
                try:
                    response = await http.request(
                        method,
                        f"/v1/{path}",
                        params=self._params(params, namespaced),
                        json=json,
                        timeout=timeout,
                    )
                    break
                except _DROPPED as exc:
                    if attempt:
                        raise
                    log.info(
                        "Nomad at %s dropped the connection of %s /v1/%s (%s: %s); sending it again",
                        self.address,
                        method,
                        path,
                        type(exc).__name__,
                        exc or "no answer",
                    )
        except httpx.TransportError as exc:
            raise RuntimeFailure(
                f"cannot reach the Nomad API at {self.address} ({type(exc).__name__}: {exc or 'no answer'}); "
                f"check {self._transport_hint(exc)}",
                sandbox_id=sandbox_id,
                attempted=attempted,
            ) from exc
        return self._judge(response, method, path, attempted, sandbox_id, not_found)

    def _transport_hint(self, exc: httpx.TransportError) -> str:
        """The settings to check for a call that got no answer: the TLS ones when the TLS
        handshake failed (Nomad's certificate not trusted, or ours refused), else the address."""
        text = str(exc).lower()
        address = self.settings["address"]
        if "certificate verify failed" in text or "wrong version number" in text:
            # Not signed by the CA we trust, not for this host name, or not TLS at all.
            return f"{self.settings.get('ca_cert', 'plugins.nomad.ca_cert')} and {address}"
        client_cert = (
            f"{self.settings.get('client_cert', 'plugins.nomad.client_cert')} and client_key"
        )
        if "certificate required" in text or "bad certificate" in text or "unknown ca" in text:
            # Nomad asks for a client certificate (verify_https_client) and ours is absent or refused.
            return client_cert
        if self.address.startswith("https://") and isinstance(exc, _DROPPED):
            # The TLS alert of a refused client certificate often arrives as a closed connection.
            return (
                f"{client_cert} (a Nomad with verify_https_client closes the connection of a caller without a "
                f"certificate its CA signed), and {address}"
            )
        return str(address)

    def _explain(self, status: int, text: str, method: str, path: str) -> str:
        said = f"Nomad at {self.address} answered {method} /v1/{path.split('?')[0]} with HTTP {status}: {text or '(empty)'}"
        lowered = text.lower()
        if status == 403 or "acl token not found" in lowered or "permission denied" in lowered:
            token = self.settings["token"]
            return (
                f"{said}; the ACL token is refused or lacks a right: check {token} "
                f"(it needs submit-job, read-job and read-logs in namespace {self.namespace!r}, and "
                f"variables write and destroy on the sandboxes' nomad/jobs/<job id> paths there)"
            )
        if "no path to region" in lowered:
            return f"{said}; check {self.settings['region']}"
        if "nonexistent namespace" in lowered or "namespace not found" in lowered:
            return f"{said}; check {self.settings['namespace']}"
        if status == 404 and text == "404 page not found":
            return f"{said}; is {self.settings['address']} a Nomad API?"
        return said

    async def _refuse_stream(self, answer: httpx.Response | LeanStream, path: str) -> None:
        """Raise :class:`NomadError` when the event stream's answer is an error status (either
        client's answer: both have ``status_code`` and ``aread``)."""
        if answer.status_code >= 300:
            text = (await answer.aread()).decode(errors="replace").strip()
            raise NomadError(
                self._explain(answer.status_code, text, "GET", path),
                status=answer.status_code,
                text=text,
                attempted="events",
            )

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: list[tuple[str, str]]
    ) -> AsyncIterator[httpx.Response | LeanStream]:
        """A streamed GET (the event stream): the response, its body read as it comes."""
        query = list(self._params(None, True).items()) + params
        if self._lean is not None:
            target = f"/v1/{quote(path, safe=_PATH_SAFE)}?{urlencode(query)}"
            try:
                async with self._lean.stream("GET", target, timeout=self.timeout) as answer:
                    await self._refuse_stream(answer, path)
                    yield answer
            except LeanHttpError as exc:
                raise RuntimeFailure(
                    f"the event stream of the Nomad API at {self.address} broke ({exc})",
                    attempted="events",
                ) from exc
            return
        timeout = httpx.Timeout(None, connect=self.timeout)
        try:
            async with self._http.stream(
                "GET", f"/v1/{path}", params=query, timeout=timeout
            ) as response:
                await self._refuse_stream(response, path)
                yield response
        except httpx.TransportError as exc:
            raise RuntimeFailure(
                f"the event stream of the Nomad API at {self.address} broke ({type(exc).__name__}: {exc})",
                attempted="events",
            ) from exc

    async def get_json(self, path: str, **kw: Any) -> Any:
        response = await self.request("GET", path, **kw)
        return decode_json(response)

    async def blocking(self, path: str, index: int, wait: float, **kw: Any) -> tuple[Any, int]:
        """A blocking read: ``(body, X-Nomad-Index)``, once the object's index passes ``index``
        or ``wait`` seconds passed (no change guaranteed either way)."""
        params = dict(kw.pop("params", None) or {})
        if index > 0:
            params.update(index=index, wait=f"{max(1, int(wait))}s")
        response = await self.request(
            "GET", path, params=params, wait=wait if index > 0 else None, **kw
        )
        try:
            new_index = int(response.headers.get("X-Nomad-Index") or 0)
        except ValueError:
            new_index = 0
        return decode_json(response), new_index
