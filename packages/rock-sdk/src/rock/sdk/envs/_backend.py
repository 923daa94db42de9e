"""Where envs run: this process's embedded engine, or rock's admin over HTTP.

Both speak in env handles (the ``sandbox_id`` of ROCK's GEM API) and raise
:class:`~rock_core.envs.EnvFailed` (with its ``kind``) for an env's failure and
:class:`~rock_core.errors.InvalidParameter` for a malformed call. Every method exists twice:
``a``-prefixed for asyncio callers, plain for synchronous ones.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from rock.sdk._drivers.admin_urls import admin_urls
from rock_core.envs import EnvFailed
from rock_core.errors import BadRequestRockError, InternalServerRockError, InvalidParameter

__all__ = ["Backend", "EmbeddedBackend", "RemoteBackend", "backend_for"]

#: ROCK's GEM API on the admin.
PREFIX = "/apis/v1/envs/gem"
#: Seconds an HTTP call to the admin may take (ROCK's client waits 300 s).
HTTP_TIMEOUT = 330.0

#: A batched call: ``("reset", handle, {"seed": s})``, ``("step", handle, {"action": a})``,
#: ``("make", None, {"env_id": ..., "kwargs": ..., "image": ...})``, ``("close", handle, {})``.
Call = tuple[str, "str | None", Mapping[str, Any]]


class Backend:
    """The calls an env makes; see :class:`EmbeddedBackend` and :class:`RemoteBackend`."""

    async def abatch(self, calls: Sequence[Call]) -> list[Any]:
        """Run ``calls`` together; each result is the call's answer (ROCK's JSON shape) or its error.

        The batches asked in one turn of the caller's event loop go as one (a vector env's
        steps and, beside them, the resets of its ended envs: one round trip, one message to
        each env process). They were concurrent, so their order was never given; each env's
        calls keep theirs. Only resets and steps go together (makes and closes go as asked)."""
        if any(op not in ("reset", "step") for op, _, _ in calls):
            return await self._abatch(calls)
        loop = asyncio.get_running_loop()
        togethers = self.__dict__.get("_togethers")
        if togethers is None:
            togethers = self.__dict__.setdefault("_togethers", weakref.WeakKeyDictionary())
        together = togethers.get(loop)
        if together is None:
            together = togethers.setdefault(loop, _Together(self._abatch))
        return await together.add(loop, calls)

    async def _abatch(self, calls: Sequence[Call]) -> list[Any]:
        """Run ``calls`` now, as one batch."""
        raise NotImplementedError

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        """:meth:`abatch` for synchronous callers."""
        raise NotImplementedError

    async def acall(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """One call; its error raised."""
        return _raise_or(await self.abatch([(op, handle, args)]))

    def call(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """:meth:`acall` for synchronous callers."""
        return _raise_or(self.batch([(op, handle, args)]))


class _Together:
    """The batches asked of one backend in one turn of one event loop, sent as one."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.waiting: list[tuple[list[Call], asyncio.Future[list[Any]]]] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def add(self, loop: asyncio.AbstractEventLoop, calls: Sequence[Call]) -> asyncio.Future[Any]:
        future: asyncio.Future[list[Any]] = loop.create_future()
        if self.waiting is None:
            self.waiting = []
            loop.call_soon(self._send, loop)  # after the other tasks ready in this turn
        self.waiting.append((list(calls), future))
        return future

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        waiting, self.waiting = self.waiting or [], None
        task = loop.create_task(self._run(waiting))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, waiting: list[tuple[list[Call], asyncio.Future[list[Any]]]]) -> None:
        calls = waiting[0][0] if len(waiting) == 1 else [c for part, _ in waiting for c in part]
        try:
            try:
                results = await self.run(calls)
            except InvalidParameter:  # refused before any call ran: whose? each part alone
                if len(waiting) == 1:
                    raise
                for part, future in waiting:
                    await self._run([(part, future)])
                return
        except BaseException as exc:
            for _, future in waiting:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        at = 0
        for part, future in waiting:
            if not future.done():
                future.set_result(results[at : at + len(part)])
            at += len(part)


def _raise_or(results: list[Any]) -> Any:
    if isinstance(results[0], BaseException):
        raise results[0]
    return results[0]


# -- embedded ------------------------------------------------------------------------------------


class EmbeddedBackend(Backend):
    """Envs of this process's embedded engine (:func:`rock.sdk.get_embedded_driver`), made with
    ``SandboxManager.make_env``; this backend keeps them by handle."""

    def __init__(self) -> None:
        from rock.sdk._drivers.embedded_default import get_embedded_driver

        self.engine = get_embedded_driver()
        self._envs: dict[str, Any] = {}
        self._closed: set[str] = set()

    def _env(self, handle: str | None) -> Any:
        env = self._envs.get(handle or "")
        if env is None:
            why = (
                "it was closed"
                if handle in self._closed
                else "no env was made with this id in this process"
            )
            raise EnvFailed(f"sandbox_id {handle!r}: no env ({why})", kind="no_env")
        return env

    async def _one(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        if op == "make":
            extra = {"image": args["image"]} if args.get("image") else {}
            env = await self.engine.manager.make_env(
                args["env_id"], **extra, **dict(args.get("kwargs") or {})
            )
            handle = getattr(env, "handle", None) or f"env-{id(env):x}"
            self._envs[handle] = env
            return {"sandbox_id": handle}
        if op == "close":
            env = self._envs.pop(handle or "", None)
            if env is None and handle not in self._closed:
                self._env(handle)
            self._closed.add(handle or "")
            if env is not None:
                await env.close()
            return {"sandbox_id": handle}
        env = self._env(handle)
        if op == "reset":
            return _shape("reset", await env.reset(args.get("seed")))
        return _shape("step", await env.step(args["action"]))

    async def _run(self, calls: Sequence[Call]) -> list[Any]:
        # On the engine's loop, where the envs live. Resets and steps of envs whose provider
        # batches (GEM's: one rocklet request per sandbox) go to it together.
        import anyio

        results: list[Any] = [None] * len(calls)
        batched: dict[Any, list[tuple[int, Any, str, dict[str, Any]]]] = {}

        async def single(i: int, op: str, handle: str | None, args: Mapping[str, Any]) -> None:
            try:
                results[i] = await self._one(op, handle, args)
            except Exception as exc:  # noqa: BLE001 - reported in its place
                results[i] = exc

        async def together(
            provider: Any, items: list[tuple[int, Any, str, dict[str, Any]]]
        ) -> None:
            answers = await provider.batch([(env, op, args) for _, env, op, args in items])
            for (i, _, op, _), answer in zip(items, answers):
                results[i] = answer if isinstance(answer, BaseException) else _shape(op, answer)

        singles: list[int] = []
        for i, (op, handle, args) in enumerate(calls):
            env = self._envs.get(handle or "") if op in ("reset", "step") else None
            provider = getattr(env, "provider", None)
            if env is not None and callable(getattr(provider, "batch", None)):
                batched.setdefault(provider, []).append((i, env, op, dict(args)))
            else:
                singles.append(i)
        if not singles and len(batched) == 1:  # a vector env's steps: no task group
            for provider, items in batched.items():
                await together(provider, items)
            return results
        async with anyio.create_task_group() as tg:
            for i in singles:
                tg.start_soon(single, i, *calls[i])
            for provider, items in batched.items():
                tg.start_soon(together, provider, items)
        return results

    async def _abatch(self, calls: Sequence[Call]) -> list[Any]:
        """(asyncio) Run ``calls`` on the engine's loop."""
        return await self.engine._call(self._run, list(calls))

    async def acall(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """(asyncio) One call on the engine's loop, its error raised."""
        return await self.engine._call(self._one, op, handle, args)

    def call(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """(blocking) One call on the engine's loop, its error raised."""
        return self.engine.call_blocking(self._one, op, handle, args)

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        """(blocking) Run ``calls`` on the engine's loop."""
        return self.engine.call_blocking(self._run, list(calls))


def _shape(op: str, answer: Any) -> dict[str, Any]:
    """ROCK's JSON shape of a reset or step answer (a tuple from an env, or a dict)."""
    if isinstance(answer, dict):
        return answer
    if op == "reset":
        observation, info = answer
        return {"observation": observation, "info": info}
    observation, reward, terminated, truncated, info = answer
    return {
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "info": info,
    }


# -- remote --------------------------------------------------------------------------------------


class RemoteBackend(Backend):
    """Envs of rock's admin at ``base_url`` (ROCK's GEM API; batches through rock's ``batch``).

    :param base_url: one admin, or several (the admins of a cluster): a call goes to the one
        that answered last, and moves to the next only when it could not connect at all (the
        request never left, so nothing can happen twice).
    :param api_key: sent as ``X-API-Key`` (default ``$ROCK_API_KEY``).
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        from rock.sdk._drivers.remote import remote_headers

        self.base_urls = admin_urls(base_url)
        self.base_url = self.base_urls[0]
        self.headers = remote_headers(headers, api_key=api_key)
        self._sync: httpx.Client | None = None
        self._lock = threading.Lock()
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._sync is None:
                self._sync = httpx.Client(
                    headers=self.headers,
                    timeout=HTTP_TIMEOUT,
                    trust_env=False,
                )
            return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            client = httpx.AsyncClient(
                headers=self.headers,
                timeout=HTTP_TIMEOUT,
                limits=limits,
                trust_env=False,
            )
            self._async[loop] = client
        return client

    @staticmethod
    def _body(calls: Sequence[Call]) -> dict[str, Any]:
        out = []
        for op, handle, args in calls:
            item: dict[str, Any] = {"op": op, **args}
            if handle is not None:
                item["sandbox_id"] = handle
            out.append(item)
        return {"calls": out}

    def _answer(self, response: httpx.Response) -> list[Any]:
        _refused_key(response, self.base_url)
        body = _json(response, self.base_url)
        if response.status_code == 500:
            raise EnvFailed(
                str(body.get("detail", body)),
                kind=str(body.get("kind", "env_error")),
                traceback=body.get("traceback") or (),
            )
        if response.status_code == 404:
            raise InternalServerRockError(
                f"the server at {self.base_url} does not serve ROCK's GEM API ({PREFIX}); install rock-gem where the admin runs"
            )
        if response.status_code != 200:
            raise InternalServerRockError(
                f"{self.base_url}{PREFIX}/batch answered HTTP {response.status_code}: {response.text[:300]}"
            )
        if body.get("status") == "Failed":
            raise InvalidParameter(str(body.get("error") or body.get("message")))
        results: list[Any] = []
        for item in body["results"]:
            err = item.get("error") if isinstance(item, dict) else None
            if err is not None:
                results.append(
                    EnvFailed(str(err.get("detail", "")), kind=str(err.get("kind", "env_error")))
                )
            else:
                results.append(item)
        return results

    @staticmethod
    def _single(op: str, handle: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {k: v for k, v in args.items() if v is not None}
        if handle is not None:
            body["sandbox_id"] = handle
        return body

    def _single_answer(self, response: httpx.Response) -> Any:
        _refused_key(response, self.base_url)
        body = _json(response, self.base_url)
        if (
            response.status_code == 200
            and isinstance(body, dict)
            and body.get("status") != "Failed"
        ):
            return body
        if response.status_code == 200:
            raise InvalidParameter(str(body.get("error") or body.get("message")))
        if response.status_code == 404:
            raise InternalServerRockError(
                f"the server at {self.base_url} does not serve ROCK's GEM API ({PREFIX}); install rock-gem where the admin runs"
            )
        if isinstance(body, dict) and "detail" in body:
            raise EnvFailed(
                str(body["detail"]),
                kind=str(body.get("kind", "env_error")),
                traceback=body.get("traceback") or (),
            )
        raise InternalServerRockError(
            f"{self.base_url}{PREFIX} answered HTTP {response.status_code}: {response.text[:300]}"
        )

    def call(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """(blocking) ROCK's own endpoint for one call (``POST .../step``), so a ROCK admin serves it too."""
        return self._single_answer(self._post(f"{PREFIX}/{op}", self._single(op, handle, args)))

    async def acall(self, op: str, handle: str | None, args: Mapping[str, Any]) -> Any:
        """(asyncio) ROCK's own endpoint for one call."""
        answer = await self._apost(f"{PREFIX}/{op}", self._single(op, handle, args))
        return self._single_answer(answer)

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        """(blocking) One ``POST .../batch`` for all of ``calls``."""
        return self._answer(self._post(f"{PREFIX}/batch", self._body(calls)))

    async def _abatch(self, calls: Sequence[Call]) -> list[Any]:
        """(asyncio) One ``POST .../batch`` for all of ``calls``."""
        return self._answer(await self._apost(f"{PREFIX}/batch", self._body(calls)))

    def _order(self) -> list[str]:
        """The admins to try: the one that answered last first."""
        return [self.base_url, *(u for u in self.base_urls if u != self.base_url)]

    def _unreachable(self, tried: list[str], exc: httpx.HTTPError) -> InternalServerRockError:
        where = ", ".join(tried)
        return InternalServerRockError(f"rock's admin at {where} is unreachable: {exc!r}")

    def _post(self, path: str, body: Any) -> httpx.Response:
        """(blocking) POST ``body`` to ``path``, moving on only past admins it cannot connect to."""
        tried: list[str] = []
        for url in self._order():
            tried.append(url)
            try:
                response = self._client().post(url + path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if len(tried) < len(self.base_urls):
                    continue
                raise self._unreachable(tried, exc) from exc
            except httpx.HTTPError as exc:
                raise self._unreachable([url], exc) from exc
            self.base_url = url
            return response
        raise AssertionError("unreachable")  # pragma: no cover - base_urls is never empty

    async def _apost(self, path: str, body: Any) -> httpx.Response:
        """(asyncio) :meth:`_post`."""
        tried: list[str] = []
        for url in self._order():
            tried.append(url)
            try:
                response = await self._aclient().post(url + path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if len(tried) < len(self.base_urls):
                    continue
                raise self._unreachable(tried, exc) from exc
            except httpx.HTTPError as exc:
                raise self._unreachable([url], exc) from exc
            self.base_url = url
            return response
        raise AssertionError("unreachable")  # pragma: no cover - base_urls is never empty


def _json(response: httpx.Response, where: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise InternalServerRockError(
            f"{where} answered HTTP {response.status_code} without JSON: {response.text[:300]}"
        ) from None


_remote: dict[tuple[tuple[str, ...], str | None], RemoteBackend] = {}
_remote_lock = threading.Lock()
_embedded: EmbeddedBackend | None = None


def backend_for(base_url: str | Sequence[str] | None, api_key: str | None = None) -> Backend:
    """The admin at ``base_url`` (default ``$ROCK_BASE_URL``), else the embedded engine.

    Several admins (a comma list or a list, as for sandboxes): an env call moves to the next only
    when it could not connect (a make starts a sandbox, a step changes an env: neither is sent
    twice once it may have arrived).
    """
    global _embedded
    named = base_url or os.environ.get("ROCK_BASE_URL") or None
    if named is None:
        with _remote_lock:
            if _embedded is None or _embedded.engine.closed:
                _embedded = EmbeddedBackend()
            return _embedded
    urls = admin_urls(named)
    key = (urls, api_key)
    with _remote_lock:
        backend = _remote.get(key)
        if backend is None:
            backend = _remote[key] = RemoteBackend(urls, api_key=api_key)
        return backend


def _refused_key(response: httpx.Response, base_url: str) -> None:
    """Raise for an answer that refused the caller's key (HTTP 401/403): a bad request that
    says what to set, as the sandbox calls do, never a server error."""
    if response.status_code in (401, 403):
        raise BadRequestRockError(
            f"rock admin at {base_url} refused the GEM call (HTTP {response.status_code}): "
            "it needs an API key it knows; set ROCK_API_KEY or an X-API-Key header"
        )
