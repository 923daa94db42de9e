"""An async client of one sandbox's rocklet, with its errors translated into rock errors.

The engine, the admin server and the embedded SDK all talk to a rocklet through this class. It
shares one :class:`httpx.AsyncClient` (one keep-alive pool per engine); a ``RockletClient`` is
just the sandbox's base URL and id on top of it, so making one is free.

A rocklet's answers are hostile input (a sandbox's root can replace its rocklet): every answer
is read with a cap (:attr:`RockletClient.max_answer`, the engine's ``max_rocklet_answer``, 64 MiB
by default; a process's output by its request's own ``limit``), a streamed line (``execute_stream``)
too, and no compressed answer is accepted (the client asks for none). An answer past its cap is
a clear :class:`~rock_core.errors.InternalServerRockError` naming the cap, never an engine out
of memory.

Rocklet errors (HTTP 511 ``rockletexception``) become the most specific rock error, once, here:
an unknown session is :class:`~rock_core.errors.SessionNotFound`, a failed ``check="raise"``
command :class:`~rock_core.errors.NonZeroExitCode`, and so on; a rocklet that does not answer is
:class:`~rock_core.errors.RockletUnreachable`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, BinaryIO, TypeVar

import httpx

from rock_core.actions import (
    BashAction,
    BashObservation,
    CloseBashSessionRequest,
    CloseBashSessionResponse,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    InterruptSessionResponse,
    ListDirRequest,
    ListDirResponse,
    ProcessInfo,
    ReadFileRequest,
    ReadFileResponse,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)
from rock_core.actions.commands import EXECUTE
from rock_core.actions.files import LIST_DIR, READ_FILE, WRITE_FILE
from rock_core.actions.sessions import (
    CLOSE_SESSION,
    CREATE_SESSION,
    INTERRUPT_SESSION,
    RUN_IN_SESSION,
    InterruptSessionRequest,
)
from rock_core.converters import structure_wire, unstructure_wire
from rock_core.errors import (
    CommandTimeout,
    InternalServerRockError,
    InvalidParameter,
    RockError,
    RockletUnreachable,
)
from rock_core.models import NonBlankStr
from rock_core.operations import Operation
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet_client.answers import TooLarge, capped_lines, read_capped, rock_error
from rock_core.rocklet_client.connections import RockletConnections
from rock_core.rocklet_client.lean import Answer, Dropped, Encoded, Timeout, request_bytes
from rock_core.rocklet_client.transport import (
    DEFAULT_MAX_ANSWER,
    SMALL_ANSWER,
    RockletTransport,
    uds_host,
)

__all__ = ["RockletClient", "process_request"]

T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

# Headroom over a command's own timeout before the HTTP call itself gives up: the rocklet
# answers a timed-out command with an error, and that answer should win.
_TIMEOUT_MARGIN = 30.0
# A call's bound when it gives none of its own (the shared client's ``httpx.Timeout(30.0)``).
_DEFAULT_SECONDS = 30.0


def process_request(
    command: str | list[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /processes`` (a background command): only the options given."""
    body: dict[str, Any] = {"command": command}
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if timeout is not None:
        body["timeout"] = timeout
    return body


class RockletClient(RockletConnections):
    """Calls to the rocklet of one sandbox.

    :param http: the engine's shared client (:func:`new_http_client`).
    :param host: where the rocklet's port is published (``127.0.0.1``), or the path of its unix
        socket (a sandbox without a network).
    :param port: the host port mapped to the rocklet's 22555 (``0`` with a unix socket).
    :param sandbox_id: the sandbox, for error messages and ROCK's ``sandbox_id`` body field.
    :param token: the sandbox's rocklet secret, sent on every request (``X-Rock-Rocklet-Token``);
        the rocklet answers 401 to anything but ``GET /is_alive`` without it.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        host: str,
        port: int,
        sandbox_id: str | None = None,
        token: str | None = None,
    ) -> None:
        self.http = http
        self.host = host
        self.port = port
        self.token = token
        self._headers = {TOKEN_HEADER: token} if token else {}
        if host.startswith("/"):  # a unix socket: RuntimeStatus.rocklet_address gives (path, 0)
            self._host_header = uds_host(host)
            self.base_url = f"http://{self._host_header}"
            self.where = f"unix:{host}"
        else:
            self._host_header = f"{host}:{port}"
            self.base_url = f"http://{host}:{port}"
            self.where = self.base_url
        # The lean path's fixed headers, as httpx sends them (rock's own, the secret).
        self._lean_head = f"Host: {self._host_header}\r\nAccept: */*\r\n" + (
            "Accept-Encoding: identity\r\n" + (f"{TOKEN_HEADER}: {token}\r\n" if token else "")
        )
        self.sandbox_id = sandbox_id
        #: The largest answer read from this rocklet (the engine's ``max_rocklet_answer``).
        self.max_answer: int = getattr(http, "max_answer", DEFAULT_MAX_ANSWER)

    def __repr__(self) -> str:
        return f"RockletClient({self.where!r}, sandbox_id={self.sandbox_id!r})"

    # -- transport -------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        attempted: str,
        *,
        json_body: Any = None,
        timeout: float | None | str = "default",
        limit: int | None = None,
        **kw: Any,
    ) -> httpx.Response | Answer:
        """Send a request and read its answer whole, at most ``limit`` bytes (default
        :attr:`max_answer`); the answer comes back as a read :class:`httpx.Response`, or an
        :class:`~rock_core.rocklet_client.lean.Answer` over a lean client's pools."""
        cap = self.max_answer if limit is None else limit
        lean = getattr(self.http, "lean", None)
        if lean is not None and not kw:  # the same request bytes as httpx's, the same errors
            data = request_bytes(method, path, self._lean_head, json_body)
            seconds = _DEFAULT_SECONDS if timeout == "default" else timeout
            try:
                answer: Answer = await lean.exchange(
                    self.host, self.port, data, cap, None if seconds is None else float(seconds)
                )
            except (TooLarge, Encoded, Timeout, Dropped, OSError) as exc:
                raise self._failure(exc, attempted, limit) from (
                    None if isinstance(exc, TooLarge) else exc
                )
            self._raise_for_status(answer, attempted)
            return answer
        if timeout != "default":
            kw["timeout"] = httpx.Timeout(None if timeout is None else float(timeout), connect=5.0)
        try:
            request = self.http.build_request(
                method, self.base_url + path, json=json_body, headers=self._headers, **kw
            )
            streamed = await self.http.send(request, stream=True)
            try:
                body = await read_capped(streamed, cap)
            finally:
                await streamed.aclose()
            response = httpx.Response(
                streamed.status_code,
                content=body,
                request=request,
                headers={"content-type": streamed.headers.get("content-type", "application/json")},
            )
        except (TooLarge, httpx.DecodingError, httpx.TimeoutException, httpx.TransportError) as exc:
            raise self._failure(exc, attempted, limit) from (
                None if isinstance(exc, TooLarge) else exc
            )
        self._raise_for_status(response, attempted)
        return response

    def _failure(self, exc: Exception, attempted: str, limit: int | None) -> RockError:
        """The rock error of a call that got no whole answer (httpx's failures or the lean
        path's: too large, encoded, timed out, unreachable)."""
        if isinstance(exc, TooLarge):
            return self._too_large(attempted, exc.limit, limit is not None)
        kw: dict[str, Any] = {"sandbox_id": self.sandbox_id, "attempted": attempted}
        who = f"the rocklet of sandbox {self.sandbox_id}"
        if isinstance(exc, (httpx.DecodingError, Encoded)):
            return InternalServerRockError(
                f"{who} answered {attempted} with an encoded body: {exc}", **kw
            )
        if isinstance(exc, (httpx.TimeoutException, Timeout)):
            return CommandTimeout(f"{who} did not answer {attempted} in time", **kw)
        return RockletUnreachable(f"{who} at {self.where} is unreachable: {exc!r}", **kw)

    def _too_large(self, attempted: str, limit: int, asked: bool) -> InternalServerRockError:
        """The error of an answer past its cap: which cap, and what to do instead."""
        where = "the request's limit" if asked else "the engine's max_rocklet_answer"
        hint = {
            "execute": "; a command's output comes back whole in one answer: write large output to a file "
            "and download it, or run the command as a background process and read its output in pieces",
            "run_in_session": "; a command's output comes back whole in one answer: write large output to a file "
            "and download it",
            "execute_stream": "; one line of its output is that long",
            "read_file": "; download reads a file of any size",
        }.get(attempted, "")
        return InternalServerRockError(
            f"the rocklet of sandbox {self.sandbox_id} answered {attempted} with more than {limit} bytes "
            f"({where}){hint}",
            sandbox_id=self.sandbox_id,
            attempted=attempted,
        )

    def _raise_for_status(self, response: httpx.Response | Answer, attempted: str) -> None:
        if response.status_code < 400:
            return
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text}
        if response.status_code == 511 and isinstance(body, dict) and "rockletexception" in body:
            info = body["rockletexception"] or {}
            name = str(info.get("class_path", "")).rsplit(".", 1)[-1]
            raise rock_error(
                name,
                str(info.get("message", "")),
                info.get("extra_info") or {},
                self.sandbox_id,
                attempted,
            )
        detail = body.get("detail") if isinstance(body, dict) else body
        if response.status_code == 401:
            raise InternalServerRockError(
                f"the rocklet of sandbox {self.sandbox_id} refused {attempted}: "
                + (
                    "rock's secret for it is wrong" if self.token else "rock holds no secret for it"
                ),
                sandbox_id=self.sandbox_id,
                attempted=attempted,
            )
        if 400 <= response.status_code < 500:
            raise InvalidParameter(
                f"{attempted}: {detail}", sandbox_id=self.sandbox_id, attempted=attempted
            )
        raise InternalServerRockError(
            f"the rocklet of sandbox {self.sandbox_id} answered {attempted} with HTTP {response.status_code}: {detail}",
            sandbox_id=self.sandbox_id,
            attempted=attempted,
        )

    @staticmethod
    def _deadline_timeout(timeout: float | None) -> float | None:
        return None if timeout is None else float(timeout) + _TIMEOUT_MARGIN

    # -- liveness --------------------------------------------------------------------------

    async def is_alive(self, timeout: float = 2.0) -> bool:
        """Whether the rocklet answers ``/is_alive`` within ``timeout`` seconds."""
        try:
            response = await self._request(
                "GET", "/is_alive", "is_alive", timeout=timeout, limit=SMALL_ANSWER
            )
            return bool(response.json().get("is_alive"))
        except (RockError, ValueError, AttributeError):
            return False

    async def warm_up(self, timeout: float = 60.0) -> None:
        """Have the rocklet load and warm up its endpoints now (``POST /warm_up``), which it
        otherwise does at its first request: a warm pool's member is ready for a first command
        at once when claimed. Raises like any call when the rocklet does not answer."""
        await self._request("POST", "/warm_up", "warm_up", timeout=timeout, limit=SMALL_ANSWER)

    async def forget(self) -> None:
        """Close the engine's connection pool to this rocklet (its sandbox stopped), so that a
        long-running engine keeps no pool per sandbox it ever ran."""
        lean = getattr(self.http, "lean", None)
        if lean is not None:
            lean.forget(self.host, self.port)
        transport = getattr(self.http, "rocklet_transport", None)
        if isinstance(transport, RockletTransport):
            await transport.forget(self.host, None if self.host.startswith("/") else self.port)

    async def end_processes(self, timeout: float = 5.0) -> bool:
        """Ask the rocklet to kill every other process of its sandbox (``POST /end_processes``):
        nothing in the sandbox runs on, while its unit stays for the runtime to remove. ``True``
        when the rocklet did so."""
        try:
            request = self.http.build_request(
                "POST", self.base_url + "/end_processes", headers=self._headers, timeout=timeout
            )
            response = await self.http.send(
                request, stream=True
            )  # the status is the answer: no body read
            await response.aclose()
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    # -- the catalog's operations ---------------------------------------------------------

    async def call(self, op: Operation[Req, Resp], request: Req) -> Resp:
        """Any operation of kind ``call`` of the catalog (:mod:`rock_core.operations`): its
        request to its rocklet route, its answer read (capped) into its response model. A call
        that runs a command waits as long as the command's own timeout, plus a margin."""
        seconds = op.seconds(request)
        timeout = seconds if isinstance(seconds, str) else self._deadline_timeout(seconds)
        response = await self._request(
            op.rocklet_method,
            op.rocklet_path,
            op.name,
            json_body=unstructure_wire(request),
            timeout=timeout,
        )
        return structure_wire(response.json(), op.response, forbid_extra_keys=False)

    # Shortcuts for the engine's and the tests' own calls (the SDK and the admin use call).

    async def create_session(self, request: CreateBashSessionRequest) -> CreateBashSessionResponse:
        """Open a persistent bash session (``/create_session``)."""
        return await self.call(CREATE_SESSION, request)

    async def run_in_session(self, action: BashAction) -> BashObservation:
        """Run a command in a session (``/run_in_session``); waits as long as ``action.timeout``."""
        return await self.call(RUN_IN_SESSION, action)

    async def close_session(self, request: CloseBashSessionRequest) -> CloseBashSessionResponse:
        """Close a session (``/close_session``)."""
        return await self.call(CLOSE_SESSION, request)

    async def interrupt_session(self, session: str) -> InterruptSessionResponse:
        """Ctrl-C whatever runs in ``session``; the session stays usable (rock addition)."""
        return await self.call(INTERRUPT_SESSION, InterruptSessionRequest(session=session))

    async def execute(self, command: Command) -> CommandResponse:
        """Run a one-shot command (``/execute``) and return its output, exit code and usage."""
        return await self.call(EXECUTE, command)

    async def open_stream(
        self, path: str, body: Any, attempted: str, timeout: float | None = None
    ) -> httpx.Response:
        """POST ``body`` to ``path`` and return the response unread, for the caller to stream.

        The caller reads it (``aiter_lines``, ``aiter_bytes``) and must ``aclose`` it. An error
        answer is read and raised as the rock error, like every other call; ``timeout`` bounds
        the whole read (``None``: no bound), the connection always 5 seconds.
        """
        request = self.http.build_request(
            "POST",
            self.base_url + path,
            json=body,
            headers=self._headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
        )
        try:
            response = await self.http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise self._unreachable(exc, attempted) from exc
        if response.status_code >= 400:
            try:
                body = await read_capped(response, SMALL_ANSWER)
            except (TooLarge, httpx.HTTPError):
                body = b""
            finally:
                await response.aclose()
            self._raise_for_status(
                httpx.Response(response.status_code, content=body, request=request), attempted
            )
        return response

    def _unreachable(self, exc: Exception, attempted: str) -> RockletUnreachable:
        return RockletUnreachable(
            f"the rocklet of sandbox {self.sandbox_id} is unreachable: {exc!r}",
            sandbox_id=self.sandbox_id,
            attempted=attempted,
        )

    async def execute_stream(self, command: Command) -> AsyncIterator[dict[str, Any]]:
        """Run a one-shot command and yield its events as it runs (rock addition).

        Events: ``{"type": "start", "pid"}``, ``{"type": "output", "stream", "data"}`` ...,
        ``{"type": "exit", "exit_code", "wall_time", "cpu_time", "max_rss_bytes", ...}``.
        """
        timeout = self._deadline_timeout(command.timeout)
        response = await self.open_stream(
            "/execute_stream", unstructure_wire(command), "execute_stream", timeout
        )
        try:
            async for line in capped_lines(response, self.max_answer):
                if line.strip():
                    yield json.loads(line)
        except TooLarge as exc:
            raise self._too_large("execute_stream", exc.limit, False) from None
        except httpx.TransportError as exc:
            raise self._unreachable(exc, "execute_stream") from exc
        finally:
            await response.aclose()

    async def stream_lines(self, response: httpx.Response, attempted: str) -> AsyncIterator[str]:
        """The lines of a response of :meth:`open_stream`, each at most :attr:`max_answer` bytes.

        :raises InternalServerRockError: a line is longer.
        """
        try:
            async for line in capped_lines(response, self.max_answer):
                yield line
        except TooLarge as exc:
            raise self._too_large(attempted, exc.limit, False) from None

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        """Read a text file (``/read_file``)."""
        return await self.call(READ_FILE, request)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        """Write a text file, creating parent directories (``/write_file``)."""
        return await self.call(WRITE_FILE, request)

    async def upload(
        self,
        target_path: str,
        data: bytes | os.PathLike[str] | str | BinaryIO,
        *,
        unzip: bool = False,
    ) -> UploadResponse:
        """Upload bytes, an open binary file (streamed from where it stands; the admin's spooled
        ``/upload`` body), or the local file at a path, to ``target_path`` (``/upload``)."""
        if isinstance(data, (bytes, bytearray)) or hasattr(data, "read"):
            content: Any = bytes(data) if isinstance(data, (bytes, bytearray)) else data
            name = os.path.basename(target_path) or "upload"
            response = await self._request(
                "POST",
                "/upload",
                "upload",
                files={"file": (name, content)},
                data={"target_path": target_path, "unzip": "true" if unzip else "false"},
                timeout=None,
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
                    sandbox_id=self.sandbox_id,
                    attempted="upload",
                ) from exc
            with handle:
                response = await self._request(
                    "POST",
                    "/upload",
                    "upload",
                    files={"file": (os.path.basename(path), handle)},
                    data={"target_path": target_path, "unzip": "true" if unzip else "false"},
                    timeout=None,
                )
        return structure_wire(response.json(), UploadResponse, forbid_extra_keys=False)

    async def download(self, path: str) -> AsyncIterator[bytes]:
        """Yield the raw bytes of the file at ``path`` in the sandbox (rock addition)."""
        response = await self.open_stream("/download", {"path": path}, "download")
        try:
            async for chunk in response.aiter_raw():  # as it comes: never more than a read at once
                yield chunk
        except httpx.TransportError as exc:
            raise self._unreachable(exc, "download") from exc
        finally:
            await response.aclose()

    async def list_dir(self, path: str) -> ListDirResponse:
        """List a directory in the sandbox (rock addition)."""
        return await self.call(LIST_DIR, ListDirRequest(path=NonBlankStr(path)))

    async def get_statistics(self) -> dict[str, Any]:
        """CPU, memory, disk and network figures of the sandbox (``/get_statistics``)."""
        response = await self._request("GET", "/get_statistics", "get_statistics")
        return dict(response.json())

    async def env(self, op: str, body: Mapping[str, Any], timeout: float | None = None) -> Any:
        """``POST /env/{op}`` (GEM environments, :mod:`rock_core.rocklet.envs`): the answer's JSON.

        ``timeout`` is the env's own limit (sent in the body); the HTTP call waits a little
        longer. An env's failure is :class:`~rock_core.envs.EnvFailed` with its ``kind``.
        """
        payload = dict(body)
        if timeout is not None:
            payload["timeout"] = timeout
        http_timeout = None if timeout is None else timeout + _TIMEOUT_MARGIN
        response = await self._request(
            "POST", f"/env/{op}", f"env/{op}", json_body=payload, timeout=http_timeout
        )
        return response.json()

    async def close(self) -> None:
        """Close every session of the sandbox (``/close``)."""
        await self._request("POST", "/close", "close", json_body={})

    # -- background processes (rock addition) ----------------------------------------------

    async def start_process(
        self,
        command: str | list[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """Start a background command; its exit code, usage and output stay readable later."""
        body = process_request(command, cwd=cwd, env=env, timeout=timeout)
        response = await self._request("POST", "/processes", "start_process", json_body=body)
        data = response.json()
        return structure_wire(
            {"command": command, "running": True, **data}, ProcessInfo, forbid_extra_keys=False
        )

    async def process_status(
        self, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """The state of a background process, waiting up to ``wait`` seconds for it to end."""
        http_timeout = wait + _TIMEOUT_MARGIN if wait and math.isfinite(wait) else "default"
        response = await self._request(
            "GET",
            f"/processes/{process_id}",
            "process_status",
            params={"wait": wait, "tail": tail},
            timeout=http_timeout,
        )
        return structure_wire(response.json(), ProcessInfo, forbid_extra_keys=False)

    async def process_output(
        self, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """Raw output bytes of a background process from ``offset`` (negative: from the end)."""
        params: dict[str, Any] = {"offset": offset}
        if limit is not None:
            params["limit"] = limit
        response = await self._request(
            "GET",
            f"/processes/{process_id}/output",
            "process_output",
            params=params,
            limit=None if limit is None else min(limit, self.max_answer),
        )
        return response.content

    async def kill_process(
        self, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """Signal a background process (and its group); wait up to ``wait`` s for it to end."""
        response = await self._request(
            "POST",
            f"/processes/{process_id}/kill",
            "kill_process",
            json_body={"signal": signal, "wait": wait},
            timeout=wait + _TIMEOUT_MARGIN,
        )
        return structure_wire(response.json(), ProcessInfo, forbid_extra_keys=False)
