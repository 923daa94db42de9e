"""A small HTTP/1.1 server for the rocklet: keep-alive, JSON in and out, streaming, ROCK's errors.

Why not :mod:`http.server`: it imports the e-mail package (slow to start), parses headers with it
on every request, and answers with unbuffered small writes; the rocklet must be listening within
tens of milliseconds and answer a session ``echo`` in about a millisecond. This module keeps to
what the rocklet needs:

* a thread per connection, persistent connections (HTTP/1.1 keep-alive), ``TCP_NODELAY``;
* request bodies by ``Content-Length`` or chunked, ``Expect: 100-continue``;
* responses as one JSON document, as raw bytes of known length, or streamed with chunked
  transfer encoding;
* a route table (:class:`Router`) of exact paths and ``{name}`` templates;
* a per-sandbox secret (:data:`TOKEN_HEADER`): with a token, every request but a bare
  ``GET /is_alive`` must carry it, compared in constant time, or is answered HTTP 401 before
  its path is even looked at (the connection is then closed, its body unread);
* ROCK's error contract: any uncaught exception is HTTP 511
  ``{"rockletexception": {message, class_path, traceback, extra_info}}``; a malformed request is
  HTTP 400 ``{"detail": ...}``; unknown paths 404 and wrong methods 405, as FastAPI answers them.

No request is cut off by a server-wide timeout: a request lasts as long as its handler. The
messages themselves (request, body reader, response) are in :mod:`.http_messages`.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Callable, Iterator
    from typing import Any

    Handler = Callable[["Request"], Any]

# hmac.compare_digest itself, without hmac's import of hashlib and OpenSSL (megabytes of memory
# in every sandbox, and milliseconds of start-up).
from _operator import _compare_digest

from .errors import BadRequest
from .front import TOKEN_ENV
from .http_messages import (
    MAX_LINE,
    BodyReader,
    Request,
    Response,
    error_response,
    json_response,
    parse_query,
    unquote,
)

__all__ = ["Route", "Router", "RockletServer", "TOKEN_HEADER", "TOKEN_ENV"]

#: The request header that carries a sandbox's rocklet secret (lower case, as headers are kept).
TOKEN_HEADER = "x-rock-rocklet-token"
# The one request answered without the secret: it reveals nothing but "up".
_OPEN = ("GET", "/is_alive")

_MAX_HEADERS = 200
_REASONS = {
    100: "Continue",
    101: "Switching Protocols",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    505: "HTTP Version Not Supported",
    511: "Network Authentication Required",
}
# Bodies up to this size go out in the same write as the headers (one packet for small answers).
_COALESCE = 1 << 16


class Route:
    """One entry of the route table."""

    __slots__ = ("method", "pattern", "handler", "raw_body", "parts")

    def __init__(self, method: str, pattern: str, handler: Handler, raw_body: bool) -> None:
        self.method = method
        self.pattern = pattern
        self.handler = handler
        self.raw_body = raw_body
        self.parts = pattern.strip("/").split("/")

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The ``{name}`` parameters if ``segments`` fit this template, else ``None``."""
        if len(segments) != len(self.parts):
            return None
        params = {}
        for part, seg in zip(self.parts, segments):
            if part.startswith("{") and part.endswith("}"):
                if not seg:
                    return None
                params[part[1:-1]] = seg
            elif part != seg:
                return None
        return params


class Router:
    """The route table: exact paths in a dict, ``{name}`` templates tried in order."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str], Route] = {}
        self._paths: set[str] = set()
        self._templates: list[Route] = []

    def add(self, method: str, pattern: str, handler: Handler, *, raw_body: bool = False) -> None:
        """Serve ``method pattern`` with ``handler(request)``.

        ``handler`` returns a :class:`Response`, or any JSON-able value sent as HTTP 200.
        """
        route = Route(method.upper(), pattern, handler, raw_body)
        if "{" in pattern:
            self._templates.append(route)
        else:
            self._exact[(route.method, pattern)] = route
            self._paths.add(pattern)

    def routes(self) -> list[tuple[str, str]]:
        """Every ``(method, pattern)`` served, for documentation and tests."""
        return sorted(
            [(r.method, r.pattern) for r in self._exact.values()]
            + [(r.method, r.pattern) for r in self._templates]
        )

    def resolve(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route for ``method path`` and its parameters; 404/405 as :class:`BadRequest`."""
        route = self._exact.get((method, path))
        if route is not None:
            return route, {}
        path_known = path in self._paths
        segments = path.strip("/").split("/")
        for route in self._templates:
            params = route.match(segments)
            if params is not None:
                if route.method == method:
                    return route, params
                path_known = True
        if path_known:
            raise BadRequest("Method Not Allowed", status=405)
        raise BadRequest("Not Found", status=404)


class RockletServer:
    """Accepts connections on ``host:port`` (or the unix socket ``unix_path``) and serves each
    in its own thread through ``router``.

    A socket bound at ``unix_path`` is made connectable by any local user (its directory is
    what guards it). ``listen_socket``: a socket already listening, made by someone else (the
    engine's, handed in by :func:`.handoff.receive_listener`: how Docker's sandboxes are
    reached); ``host``, ``port`` and ``unix_path`` are then ignored.

    ``token``: the sandbox's secret; every request but ``GET /is_alive`` must carry it in the
    :data:`TOKEN_HEADER` header. ``None`` accepts every caller (``--no-auth``, for development).
    """

    def __init__(
        self,
        router: Router,
        host: str = "0.0.0.0",
        port: int = 22555,
        unix_path: str | None = None,
        token: str | None = None,
        listen_socket: socket.socket | None = None,
    ) -> None:
        self.router = router
        self.unix_path = unix_path
        self._token = token.encode("utf-8") if token else None
        if listen_socket is not None:
            sock = listen_socket
            if sock.family == socket.AF_UNIX:
                self.unix_path = sock.getsockname() or "(a socket handed in)"
        elif unix_path is not None:
            if os.path.exists(unix_path):
                os.unlink(unix_path)  # left by an earlier run of this container
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(unix_path)
            os.chmod(unix_path, 0o666)
            sock.listen(1024)
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(1024)
        self._unix = sock.family == socket.AF_UNIX
        self._sock: socket.socket | None = sock
        self._closing = False
        #: Called once, after the first answer is sent (the engine's readiness probe): work
        #: that can wait until the sandbox is known to run (warming the endpoints up).
        self.after_first_answer: list[Callable[[], None]] = []
        #: Counts each request's start and end (:func:`.__main__.warm_when_idle` watches it).
        self.activity = 0

    @classmethod
    def for_connections(
        cls, router: Router, token: str | None = None, *, unix: bool = False
    ) -> RockletServer:
        """A server without a listener: :meth:`serve_connection` serves connections accepted
        elsewhere (the rocklet's front, :mod:`.front`); ``unix``: they come from a unix socket."""
        server = cls.__new__(cls)
        server.router = router
        server.unix_path = None
        server._token = token.encode("utf-8") if token else None
        server._unix = unix
        server._sock = None
        server._closing = False
        server.after_first_answer = []
        server.activity = 0
        return server

    def serve_connection(self, conn: Any) -> None:
        """Serve the accepted connection ``conn`` (a socket, or the interpreter's ``_socket``
        one) until it closes, in the calling thread."""
        if not isinstance(conn, socket.socket):
            conn = socket.socket(fileno=conn.detach())
        self._serve_connection(conn)

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)`` (the real port when 0 was asked for); ``(path, 0)`` on a unix socket."""
        if self._unix:
            return str(self.unix_path), 0
        assert self._sock is not None, "a server without a listener has no address"
        addr = self._sock.getsockname()
        return addr[0], addr[1]

    @property
    def url(self) -> str:
        """Where it listens, for people: ``http://host:port`` or ``unix:PATH``."""
        host, port = self.address
        return "unix:%s" % host if self._unix else "http://%s:%d" % (host, port)

    def serve_forever(self) -> None:
        """Accept until :meth:`shutdown`; each connection runs in a daemon thread.

        The kernel may deliver SIGTERM to any thread, and Python runs signal handlers only in
        the main thread: a main thread blocked in ``accept()`` would never see it. So the main
        thread waits in ``poll`` on the listening socket and a signal wake-up socket.
        """
        listener = self._sock
        if listener is None:
            raise ValueError("a server made for_connections has no listener to serve")
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        try:
            old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        except ValueError:  # not the main thread: signals are not ours to watch
            old_wakeup = None
        # poll, not select: select refuses a descriptor numbered past 1,024, which a rocklet
        # holding many files and connections hands out (this loop would then never accept).
        poller = select.poll()
        listener_fd, wake_fd = listener.fileno(), wake_r.fileno()
        poller.register(listener_fd, select.POLLIN)
        poller.register(wake_fd, select.POLLIN)
        try:
            while not self._closing:
                try:
                    ready = {fd for fd, _ in poller.poll()}
                except OSError:
                    if self._closing:
                        return
                    continue
                if wake_fd in ready:
                    try:
                        wake_r.recv(512)  # the handler runs as soon as this thread runs bytecode
                    except OSError:
                        pass
                if listener_fd not in ready:
                    continue
                try:
                    conn, _ = listener.accept()
                except OSError:
                    if self._closing:
                        return
                    continue
                thread = threading.Thread(target=self._serve_connection, args=(conn,), daemon=True)
                thread.start()
        finally:
            if old_wakeup is not None:
                signal.set_wakeup_fd(old_wakeup)
            wake_r.close()
            wake_w.close()

    def shutdown(self) -> None:
        """Stop accepting connections (connections in progress finish on their own)."""
        self._closing = True
        if self._sock is None:
            return
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    # -- one connection -------------------------------------------------------------------

    def _serve_connection(self, conn: socket.socket) -> None:
        if not self._unix:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        rfile = conn.makefile("rb", buffering=65536)
        try:
            while self._serve_one(conn, rfile):
                pass
        except (OSError, ValueError):
            pass  # the client went away mid-request or mid-response
        finally:
            try:
                rfile.close()
                conn.close()
            except OSError:
                pass

    def _serve_one(self, conn: socket.socket, rfile: Any) -> bool:
        """Serve one request; ``False`` when the connection must close."""
        line = rfile.readline(MAX_LINE + 1)
        while line in (b"\r\n", b"\n"):
            line = rfile.readline(MAX_LINE + 1)
        if not line:
            return False
        self.activity += 1  # not exact across threads: enough to tell idle from busy
        try:
            method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ")
        except ValueError:
            self._send(conn, json_response({"detail": "malformed request line"}, 400), False)
            return False
        if not version.startswith("HTTP/1."):
            self._send(conn, json_response({"detail": "HTTP version not supported"}, 505), False)
            return False
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            hline = rfile.readline(MAX_LINE + 1)
            if hline in (b"\r\n", b"\n", b""):
                break
            name, sep, value = hline.decode("latin-1").partition(":")
            if not sep:
                self._send(conn, json_response({"detail": "malformed header line"}, 400), False)
                return False
            key = name.strip().lower()
            value = value.strip()
            headers[key] = headers[key] + ", " + value if key in headers else value
        else:
            self._send(conn, json_response({"detail": "too many headers"}, 400), False)
            return False

        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in connection
        else:
            keep_alive = "close" not in connection

        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: int | None = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
                if length < 0:
                    raise ValueError
            except ValueError:
                self._send(conn, json_response({"detail": "bad Content-Length"}, 400), False)
                return False
        reader = BodyReader(rfile, length, chunked)
        if headers.get("expect", "").lower() == "100-continue" and not reader.done:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

        path, _, query = target.partition("?")
        request = Request(
            method.upper(), unquote(path, plus=False), parse_query(query), headers, reader
        )
        if not self._authorized(request):
            # Nothing about the request is looked at, and its body is not read: close instead.
            self._send(conn, json_response({"detail": "Unauthorized"}, 401), False)
            return False
        response = self._dispatch(request)
        splice = getattr(response, "splice", None)
        if splice is not None:  # a tunnel (see .tunnel): the connection now carries raw bytes
            head = "HTTP/1.1 101 Switching Protocols\r\n" + "".join(
                "%s: %s\r\n" % item for item in response.headers.items()
            )
            conn.sendall((head + "\r\n").encode("latin-1"))
            splice(conn, rfile)
            return False
        if not reader.done:
            try:
                reader.drain()
            except BadRequest:
                keep_alive = False
        self._send(conn, response, keep_alive and response.after is None)
        self.activity += 1
        while self.after_first_answer:
            try:
                self.after_first_answer.pop()()  # one list, popped: each runs once, in one thread
            except IndexError:
                break
        if response.after is not None:
            response.after()
            return False
        return keep_alive

    def _authorized(self, request: Request) -> bool:
        """Whether ``request`` carries the secret (or needs none); constant-time compare."""
        if self._token is None or (request.method, request.path) == _OPEN:
            return True
        given = request.headers.get(TOKEN_HEADER, "").encode("latin-1")
        return _compare_digest(given, self._token)

    def _dispatch(self, request: Request) -> Response:
        try:
            route, params = self.router.resolve(request.method, request.path)
            request.params = params
            if not route.raw_body:
                request.body = request.reader.read_all()
            result = route.handler(request)
            if isinstance(result, Response):
                return result
            return json_response(result)
        except BadRequest as exc:
            return json_response({"detail": exc.detail}, exc.status)
        except Exception as exc:  # noqa: BLE001 - ROCK's contract: every failure becomes a 511
            import traceback

            return error_response(exc, traceback.format_exc())

    def _send(self, conn: socket.socket, response: Response, keep_alive: bool) -> None:
        head = ["HTTP/1.1 %d %s" % (response.status, _REASONS.get(response.status, "Unknown"))]
        head.append("content-type: " + response.content_type)
        for key, value in response.headers.items():
            head.append("%s: %s" % (key, value))
        chunked = False
        if response.stream is None:
            body = response.body or b""
            head.append("content-length: %d" % len(body))
        elif response.length is not None:
            head.append("content-length: %d" % response.length)
        else:
            head.append("transfer-encoding: chunked")
            chunked = True
        if not keep_alive:
            head.append("connection: close")
        header_bytes = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")

        if response.stream is None:
            if len(body) <= _COALESCE:
                conn.sendall(header_bytes + body)
            else:
                conn.sendall(header_bytes)
                conn.sendall(body)
            return
        conn.sendall(header_bytes)
        stream: Iterator[bytes] = iter(response.stream)
        try:
            for chunk in stream:
                if not chunk:
                    continue
                if chunked:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    conn.sendall(chunk)
        except Exception:
            # Headers are gone: the only honest signal left is to drop the connection.
            import traceback

            sys.stderr.write("rocklet: a streamed response failed; closing the connection\n")
            traceback.print_exc()
            raise OSError("stream aborted") from None
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if chunked:
            conn.sendall(b"0\r\n\r\n")
