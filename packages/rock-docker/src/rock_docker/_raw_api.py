"""A lean HTTP client over the Docker engine's unix socket for the calls every start makes
(``create`` and ``start`` of a container), where the docker SDK's ``requests`` machinery cost
about as much client CPU as the engine's own work. Everything else keeps the docker SDK.

The request bodies are the SDK's own (its ``create_container_config``), and a refusal raises
the SDK's own exception (``docker.errors.APIError``, ``NotFound``, ``ImageNotFound``: made by
its ``create_api_error_from_http_exception``), so :func:`rock_docker._errors.translate` maps
them as before; an engine that cannot be reached raises ``requests``' ``ConnectionError`` or
``Timeout``, as the SDK would. Every method blocks (the runtime calls them in worker threads).
"""

from __future__ import annotations

import json
import socket
import threading
import weakref
from typing import Any
from urllib.parse import quote, urlencode

import docker
import docker.errors
import requests
import requests.exceptions
from docker.transport.unixconn import UnixHTTPAdapter
from docker.utils.utils import format_environment

__all__ = ["RawDocker", "close_client", "create_container", "lean", "start_container"]

#: Idle keep-alive connections kept for the next calls.
_MAX_IDLE = 16

_LEAN: weakref.WeakKeyDictionary[docker.APIClient, RawDocker | None] = weakref.WeakKeyDictionary()
_LEAN_LOCK = threading.Lock()


def lean(api: docker.APIClient) -> RawDocker | None:
    """The lean client of ``api``'s engine, made on first use (``None``: no unix socket)."""
    with _LEAN_LOCK:
        if api not in _LEAN:
            _LEAN[api] = RawDocker.of(api)
        return _LEAN[api]


def create_container(api: docker.APIClient, **create: Any) -> dict[str, Any]:
    """``api.create_container(**create)``, over the lean client when there is one."""
    raw = lean(api)
    if raw is None:
        result: dict[str, Any] = api.create_container(**create)
        return result
    return raw.create_container(api, **create)


def start_container(api: docker.APIClient, container: str) -> None:
    """``api.start(container)``, over the lean client when there is one."""
    raw = lean(api)
    if raw is None:
        api.start(container)
    else:
        raw.start(container)


def close_client(client: docker.DockerClient) -> None:
    """``client.close()``, and its lean client's connections."""
    with _LEAN_LOCK:
        raw = _LEAN.pop(client.api, None)
    if raw is not None:
        raw.close()
    client.close()


class _Connection:
    def __init__(self, path: str, timeout: float | None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class RawDocker:
    """``POST``s to the engine at unix socket ``path``, in API ``version``.

    :param timeout: seconds to wait for the engine (the runtime's ``api_timeout``)."""

    def __init__(self, path: str, version: str, timeout: float | None) -> None:
        self._path = path
        self._prefix = f"/v{version}"
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def of(cls, api: docker.APIClient) -> RawDocker | None:
        """The lean client for the engine ``api`` talks to; ``None`` when that is no unix socket
        (TCP, TLS, ssh: the SDK then makes every call)."""
        adapter = api.adapters.get("http+docker://")
        if not isinstance(adapter, UnixHTTPAdapter) or not hasattr(api, "_proxy_configs"):
            return None  # (a docker-py without the proxy settings create applies: the SDK's way)
        timeout = api.timeout if isinstance(api.timeout, (int, float)) else None
        return cls(adapter.socket_path, api.api_version, timeout)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # -- the calls ------------------------------------------------------------------------------

    def create_container(
        self, api: docker.APIClient, *, name: str, host_config: dict[str, Any], **create: Any
    ) -> dict[str, Any]:
        """``api.create_container(name=..., host_config=..., **create)``: the same body, sent
        here. Returns Docker's answer (``Id``, ``Warnings``)."""
        environment = create.pop("environment", None)
        if isinstance(environment, dict):
            environment = format_environment(environment)
        environment = api._proxy_configs.inject_proxy_environment(environment) or None
        config = api.create_container_config(
            host_config=host_config, environment=environment, **create
        )
        body = json.dumps({k: v for k, v in config.items() if v is not None}).encode()
        answer = self._post("/containers/create", {"name": name}, body)
        result: dict[str, Any] = json.loads(answer)
        return result

    def start(self, container: str) -> None:
        """``api.start(container)``."""
        self._post(f"/containers/{quote(container, safe='')}/start", None, None)

    # -- HTTP -----------------------------------------------------------------------------------

    def _post(self, path: str, params: dict[str, str] | None, body: bytes | None) -> bytes:
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        head = f"POST {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: rock-docker\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        head += f"Content-Length: {len(body) if body is not None else 0}\r\n\r\n"
        request = head.encode() + (body or b"")
        while True:
            connection, reused = self._connection()
            try:
                connection.sock.sendall(request)
                status, reason, payload, keep = _read_response(connection.reader)
            except _StaleConnection:
                connection.close()
                if reused:
                    continue  # the engine closed an idle connection: nothing was done, again
                raise requests.exceptions.ConnectionError(
                    "the Docker engine closed the connection without an answer"
                ) from None
            except TimeoutError as exc:
                connection.close()
                raise requests.exceptions.ReadTimeout(
                    f"the Docker engine did not answer in {self._timeout}s: read timed out"
                ) from exc
            except OSError as exc:
                connection.close()
                if reused and isinstance(exc, (BrokenPipeError, ConnectionResetError)):
                    continue
                raise requests.exceptions.ConnectionError(str(exc)) from exc
            except BaseException:
                connection.close()
                raise
            self._release(connection, keep)
            if status >= 400:
                _raise_api_error(status, reason, payload, target)
            return payload

    def _connection(self) -> tuple[_Connection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        try:
            return _Connection(self._path, self._timeout), False
        except TimeoutError as exc:
            raise requests.exceptions.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise requests.exceptions.ConnectionError(
                f"cannot connect to {self._path}: {exc}"
            ) from exc

    def _release(self, connection: _Connection, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < _MAX_IDLE:
                    self._idle.append(connection)
                    return
        connection.close()


class _StaleConnection(Exception):
    """The connection ended before any byte of an answer."""


def _read_response(reader: Any) -> tuple[int, str, bytes, bool]:
    """``(status, reason, body, keep-alive)`` of one HTTP/1.1 answer."""
    line = reader.readline(65537)
    if not line:
        raise _StaleConnection
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise requests.exceptions.ConnectionError(f"not an HTTP answer from Docker: {line[:80]!r}")
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    headers: dict[str, str] = {}
    while True:
        line = reader.readline(65537)
        if not line:
            raise requests.exceptions.ConnectionError("the Docker engine's answer ended early")
        if line in (b"\r\n", b"\n"):
            break
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close"
    if status in (204, 304) or 100 <= status < 200:
        body = b""
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(reader.readline(65537).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while reader.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                break
            chunks.append(_read_exactly(reader, size))
            reader.readline(65537)
        body = b"".join(chunks)
    elif "content-length" in headers:
        body = _read_exactly(reader, int(headers["content-length"]))
    else:
        body, keep = reader.read(), False
    return status, reason, body, keep


def _read_exactly(reader: Any, size: int) -> bytes:
    data: bytes = reader.read(size)
    if len(data) != size:
        raise requests.exceptions.ConnectionError("the Docker engine's answer ended early")
    return data


def _raise_api_error(status: int, reason: str, payload: bytes, target: str) -> None:
    """The docker SDK's exception for this refusal (what its ``_raise_for_status`` raises)."""
    response = requests.Response()
    response.status_code = status
    response.reason = reason
    response._content = payload
    response.encoding = "utf-8"
    response.url = f"http+docker://localhost{target}"
    kind = "Client" if status < 500 else "Server"
    error = requests.exceptions.HTTPError(
        f"{status} {kind} Error: {reason} for url: {response.url}", response=response
    )
    docker.errors.create_api_error_from_http_exception(error)
