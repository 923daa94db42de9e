"""Services the proxy tests and `rock bench proxy` start inside a sandbox (standard library only; run as a script).

python3 sandbox_services.py http PORT     HTTP/1.1 (keep-alive): /echo, /redirect*, /sse*,
                                          /bytes?n=, /upload, /slow
python3 sandbox_services.py ws PORT       a WebSocket echo server (text and binary, any size;
                                          the text "flood N" answers N binary MiB, then "flood done";
                                          FLOOD_SENT holds how many it has sent so far)
python3 sandbox_services.py tcp PORT      a TCP echo server (echoes until EOF, then closes)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# /sse: event N+1 is written only once /sse-next was called N+1 times, so a client that gets
# event N before asking for the next proves the proxy passed it on as it was written.
_sse_released = threading.Semaphore(0)

#: The flood's progress: the number of MiB it has handed to the connection, rewritten after each
#: one, so a test sees when a client that does not read has stalled it.
FLOOD_SENT = "/tmp/ws-flood-sent"


def _report_flood(sent: int) -> None:
    with open(FLOOD_SENT + ".new", "w") as out:
        out.write(str(sent))
    os.replace(FLOOD_SENT + ".new", FLOOD_SENT)


class Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer  # the server below (BaseRequestHandler says only BaseServer)
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = (
        True  # headers and body are separate writes: no 40 ms stall between them
    )

    def log_message(self, *args: object) -> None:
        pass

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _route(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        if url.path == "/upload":
            digest, total = hashlib.sha256(), 0
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                total += len(chunk)
                remaining -= len(chunk)
            return self._send(
                200, json.dumps({"bytes": total, "sha256": digest.hexdigest()}).encode()
            )
        body = self._body()
        if url.path == "/redirect":
            return self._send(302, b"", headers=[("Location", "/echo?from=redirect")])
        if url.path == "/redirect-absolute":
            return self._send(
                302,
                b"",
                headers=[
                    ("Location", "http://localhost:%d/echo?from=absolute" % self.server.server_port)
                ],
            )
        if url.path == "/redirect-away":
            return self._send(302, b"", headers=[("Location", "https://example.invalid/elsewhere")])
        if url.path == "/bytes":
            n = int(query.get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = b"\x5a" * (1 << 20)
            while n:
                piece = block[: min(n, len(block))]
                self.wfile.write(piece)
                n -= len(piece)
            return None
        if url.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            count = int(query.get("n", ["3"])[0])
            for i in range(count):
                if i and not _sse_released.acquire(timeout=60):
                    break
                event = ("data: event %d\n\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return None
        if url.path == "/sse-next":
            _sse_released.release()
            return self._send(200, b"{}")
        if url.path == "/slow":
            time.sleep(float(query.get("s", ["30"])[0]))
            return self._send(200, b"{}")
        answer = {
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("latin-1"),
        }
        return self._send(200, json.dumps(answer).encode(), headers=[("X-Service", "echo")])

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = lambda self: (
        self._route()
    )


# -- a minimal WebSocket echo server (RFC 6455) -----------------------------------------------


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _ws_client(conn: socket.socket) -> None:
    request = b""
    while b"\r\n\r\n" not in request:
        request += conn.recv(4096)
    headers: dict[bytes, bytes] = {}
    for line in request.split(b"\r\n")[1:]:
        if b":" in line:
            key, value = line.split(b":", 1)
            headers[key.strip().lower()] = value.strip()
    accept = base64.b64encode(
        hashlib.sha1(
            headers[b"sec-websocket-key"] + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        ).digest()
    )
    extra = b""
    if b"sec-websocket-protocol" in headers:
        extra = (
            b"Sec-WebSocket-Protocol: "
            + headers[b"sec-websocket-protocol"].split(b",")[0].strip()
            + b"\r\n"
        )
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n" + extra + b"\r\n"
    )
    message, kind = bytearray(), None
    while True:
        b0, b1 = _recv_exact(conn, 2)
        opcode, n = b0 & 0x0F, b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", _recv_exact(conn, 2))[0]
        elif n == 127:
            n = struct.unpack("!Q", _recv_exact(conn, 8))[0]
        mask = _recv_exact(conn, 4) if b1 & 0x80 else None
        payload = _recv_exact(conn, n)
        if mask and n:
            mask_bits = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
            payload = (int.from_bytes(payload, "big") ^ mask_bits).to_bytes(n, "big")
        if opcode == 8:
            conn.sendall(_frame(8, payload[:2]))
            return
        if opcode == 9:
            conn.sendall(_frame(10, payload))
            continue
        if opcode in (1, 2):
            kind, message = opcode, bytearray(payload)
        elif opcode == 0:
            message += payload
        if b0 & 0x80 and kind is not None:
            if kind == 1 and message.startswith(b"flood "):
                # "flood N": N binary messages of 1 MiB, as fast as the connection takes them;
                # random bytes, so that a compressed connection (permessage-deflate) carries
                # them at full size too.
                block = _frame(2, os.urandom(1 << 20))
                _report_flood(0)
                for sent in range(1, int(message.split()[1]) + 1):
                    conn.sendall(block)
                    _report_flood(sent)
                conn.sendall(_frame(1, b"flood done"))
            else:
                conn.sendall(_frame(kind, bytes(message)))
            message, kind = bytearray(), None


def _serve_threads(port: int, handle: Callable[[socket.socket], None]) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)
    while True:
        conn, _ = server.accept()

        def run(conn: socket.socket = conn) -> None:
            try:
                handle(conn)
            except (EOFError, OSError):
                pass
            finally:
                conn.close()

        threading.Thread(target=run, daemon=True).start()


def _tcp_echo(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(65536)
        if not data:
            return
        conn.sendall(data)


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "http":
        ThreadingHTTPServer.daemon_threads = True
        ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    elif kind == "ws":
        _serve_threads(port, _ws_client)
    else:
        _serve_threads(port, _tcp_echo)
