"""E2B's data plane (``E2B_SANDBOX_URL`` = ``http://<admin>/e2b/envd``): envd's Connect services
``process.Process`` and ``filesystem.Filesystem`` (served by ``connectrpc``'s ASGI applications,
generated from envd's ``.proto`` files) and envd's plain HTTP ``/files`` and ``/health``.

Each request names its sandbox in ``E2b-Sandbox-Id`` and carries its access token in
``X-Access-Token`` (:mod:`rock_e2b.access`): the routes are open (the admin checks no API key)
and check the token themselves. A Connect request is handed to the service's ASGI application
as it came; its answer streams back as the application sends it (:func:`serve_asgi`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import attrs
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from rock_core.errors import BadRequestRockError, RockError, SandboxNotFound
from rock_core.models import SandboxRecord
from rock_core.routes import AdminRoute, RouteRequest, RouteResponse, RouteStream
from rock_core.states import State
from rock_e2b.access import E2BError, error_response, token_matches
from rock_e2b.control import PREFIX as CONTROL_PREFIX

__all__ = ["PREFIX", "Target", "current", "rock_failure", "routes", "serve_asgi"]

PREFIX = f"{CONTROL_PREFIX}/envd"
#: Messages of an answer waiting for its caller to read them.
_QUEUED = 16
#: Seconds an answer's message waits for room before the application is ended.
_SEND_WAIT = 600.0


@attrs.frozen
class Target:
    """The sandbox a data-plane request acts on, and the engine that holds it."""

    engine: Any
    record: SandboxRecord
    headers: dict[str, str]
    query: dict[str, str] = attrs.field(factory=dict)

    @property
    def sandbox_id(self) -> str:
        return self.record.sandbox_id

    @property
    def user(self) -> str | None:
        """The user a call asks to act as (envd's ``Authorization: Basic <user>:``, or the
        ``username`` of ``/files``); ``None``: the default."""
        header = self.headers.get("authorization", "")
        if header.lower().startswith("basic "):
            try:
                return base64.b64decode(header[6:]).decode().split(":", 1)[0] or None
            except ValueError:
                return None
        return self.query.get("username") or None

    def other_user(self) -> str | None:
        """:attr:`user`, unless it is the rocklet's own (``root``): rock runs E2B's commands and
        file calls as the sandbox's user, and serves no other."""
        user = self.user
        return None if user in (None, "root") else user


#: The request's :class:`Target`, set around the Connect application's call.
current: contextvars.ContextVar[Target] = contextvars.ContextVar("rock_e2b_target")


def target(request: RouteRequest) -> Target:
    """The sandbox ``request`` names, if its token is that sandbox's; else E2B's 401 or 404."""
    sandbox_id = request.headers.get("e2b-sandbox-id", "")
    token = request.headers.get("x-access-token")
    if not sandbox_id:
        raise E2BError(400, "E2b-Sandbox-Id: the sandbox id header is required")
    try:
        record: SandboxRecord = request.engine.get_record(sandbox_id)
    except Exception:
        record = None  # type: ignore[assignment]
    if record is None or not token_matches(record, token):
        # The same answer for an unknown id and a wrong token: nothing is learned of ids.
        raise E2BError(401, f"sandbox {sandbox_id!r}: unknown sandbox or wrong access token")
    if record.state is not State.RUNNING:
        raise E2BError(502, f"The sandbox {sandbox_id} was not found: it is {record.state.value}")
    if record.paused:
        raise E2BError(502, f"The sandbox {sandbox_id} is paused: Sandbox.connect resumes it")
    return Target(request.engine, record, dict(request.headers), dict(request.query))


def rock_failure(exc: RockError) -> ConnectError:
    """A rock error met while serving a Connect call, as Connect's error saying it."""
    if isinstance(exc, SandboxNotFound):
        return ConnectError(Code.UNAVAILABLE, f"The sandbox was not found: {exc.message}")
    if isinstance(exc, BadRequestRockError):
        return ConnectError(Code.FAILED_PRECONDITION, exc.message)
    return ConnectError(Code.UNAVAILABLE, exc.message)


async def serve_asgi(app: Any, request: RouteRequest, path: str) -> RouteStream:
    """Call the ASGI application ``app`` with ``request`` (at ``path``) and answer what it sends,
    as it sends it. The application runs in a task of its own (it outlives this handler: the
    admin reads the answer after the handler returns), cancelled when the answer ends or the
    client goes away."""
    # Bounded: a caller that does not read holds the application back (a command's stream
    # then misses its oldest output, process.KEPT_OUTPUT), not the admin's memory.
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=_QUEUED)
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect is announced: the task is cancelled
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        # A caller gone without a word (its answer never read) ends the application in time.
        await asyncio.wait_for(queue.put(message), _SEND_WAIT)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        except Exception as exc:  # answered as a 500 if nothing was sent yet
            with contextlib.suppress(TimeoutError):
                await send({"type": "rock.failed", "error": exc})
        finally:
            with contextlib.suppress(TimeoutError):
                await send({"type": "rock.done"})

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": urllib.parse.urlencode(dict(request.query)).encode(),
        "headers": [(k.encode(), v.encode()) for k, v in request.headers.items()],
        "client": None,
        "server": None,
        "extensions": {},
    }
    task = asyncio.get_running_loop().create_task(run())
    first = await queue.get()
    if first["type"] != "http.response.start":
        task.cancel()
        error = first.get("error")
        return _plain(500, f"{type(error).__name__}: {error}" if error else "no answer")
    headers = {k.decode().lower(): v.decode() for k, v in first.get("headers", [])}
    media_type = headers.pop("content-type", "application/octet-stream")
    headers.pop("content-length", None)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while True:
                message = await queue.get()
                if message["type"] != "http.response.body":
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    return
        finally:
            task.cancel()

    return RouteStream(chunks(), status=first["status"], headers=headers, media_type=media_type)


def _plain(status: int, message: str) -> RouteStream:
    import json

    async def one() -> AsyncIterator[bytes]:
        yield json.dumps({"code": status, "message": message}).encode()

    return RouteStream(one(), status=status, media_type="application/json")


def _connect_route(service: str, method: str, app: Any) -> AdminRoute:
    rpc_path = f"/{service}/{method}"

    async def handler(request: RouteRequest) -> Any:
        try:
            where = target(request)
        except E2BError as exc:
            return error_response(exc)
        token = current.set(where)
        try:
            return await serve_asgi(app, request, rpc_path)
        finally:
            current.reset(token)

    return AdminRoute(
        "POST",
        f"{PREFIX}{rpc_path}",
        handler,
        summary=f"E2B envd: {service}.{method} (Connect RPC)",
        json_body=False,
        open=True,
    )


def routes() -> list[AdminRoute]:
    """The data plane's routes, under :data:`PREFIX`."""
    from rock_e2b import files, filesystem, process

    answer = [_connect_route("process.Process", m, process.application()) for m in process.METHODS]
    answer += [
        _connect_route("filesystem.Filesystem", m, filesystem.application())
        for m in filesystem.METHODS
    ]

    def guarded(handler: Any) -> Any:
        async def wrapped(request: RouteRequest) -> Any:
            try:
                return await handler(target(request), request)
            except E2BError as exc:
                return error_response(exc)
            except RockError as exc:  # the sandbox stopped or paused meanwhile
                return error_response(E2BError(502, exc.message))

        return wrapped

    async def health(where: Target, request: RouteRequest) -> Any:
        return RouteResponse({}, status=200)

    answer += [
        AdminRoute("GET", f"{PREFIX}/files", guarded(files.read), json_body=False, open=True),
        AdminRoute("POST", f"{PREFIX}/files", guarded(files.write), json_body=False, open=True),
        AdminRoute("GET", f"{PREFIX}/health", guarded(health), json_body=False, open=True),
    ]
    return answer
