"""Remote mode: the SDK talks to rock's admin server (``rock admin start``) over HTTP.

:class:`RemoteDriver` implements :class:`~rock.sdk._drivers.base.Driver` with ROCK's HTTP API, as
ROCK's own SDK does (reference §2.2 headers, §2.3 routes, §4.1 envelope): every call goes to
``{base_url}/apis/envs/sandbox/v1/<route>`` and answers ``{status, message, error, result}``. rock's
additions (sessions interrupted, streamed commands, downloads, directory listings, background
processes) live under the same prefix, named like the rocklet's routes, with ``sandbox_id`` added.

Errors are translated once, here: a ``Failed`` envelope becomes the most specific
:class:`~rock_core.errors.RockError` for its ``result.code`` (the same classes embedded mode
raises), a server that does not answer becomes an :class:`~rock_core.errors.InternalServerRockError`
naming its URL, and a call that outlives its own timeout becomes a
:class:`~rock_core.errors.CommandTimeout`.

A handle may be used from several event loops (``asyncio.run`` twice, threads); an ``AsyncClient``
belongs to its loop, so the driver keeps a pooled client per running loop, closed with the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from rock.sdk._drivers.admin_urls import admin_urls
from rock.sdk._drivers.connect import (
    PortConnection,
    Shell,
    WebSocketConnection,
    WebSocketShell,
    check_port,
    connect_websocket,
)
from rock.sdk._drivers.remote_starts import RemoteStarts
from rock.sdk._drivers.remote_wire import (
    API_PREFIX,
    command_timeout,
    error_from_envelope,
    remote_headers,
)
from rock_core.actions import (
    Command,
    CommandLine,
    ForkResponse,
    ProcessInfo,
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    SnapshotInfo,
    SnapshotListResponse,
    UploadResponse,
    WarmPoolsResponse,
    WarmPoolStatus,
)
from rock_core.converters import structure_wire, unstructure_wire
from rock_core.errors import (
    InternalServerRockError,
    InvalidParameter,
    error_for_code,
)
from rock_core.operations import Operation
from rock_core.rocklet_client import process_request

#: A snapshot copies the sandbox's changed files: it may take longer than a plain call.
_SNAPSHOT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)

__all__ = [
    "API_PREFIX",
    "RemoteDriver",
    "error_from_envelope",
    "get_remote_driver",
    "remote_headers",
]

Req = TypeVar("Req")
Resp = TypeVar("Resp")

# Sandboxes asked for per page when listing (within the admin's default batch_max_count).
_LIST_PAGE_SIZE = 500


class RemoteDriver(RemoteStarts):
    """Sandboxes of a rock (or ROCK) admin server, through its HTTP API.

    :param base_url: the server, e.g. ``http://127.0.0.1:8080`` (``config.base_url`` or
        ``ROCK_BASE_URL``); a trailing ``/`` is ignored. Several admins of one cluster: a list,
        or URLs separated by commas. A call goes first to the admin that answered last; one
        whose connection could not be made moves to the next, and one that may have reached an
        admin (a read timeout, a connection dropped mid-answer) moves on only when it is safe to
        repeat (GETs, file reads, stop, delete, a start with its ``Idempotency-Key``): a command
        or a write raises, naming the URL. When every admin fails, the error lists each URL and
        its reason.
    :param headers: sent with every call (ROCK's ``X-Cluster``, ``X-User-Id``, ...,
        ``extra_headers``); see :func:`remote_headers` for the API key.
    :param api_key: sent as ``X-API-Key`` (default: ``ROCK_API_KEY``).
    :param transport: an ``httpx`` transport to use instead of the default one (a Unix socket,
        retries on connect).

    Implements :class:`~rock.sdk._drivers.base.Driver`. Use :func:`get_remote_driver` to share
    one driver (and its connection pools) among sandboxes of the same server and headers.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        headers: Mapping[str, str] | None = None,
        *,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_urls = admin_urls(base_url)
        self._preferred = self.base_urls[0]
        self.headers = remote_headers(headers, api_key=api_key)
        self._transport = transport
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]
        ] = weakref.WeakKeyDictionary()
        self._held_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]
        ] = weakref.WeakKeyDictionary()
        self._clients_lock = threading.Lock()
        self._held = 0  # get_status requests held by the admin now (wait_until_running)

    def __repr__(self) -> str:
        urls = self.base_urls[0] if len(self.base_urls) == 1 else list(self.base_urls)
        return f"RemoteDriver({urls!r})"

    # -- Driver: lifecycle -----------------------------------------------------------------------

    async def set_warm_pool(self, request: SandboxStartRequest, size: int) -> None:
        """``POST /warmup/tasks`` with rock's ``size``: the admin keeps that many sandboxes ready."""
        body = {**unstructure_wire(request), "size": size}
        await self._call("POST", "/warmup/tasks", "set_warm_pool", None, json=body)

    async def warm_pools(self) -> list[WarmPoolStatus]:
        """``GET /warm_pools``: the admin's warm pools."""
        result = await self._call("GET", "/warm_pools", "warm_pools", None)
        return structure_wire(result, WarmPoolsResponse, forbid_extra_keys=False).pools

    async def snapshot(
        self, sandbox_id: str, name: str | None = None, archive: bool = False
    ) -> SnapshotInfo:
        """(rock) ``POST /sandboxes/{id}/snapshot``: keep the sandbox's files as a snapshot."""
        body: dict[str, Any] = {"name": name} if name else {}
        if archive:
            body["archive"] = True
        return await self._posted(
            f"/sandboxes/{sandbox_id}/snapshot", "snapshot", sandbox_id, SnapshotInfo,
            json=body, timeout=_SNAPSHOT_TIMEOUT,
        )  # fmt: skip

    async def list_snapshots(self) -> list[SnapshotInfo]:
        """(rock) ``GET /snapshots``: the key's tenant's snapshots."""
        result = await self._call("GET", "/snapshots", "snapshots", None)
        return structure_wire(result, SnapshotListResponse, forbid_extra_keys=False).snapshots

    async def delete_snapshot(self, name: str) -> None:
        """(rock) ``POST /snapshots/delete``."""
        await self._call("POST", "/snapshots/delete", "delete_snapshot", None, json={"name": name})

    async def fork(self, sandbox_id: str, count: int) -> ForkResponse:
        """(rock) ``POST /sandboxes/{id}/fork``: a snapshot and ``count`` starts from it."""
        return await self._posted(
            f"/sandboxes/{sandbox_id}/fork", "fork", sandbox_id, ForkResponse,
            json={"count": count}, timeout=_SNAPSHOT_TIMEOUT,
        )  # fmt: skip

    async def list_sandboxes(
        self, filters: Mapping[str, str] | None = None
    ) -> list[SandboxStatusResponse]:
        """``GET /sandboxes``, page after page: every pending and running sandbox the key may see."""
        items = await self.list_sandbox_items(filters)
        return [
            structure_wire(item, SandboxStatusResponse, forbid_extra_keys=False) for item in items
        ]

    async def list_sandbox_items(
        self, filters: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`list_sandboxes` as the admin's JSON items, not read into models: for a caller
        that only prints them (``rock sandbox list``: reading 1,000 statuses into models costs
        more than fetching them)."""
        items: list[dict[str, Any]] = []
        page = 1
        while True:
            result = await self._call(
                "GET",
                "/sandboxes",
                "list_sandboxes",
                None,
                params={"page": page, "page_size": _LIST_PAGE_SIZE, **(filters or {})},
            )
            page_items = result.get("items") or []
            items += page_items
            if not result.get("has_more") or not page_items:
                return items
            page += 1

    async def stop(self, sandbox_id: str) -> None:
        """``POST /stop``."""
        await self._call("POST", "/stop", "stop", sandbox_id, json={"sandbox_id": sandbox_id})

    async def delete(self, sandbox_id: str) -> None:
        """``POST /delete``."""
        await self._call("POST", "/delete", "delete", sandbox_id, json={"sandbox_id": sandbox_id})

    async def archive(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/archive``: start archiving a stopped sandbox."""
        await self._call("POST", f"/sandboxes/{sandbox_id}/archive", "archive", sandbox_id, json={})

    async def _posted(self, path: str, name: str, sandbox_id: str, model: type, **kw: Any) -> Any:
        kw.setdefault("json", {"sandbox_id": sandbox_id})
        result = await self._call("POST", path, name, sandbox_id, **kw)
        return structure_wire(result, model, forbid_extra_keys=False)

    async def restart(self, sandbox_id: str) -> SandboxStartResponse:
        """``POST /restart``; wait with :meth:`wait_until_running`."""
        return await self._posted("/restart", "restart", sandbox_id, SandboxStartResponse)

    async def pause(self, sandbox_id: str) -> SandboxStatusResponse:
        """``POST /pause`` (rock)."""
        return await self._posted("/pause", "pause", sandbox_id, SandboxStatusResponse)

    async def resume(self, sandbox_id: str) -> SandboxStatusResponse:
        """``POST /resume`` (rock)."""
        return await self._posted("/resume", "resume", sandbox_id, SandboxStatusResponse)

    async def update_egress(
        self, sandbox_id: str, egress: dict[str, Any] | None
    ) -> SandboxStatusResponse:
        """(rock) ``POST /sandboxes/{id}/egress``: the new policy in force, then the status."""
        return await self._posted(
            f"/sandboxes/{sandbox_id}/egress", "egress", sandbox_id, SandboxStatusResponse,
            json={"sandbox_id": sandbox_id, "egress": egress},
        )  # fmt: skip

    async def reset(self, sandbox_id: str, snapshot: str | None = None) -> SandboxStatusResponse:
        """(rock) ``POST /sandboxes/{id}/reset``: back to its image's (or a snapshot's) files."""
        return await self._posted(
            f"/sandboxes/{sandbox_id}/reset", "reset", sandbox_id, SandboxStatusResponse,
            json={"snapshot": snapshot}, timeout=_SNAPSHOT_TIMEOUT,
        )  # fmt: skip

    # -- Driver: the catalog's operations ----------------------------------------------------------

    async def call(self, sandbox_id: str, op: Operation[Req, Resp], request: Req) -> Resp:
        """Any operation of kind ``call``: ``POST`` its admin route with the request and
        ``sandbox_id``; a call that runs a command waits as long as the command (plus a margin)."""
        seconds = op.seconds(request)
        timeout = None if isinstance(seconds, str) else command_timeout(seconds)
        return await self._post(op.admin_path, op.name, sandbox_id, request, op.response, timeout)

    # -- Driver: streams, files and figures ---------------------------------------------------------

    async def execute_stream(
        self, sandbox_id: str, command: Command
    ) -> AsyncIterator[dict[str, Any]]:
        """``POST /execute_stream`` (rock): the command's events, one JSON object per line."""
        stream = self._stream(
            "/execute_stream",
            "execute_stream",
            sandbox_id,
            unstructure_wire(command),
            command_timeout(command.timeout),
            lines=True,
        )
        async with contextlib.aclosing(stream):
            async for line in stream:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "error":  # the server lost the command midway
                    message = str(event.get("message") or "the command's stream broke")
                    kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": "execute_stream"}
                    raise error_for_code(
                        event.get("code"), message, **kw
                    ) or InternalServerRockError(message, **kw)
                yield event

    # -- Driver: files -----------------------------------------------------------------------------

    async def upload(
        self,
        sandbox_id: str,
        target_path: str,
        data: bytes | str | os.PathLike[str],
        *,
        unzip: bool = False,
    ) -> UploadResponse:
        """``POST /upload`` (multipart ``file``, ``target_path``, ``sandbox_id``); a local file is streamed."""
        form = {"target_path": target_path, "sandbox_id": sandbox_id}
        if unzip:  # rock's addition: sent only when asked, ROCK's form has no such field
            form["unzip"] = "true"
        no_limit = httpx.Timeout(None, connect=10.0)
        if isinstance(data, (bytes, bytearray)):
            files: dict[str, Any] = {
                "file": (os.path.basename(target_path) or "upload", bytes(data))
            }
            result = await self._call(
                "POST", "/upload", "upload", sandbox_id, files=files, data=form, timeout=no_limit
            )
        else:
            path = os.fspath(data)
            try:
                handle = open(path, "rb")  # noqa: ASYNC230 - opening is quick; closed after the upload
            except OSError as exc:
                raise InvalidParameter(
                    f"source_path: cannot read local file {path!r}: {exc.strerror}",
                    field="source_path",
                    value=path,
                    sandbox_id=sandbox_id,
                    attempted="upload",
                ) from exc
            with handle:
                files = {"file": (os.path.basename(path), handle)}
                result = await self._call(
                    "POST",
                    "/upload",
                    "upload",
                    sandbox_id,
                    files=files,
                    data=form,
                    timeout=no_limit,
                )
        return structure_wire(result, UploadResponse, forbid_extra_keys=False)

    async def download(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """``POST /download`` (rock): the file's raw bytes, in chunks."""
        stream = self._stream(
            "/download",
            "download",
            sandbox_id,
            {"path": path},
            httpx.Timeout(None, connect=10.0),
            lines=False,
        )
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                yield chunk

    async def get_statistics(self, sandbox_id: str) -> dict[str, Any]:
        """``GET /get_sandbox_statistics``."""
        result = await self._call(
            "GET",
            "/get_sandbox_statistics",
            "get_statistics",
            sandbox_id,
            params={"sandbox_id": sandbox_id},
        )
        return dict(result or {})

    # -- Driver: background processes --------------------------------------------------------------

    async def start_process(
        self,
        sandbox_id: str,
        command: CommandLine,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """``POST /processes`` (rock)."""
        body = {
            **process_request(command, cwd=cwd, env=env, timeout=timeout),
            "sandbox_id": sandbox_id,
        }
        result = await self._call("POST", "/processes", "start_process", sandbox_id, json=body)
        return structure_wire(
            {"command": command, "running": True, **result}, ProcessInfo, forbid_extra_keys=False
        )

    async def process_status(
        self, sandbox_id: str, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """``GET /processes/{id}`` (rock), waiting up to ``wait`` seconds for the process to end."""
        result = await self._call(
            "GET",
            f"/processes/{urllib.parse.quote(process_id, safe='')}",
            "process_status",
            sandbox_id,
            params={"sandbox_id": sandbox_id, "wait": wait, "tail": tail},
            timeout=command_timeout(wait) if wait else None,
        )
        return structure_wire(result, ProcessInfo, forbid_extra_keys=False)

    async def process_output(
        self, sandbox_id: str, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """``GET /processes/{id}/output`` (rock): raw bytes (a Failed envelope when it fails)."""
        params: dict[str, Any] = {"sandbox_id": sandbox_id, "offset": offset}
        if limit is not None:
            params["limit"] = limit
        response = await self._send(
            "GET",
            f"/processes/{urllib.parse.quote(process_id, safe='')}/output",
            "process_output",
            sandbox_id,
            params=params,
        )
        if response.status_code < 400 and not response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            return response.content
        result = self._raise_for_response(response, "process_output", sandbox_id)
        return result.encode() if isinstance(result, str) else bytes(result or b"")

    async def kill_process(
        self, sandbox_id: str, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """``POST /processes/{id}/kill`` (rock)."""
        result = await self._call(
            "POST",
            f"/processes/{urllib.parse.quote(process_id, safe='')}/kill",
            "kill_process",
            sandbox_id,
            json={"sandbox_id": sandbox_id, "signal": signal, "wait": wait},
            timeout=command_timeout(wait),
        )
        return structure_wire(result, ProcessInfo, forbid_extra_keys=False)

    # -- a sandbox's own ports and terminals (the admin's proxy and WebSockets) ---------------------

    def _sandbox_url(self, sandbox_id: str, route: str) -> str:
        return f"{self.api_url}/sandboxes/{urllib.parse.quote(sandbox_id, safe='')}/{route}"

    async def port_url(self, sandbox_id: str, port: int, path: str = "") -> str:
        """(rock) The admin's proxy URL of ``port`` in the sandbox (its ``port/{N}/`` form).

        With API keys on, a request to it must carry the key (``X-API-Key``) like any other."""
        check_port(port)
        return f"{self._sandbox_url(sandbox_id, 'proxy')}/port/{port}/" + path.lstrip("/")

    def _ws_url(self, sandbox_id: str, route: str, query: Mapping[str, Any]) -> str:
        url = self._sandbox_url(sandbox_id, route)
        url = "ws" + url[len("http") :] if url.startswith("http") else url
        return url + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})

    async def open_port(self, sandbox_id: str, port: int) -> PortConnection:
        """(rock) A TCP connection to ``127.0.0.1:port`` in the sandbox: the admin's
        ``/portforward`` WebSocket."""
        check_port(port)
        return await WebSocketConnection.open(
            self._ws_url(sandbox_id, "portforward", {"port": port}), self.headers, sandbox_id
        )

    async def open_shell(self, sandbox_id: str, **options: Any) -> Shell:
        """(rock) A program on a pseudo-terminal in the sandbox: the admin's ``/shell`` WebSocket."""
        ws = await connect_websocket(
            self._ws_url(sandbox_id, "shell", options), self.headers, sandbox_id, "shell"
        )
        return WebSocketShell(ws, sandbox_id)


# -- shared drivers -------------------------------------------------------------------------------

_drivers: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], RemoteDriver] = {}
_drivers_lock = threading.Lock()


def get_remote_driver(
    base_url: str | Sequence[str], headers: Mapping[str, str] | None = None
) -> RemoteDriver:
    """The process's :class:`RemoteDriver` for ``base_url`` and ``headers`` (made on first use).

    Sandboxes with the same server and headers (a :class:`~rock.sdk.sandbox.client.SandboxGroup`)
    share one driver, hence one connection pool per event loop.
    """
    full = remote_headers(headers)
    key = (admin_urls(base_url), tuple(sorted(full.items())))
    with _drivers_lock:
        driver = _drivers.get(key)
        if driver is None:
            driver = _drivers[key] = RemoteDriver(base_url, full)
        return driver
