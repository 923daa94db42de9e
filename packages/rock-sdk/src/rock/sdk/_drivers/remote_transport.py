"""The HTTP half of :class:`~rock.sdk._drivers.remote.RemoteDriver`: one pooled client per event
loop (and one for requests the admin holds), sending a call, and translating its answer or failure
into rock's errors once (:class:`RemoteTransport`, the driver's base class). With several admin
URLs, a call moves on to the next admin when it never reached one, or when it is safe to repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar, cast

import httpx

from rock.sdk._drivers.admin_urls import KEYED_POSTS, safe_to_repeat
from rock.sdk._drivers.remote_retry import QuickPools, Retrying, max_in_flight, retry_after
from rock.sdk._drivers.remote_wire import (
    API_PREFIX,
    DEFAULT_TIMEOUT,
    IDEMPOTENT_POSTS,
    MAX_HELD,
    awaited,
    close_with_loop,
    error_from_envelope,
    is_envelope,
    is_loopback,
)
from rock_core.converters import structure_wire, unstructure_wire
from rock_core.errors import (
    BadRequestRockError,
    CommandTimeout,
    InternalServerRockError,
    InvalidParameter,
    NotSupported,
    PayloadTooLarge,
    RockError,
)

__all__ = ["RemoteTransport"]

T = TypeVar("T")


class _NotSent(Exception):
    """The connection to one admin could not be made: the request never reached it."""

    def __init__(self, error: RockError) -> None:
        super().__init__(str(error))
        self.error = error


class _RoundFailed(Exception):
    """No admin answered one round of a call: ``error`` (raised if it is not retried);
    ``not_sent``: no admin accepted the connection; ``reset``: a connection failed after the
    request was sent (not a timeout)."""

    def __init__(self, error: RockError, *, not_sent: bool, reset: bool) -> None:
        super().__init__(str(error))
        self.error, self.not_sent, self.reset = error, not_sent, reset


class RemoteTransport:
    """Requests to an admin server: the one of ``base_urls`` that answered last, else the next
    (see :meth:`_send`); :class:`RemoteDriver` sets the fields declared here in its ``__init__``."""

    base_urls: tuple[str, ...]
    _preferred: str
    headers: dict[str, str]
    _transport: httpx.AsyncBaseTransport | None
    _clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]]
    _held_clients: weakref.WeakKeyDictionary[
        asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]
    ]
    _clients_lock: threading.Lock
    _answered = False  # an admin has answered this driver (a refusal is then retried)

    @property
    def base_url(self) -> str:
        """The admin tried first: the one that answered last (at first, the first named)."""
        return self._preferred

    @property
    def api_url(self) -> str:
        """:attr:`base_url`'s sandbox routes."""
        return self._preferred + API_PREFIX

    def _new_client(self, held: bool = False, connections: int | None = None) -> httpx.AsyncClient:
        # Held get_status requests get a pool of their own: httpx's pool scans its connections
        # for every queued request, so hundreds of held connections in the one pool made every
        # other call of a busy trainer slow (its CPU, at 1,000 sandboxes starting). Quick calls
        # have small pools of ``connections`` each (QuickPools).
        if connections is not None:
            limits = httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections
            )
        elif held:
            limits = httpx.Limits(max_connections=MAX_HELD, max_keepalive_connections=32)
        else:
            limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        # Proxies from the environment apply to a remote server, never to this machine.
        trust_env = not is_loopback(self.base_url)
        # One TLS context for all of the driver's clients: httpx makes one per client otherwise,
        # reading the CA bundle each time (0.1 s of CPU; a loop has about ten clients).
        contexts = self.__dict__.setdefault("_tls", {})
        if trust_env not in contexts:
            contexts[trust_env] = httpx.create_ssl_context(trust_env=trust_env)
        return httpx.AsyncClient(
            headers=self.headers,
            timeout=DEFAULT_TIMEOUT,
            limits=limits,
            trust_env=trust_env,
            verify=contexts[trust_env],
            transport=self._transport,
        )

    async def _http(self, held: bool = False) -> httpx.AsyncClient:
        """The pooled client of the running event loop (made on first use, closed with the
        loop); with ``held``, the one for requests the admin holds (``get_status?wait=``)."""
        loop = asyncio.get_running_loop()
        clients = self._held_clients if held else self._clients
        with self._clients_lock:
            entry = clients.get(loop)
        if entry is not None and not entry[0].is_closed:
            return entry[0]
        http = self._new_client(held)
        closer = close_with_loop(http)
        await closer.__anext__()
        with self._clients_lock:
            current = clients.get(loop)
            if current is None or current[0].is_closed:
                clients[loop] = (http, closer)
                return http
        await closer.aclose()  # another task of this loop made one first
        return current[0]

    async def _quick(self) -> QuickPools:
        """The running event loop's pools of quick calls, within
        :func:`~rock.sdk._drivers.remote_retry.max_in_flight` (made on first use, closed with
        the loop)."""
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            quick = self.__dict__.setdefault("_quick_pools", weakref.WeakKeyDictionary())
            entry = quick.get(loop)
        if entry is not None:
            return cast(QuickPools, entry[0])
        pools = QuickPools(lambda n: self._new_client(connections=n), max_in_flight())
        closer = pools.closed_with_loop()
        await closer.__anext__()
        with self._clients_lock:
            current = quick.get(loop)
            if current is None:
                quick[loop] = (pools, closer)
                return pools
        await closer.aclose()  # another task of this loop made them first
        return cast(QuickPools, current[0])

    async def aclose(self) -> None:
        """Close the connection pools of the running event loop (others close with their loops)."""
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            entries = [self._clients.pop(loop, None), self._held_clients.pop(loop, None)]
            entries.append(self.__dict__.get("_quick_pools", {}).pop(loop, None))
        for entry in entries:
            if entry is not None:
                await entry[1].aclose()

    def call_blocking(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``func(*args)`` (e.g. ``driver.get_status``) to completion from synchronous code.

        It runs in a private event loop of the calling thread, as the embedded driver's
        ``call_blocking`` lets synchronous callers use it.

        :raises RuntimeError: called from a thread whose event loop is running (``await`` instead).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(awaited(func(*args)))
        raise RuntimeError(
            "call_blocking cannot be used from a running event loop; await the call instead"
        )

    def _unreachable(
        self, exc: Exception, attempted: str, sandbox_id: str | None, url: str | None = None
    ) -> InternalServerRockError:
        return InternalServerRockError(
            f"rock admin at {url or self.base_url} is unreachable: is `rock admin start` running? ({exc!r})",
            sandbox_id=sandbox_id,
            attempted=attempted,
        )

    def _timed_out(
        self,
        attempted: str,
        sandbox_id: str | None,
        timeout: httpx.Timeout | None,
        url: str | None = None,
    ) -> CommandTimeout:
        seconds = (timeout or DEFAULT_TIMEOUT).read
        within = f" within {seconds:g}s" if seconds is not None else " in time"
        return CommandTimeout(
            f"rock admin at {url or self.base_url} did not answer {attempted}{within}",
            sandbox_id=sandbox_id,
            attempted=attempted,
        )

    def _raise_for_response(
        self, response: httpx.Response, attempted: str, sandbox_id: str | None
    ) -> Any:
        """The envelope's ``result``, or the error the response stands for."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and "status" in body and ("result" in body or "error" in body):
            if body.get("status") == "Success":
                return body.get("result")
            raise error_from_envelope(body, sandbox_id=sandbox_id, attempted=attempted)
        detail = (
            body.get("detail")
            if isinstance(body, dict) and "detail" in body
            else (body or response.text)
        )
        where = f"{response.request.method} {response.request.url.path}"
        kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": attempted}
        if response.status_code == 413:
            raise PayloadTooLarge(
                f"rock admin at {self.base_url} refused {attempted}: the body is too large", **kw
            )
        if response.status_code in (401, 403):
            raise BadRequestRockError(
                f"rock admin at {self.base_url} refused {attempted} (HTTP {response.status_code}): {detail}; "
                "set ROCK_API_KEY or an X-API-Key / Authorization header in extra_headers",
                **kw,
            )
        if response.status_code in (404, 405):
            raise NotSupported(
                f"rock admin at {self.base_url} does not serve {where} (HTTP {response.status_code}); "
                "is it an older rock or another server?",
                **kw,
            )
        if 400 <= response.status_code < 500:
            raise BadRequestRockError(f"{attempted}: HTTP {response.status_code}: {detail}", **kw)
        raise InternalServerRockError(
            f"rock admin at {self.base_url} answered {where} with HTTP {response.status_code}: {detail}",
            **kw,
        )

    async def _send(
        self,
        method: str,
        route: str,
        attempted: str,
        sandbox_id: str | None,
        *,
        timeout: httpx.Timeout | None = None,
        held: bool = False,
        **kw: Any,
    ) -> httpx.Response:
        """Send a call to the admin that answered last, then to the others in turn
        (:meth:`_send_round`); again after a pause while the admin is busy or unreachable, as
        :mod:`rock.sdk._drivers.remote_retry` says, within the call's timeout."""
        http = await self._http(held)
        if timeout is not None:
            kw["timeout"] = timeout
        retrying = Retrying((timeout or DEFAULT_TIMEOUT).read)
        kw["quick"] = None if held or timeout is not None else await self._quick()
        repeatable = safe_to_repeat(method, route, kw.get("headers"))
        while True:
            try:
                response = await self._send_round(http, method, route, attempted, sandbox_id, kw)
            except _RoundFailed as failed:
                retry = failed.not_sent and self._answered or failed.reset and repeatable
                pause = retrying.pause() if retry else None
                if pause is None:
                    raise failed.error from failed.error.__cause__
                await asyncio.sleep(pause)
                continue
            self._answered = True
            if response.status_code == 503:
                after = retry_after(response)
                if after is not None or repeatable:
                    pause = retrying.pause(after)
                    if pause is not None:
                        await response.aclose()
                        await asyncio.sleep(pause)
                        continue
            return response

    async def _send_round(
        self,
        http: httpx.AsyncClient,
        method: str,
        route: str,
        attempted: str,
        sandbox_id: str | None,
        kw: dict[str, Any],
    ) -> httpx.Response:
        """One attempt at each admin in turn, from the one that answered last.

        A connection that could not be made (refused, connect timeout) moves on to the next
        admin whatever the call; a failure after the request may have reached one (a read
        timeout, a connection dropped mid-answer) moves on only when the call is safe to repeat
        (:func:`~rock.sdk._drivers.admin_urls.safe_to_repeat`: a start is, with its
        ``Idempotency-Key``, the same in ``kw``'s headers), else it raises naming that URL.
        With one URL the errors are those of a single admin; with several, when all fail, the
        error lists each URL and its reason.

        :raises _RoundFailed: no admin answered (why, and whether the call may be retried).
        """
        order = [self._preferred, *(url for url in self.base_urls if url != self._preferred)]
        failures: list[tuple[str, RockError]] = []
        not_sent = True
        for url in order:
            try:
                response = await self._send_to(url, http, method, route, attempted, sandbox_id, kw)
            except _NotSent as exc:  # never reached that admin: any call may go to the next
                exc.error.__cause__ = exc.__cause__
                failures.append((url, exc.error))
                continue
            except (InternalServerRockError, CommandTimeout) as exc:
                # It may have reached that admin: only a call safe to repeat moves on.
                not_sent = False
                reset = isinstance(exc, InternalServerRockError)  # a timeout is not repeated
                if len(order) == 1 or not safe_to_repeat(method, route, kw.get("headers")):
                    raise _RoundFailed(exc, not_sent=False, reset=reset) from None
                failures.append((url, exc))
                continue
            self._preferred = url
            return response
        if len(failures) == 1:
            error = failures[0][1]
        else:
            reasons = "; ".join(f"{url}: {error}" for url, error in failures)
            error = InternalServerRockError(
                f"no rock admin answered {attempted}: {reasons}",
                sandbox_id=sandbox_id,
                attempted=attempted,
            )
            error.__cause__ = failures[-1][1]
        reset = not not_sent and all(isinstance(e, InternalServerRockError) for _, e in failures)
        raise _RoundFailed(error, not_sent=not_sent, reset=reset)

    async def _send_to(
        self,
        url: str,
        http: httpx.AsyncClient,
        method: str,
        route: str,
        attempted: str,
        sandbox_id: str | None,
        kw: dict[str, Any],
    ) -> httpx.Response:
        """One request to the admin at ``url`` (``kw``'s ``quick``: over those pools, within
        their limit, instead of ``http``); a connection never made raises :class:`_NotSent`."""
        target = url + API_PREFIX + route
        kw = dict(kw)
        quick: QuickPools | None = kw.pop("quick", None)
        try:
            async with quick.client() if quick else contextlib.nullcontext(http) as http:
                try:
                    return await http.request(method, target, **kw)
                except httpx.RemoteProtocolError:
                    # A pooled connection the server closed as we reused it (uvicorn drops idle
                    # keep-alive connections): safe to send again only when the call is
                    # idempotent. A start with an Idempotency-Key is: the admin answers the
                    # key's first start.
                    headers = kw.get("headers")
                    keyed = route in KEYED_POSTS and safe_to_repeat(method, route, headers)
                    if method != "GET" and route not in IDEMPOTENT_POSTS and not keyed:
                        raise
                    return await http.request(method, target, **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _NotSent(self._unreachable(exc, attempted, sandbox_id, url)) from exc
        except httpx.TimeoutException as exc:
            raise self._timed_out(attempted, sandbox_id, kw.get("timeout"), url) from exc
        except httpx.TransportError as exc:
            raise self._unreachable(exc, attempted, sandbox_id, url) from exc

    async def _call(
        self,
        method: str,
        route: str,
        attempted: str,
        sandbox_id: str | None,
        *,
        timeout: httpx.Timeout | None = None,
        held: bool = False,
        **kw: Any,
    ) -> Any:
        """One request (``held``: one the admin holds, on its own pool); return the envelope's
        ``result`` or raise its error."""
        response = await self._send(
            method, route, attempted, sandbox_id, timeout=timeout, held=held, **kw
        )
        if response.status_code in (404, 405, 501) and not is_envelope(response):
            # 501: a server that does not know the method (Python's file server for a POST)
            raise await self._not_served(response, attempted, sandbox_id)
        return self._raise_for_response(response, attempted, sandbox_id)

    async def _not_served(
        self, response: httpx.Response, attempted: str, sandbox_id: str | None
    ) -> RockError:
        """Why a route answered 404/405/501: ``base_url`` is no rock admin, or the admin is
        older."""
        where = f"{response.request.method} {response.request.url.path}"
        kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": attempted}
        try:
            probe = await (await self._http()).get(self.base_url + "/healthz", timeout=5.0)
            health = probe.json() if probe.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            health = None
        if not (
            isinstance(health, dict) and health.get("status") == "ok" and health.get("version")
        ):
            return InvalidParameter(
                f"base_url {self.base_url} does not point at a rock admin: it answered {where} with HTTP "
                f"{response.status_code} and has no rock /healthz; check ROCK_BASE_URL or SandboxConfig.base_url",
                field="base_url",
                value=self.base_url,
                **kw,
            )
        return NotSupported(
            f"the rock admin at {self.base_url} (version {health['version']}) does not serve {where} "
            f"(HTTP {response.status_code}): it is older than this SDK; upgrade it",
            **kw,
        )

    async def _post(
        self,
        route: str,
        attempted: str,
        sandbox_id: str,
        body: Any,
        cls: type[T],
        timeout: httpx.Timeout | None = None,
    ) -> T:
        payload = body if isinstance(body, dict) else unstructure_wire(body)
        result = await self._call(
            "POST",
            route,
            attempted,
            sandbox_id,
            json={**payload, "sandbox_id": sandbox_id},
            timeout=timeout,
        )
        return structure_wire(result, cls, forbid_extra_keys=False)

    async def _stream(
        self,
        route: str,
        attempted: str,
        sandbox_id: str,
        body: dict[str, Any],
        timeout: httpx.Timeout,
        *,
        lines: bool,
    ) -> AsyncGenerator[Any, None]:
        """POST ``body`` and yield the streamed answer's lines (``lines``) or byte chunks.

        A failure before the stream starts comes as ROCK's JSON envelope and is raised; a
        connection lost midway is raised as the server being unreachable.
        """
        http = await self._http()
        try:
            async with http.stream(
                "POST",
                self.api_url + route,
                json={**body, "sandbox_id": sandbox_id},
                timeout=timeout,
            ) as response:
                kind = response.headers.get("content-type", "")
                if response.status_code >= 400 or kind.startswith("application/json"):
                    await response.aread()
                    self._raise_for_response(response, attempted, sandbox_id)
                    raise InternalServerRockError(
                        f"rock admin at {self.base_url} answered {attempted} with JSON instead of a stream",
                        sandbox_id=sandbox_id,
                        attempted=attempted,
                    )
                items = response.aiter_lines() if lines else response.aiter_bytes()
                async for item in items:
                    yield item
        except httpx.TimeoutException as exc:
            raise self._timed_out(attempted, sandbox_id, timeout) from exc
        except httpx.TransportError as exc:
            raise self._unreachable(exc, attempted, sandbox_id) from exc
