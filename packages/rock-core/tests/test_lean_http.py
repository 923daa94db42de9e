"""rock-core's lean HTTP/1.1 client (``rock_core.lean_http``) against small real servers on
loopback sockets: kept-alive connections, the answer forms HTTP/1.1 allows, a connection the
server dropped as it was reused, timeouts, and a burst over a bounded number of connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rock_core.lean_http import LeanHttpClient, LeanHttpError

#: (method, target, headers in lower case, body) -> the raw answer, or None to close unanswered.
Handler = Callable[[str, str, dict[str, str], bytes], bytes | None]


def _json_answer(status: int, payload: object, extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


class Server:
    """A threaded HTTP/1.1 server on loopback, answering each request with ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.connections = 0
        self.received: list[tuple[str, str, dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    key, _, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
                size = int(headers.get("content-length") or 0)
                while len(buffer) < size:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:size], buffer[size:]
                with self._lock:
                    self.received.append((method, target, headers, body))
                answer = self.handler(method, target, headers, body)
                if answer is None:
                    return
                conn.sendall(answer)
                lowered = answer.split(b"\r\n\r\n", 1)[0].lower()
                if b"content-length" not in lowered and not (
                    b"chunked" in lowered and b"\r\n0\r\n" in answer
                ):
                    return  # an answer without a length (or cut short) ends with its connection

    def close(self) -> None:
        # Woken and joined before its socket is closed: a thread still in accept() on a closed
        # socket's number could take a connection from whatever socket next gets that number
        # (a later test's rocklet was once answered by this server's handler).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(5)
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    made: list[Server] = []

    def make(handler: Handler) -> Server:
        server = Server(handler)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def test_requests_reuse_one_kept_alive_connection_and_carry_body_and_headers(serve) -> None:
    def echo(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        return _json_answer(
            200,
            {"method": method, "target": target, "body": body.decode()},
            "X-Nomad-Index: 42\r\n",
        )

    server = serve(echo)

    async def main() -> list[object]:
        client = LeanHttpClient(
            server.address, headers={"X-Token": "secret"}, timeout=5.0, max_connections=4
        )
        try:
            answers = []
            for i in range(3):
                response = await client.request("PUT", f"/v1/var/a?n={i}", body=b'{"k":1}')
                answers.append(
                    (response.status_code, response.headers.get("x-NOMAD-index"), response.json())
                )
            return answers
        finally:
            await client.aclose()

    answers = asyncio.run(main())
    assert answers[2] == (
        200,
        "42",
        {"method": "PUT", "target": "/v1/var/a?n=2", "body": '{"k":1}'},
    )
    assert server.connections == 1
    method, target, headers, body = server.received[0]
    assert headers["x-token"] == "secret"
    assert headers["host"] == server.address.removeprefix("http://")
    assert headers["content-type"] == "application/json" and body == b'{"k":1}'


def test_an_error_status_is_an_answer_with_its_text(serve) -> None:
    server = serve(lambda *_: b"HTTP/1.1 404 Not Found\r\nContent-Length: 13\r\n\r\njob not found")

    async def main() -> tuple[int, str]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2)
        try:
            response = await client.request("GET", "/v1/job/x")
            return response.status_code, response.text
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (404, "job not found")


def test_a_chunked_answer_is_read_whole_and_the_connection_kept(serve) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\n[1, \r\n3;ext=1\r\n2, \r\n2\r\n3]\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    server = serve(lambda *_: chunked)

    async def main() -> list[object]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2)
        try:
            return [(await client.request("GET", "/x")).json() for _ in range(2)]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [[1, 2, 3], [1, 2, 3]]
    assert server.connections == 1


def test_an_answer_ended_by_closing_is_read_to_the_end_and_the_next_call_reconnects(
    serve,
) -> None:
    server = serve(lambda *_: b"HTTP/1.1 200 OK\r\n\r\nall of it")  # no length: closed after

    async def main() -> list[str]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2)
        try:
            return [(await client.request("GET", "/x")).text for _ in range(2)]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == ["all of it", "all of it"]
    assert server.connections == 2


def test_a_request_on_a_connection_the_server_dropped_is_sent_again_on_a_fresh_one(
    serve,
) -> None:
    """The server answers the first request of each connection and closes the connection when
    the next one comes, unanswered: an idle timeout meeting the reuse."""
    seen = threading.local()  # one thread per connection

    def first_only(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes | None:
        seen.count = getattr(seen, "count", 0) + 1
        return _json_answer(200, []) if seen.count == 1 else None

    server = serve(first_only)

    async def main() -> list[int]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2)
        try:
            return [(await client.request("GET", "/v1/jobs")).status_code for _ in range(3)]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [200, 200, 200]
    assert (len(server.received), server.connections) == (5, 3)


def test_a_server_that_drops_every_request_is_an_error_after_one_more_try(serve) -> None:
    server = serve(lambda *_: None)

    async def main() -> None:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2)
        try:
            await client.request("POST", "/v1/jobs", body=b"{}")
        finally:
            await client.aclose()

    with pytest.raises(LeanHttpError) as caught:
        asyncio.run(main())
    assert caught.value.dropped and not caught.value.timed_out
    assert len(server.received) == 2  # the request, and once more: no endless retries


def test_a_server_that_does_not_answer_in_time_is_a_timeout_error(serve) -> None:
    release = threading.Event()

    def stall(*_: object) -> bytes:
        release.wait(10)
        return _json_answer(200, [])

    server = serve(stall)

    async def main() -> None:
        client = LeanHttpClient(server.address, timeout=0.2, max_connections=2)
        try:
            await client.request("GET", "/v1/jobs")
        finally:
            await client.aclose()

    try:
        with pytest.raises(LeanHttpError) as caught:
            asyncio.run(main())
    finally:
        release.set()
    assert caught.value.timed_out and "/v1/jobs" in str(caught.value)
    assert len(server.received) == 1


def test_an_address_nothing_listens_on_is_an_error_naming_it() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()

    async def main() -> None:
        client = LeanHttpClient(f"http://127.0.0.1:{port}", timeout=5.0, max_connections=2)
        await client.request("GET", "/")

    with pytest.raises(LeanHttpError, match=f"cannot connect to 127.0.0.1:{port}"):
        asyncio.run(main())


def test_only_plain_http_addresses_are_taken() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        LeanHttpClient("https://127.0.0.1:4646", timeout=1.0, max_connections=1)


def test_a_burst_of_requests_is_answered_over_at_most_max_connections(serve) -> None:
    def slow(*_: object) -> bytes:
        time.sleep(0.01)
        return _json_answer(200, {"ok": True})

    server = serve(slow)

    async def main() -> list[int]:
        client = LeanHttpClient(server.address, timeout=10.0, max_connections=8)
        try:
            answers = await asyncio.gather(
                *(client.request("GET", f"/v1/job/{i}") for i in range(200))
            )
            return [a.status_code for a in answers]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [200] * 200
    assert server.connections <= 8


def test_a_streamed_answer_gives_its_lines_as_they_come_on_a_connection_of_its_own(
    serve,
) -> None:
    """A chunked stream whose lines straddle chunks (an event stream's frames), while a plain
    request still goes over the pool."""
    frames = [b'{"Index": 1}\n{"Ind', b'ex": 2}\n', b"{}\n", b'{"Index": 3}']
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(f), f) for f in frames) + b"0\r\n\r\n"

    def answer(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if target.startswith("/v1/event/stream"):
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        return _json_answer(200, [])

    server = serve(answer)

    async def main() -> tuple[list[str], int]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=1)
        try:
            async with client.stream("GET", "/v1/event/stream?topic=Job%3A%2A") as events:
                status = events.status_code
                lines = events.aiter_lines()
                first = await lines.__anext__()
                await client.request("GET", "/v1/jobs")  # the pool's one slot is free
                rest = [line async for line in lines]
            return [first, *rest], status
        finally:
            await client.aclose()

    lines, status = asyncio.run(main())
    assert status == 200
    assert lines == ['{"Index": 1}', '{"Index": 2}', "{}", '{"Index": 3}']
    assert server.connections == 2


def test_a_streamed_error_answer_is_read_whole(serve) -> None:
    server = serve(
        lambda *_: b"HTTP/1.1 403 Forbidden\r\nContent-Length: 17\r\n\r\nPermission denied"
    )

    async def main() -> tuple[int, bytes]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=1)
        try:
            async with client.stream("GET", "/v1/event/stream") as events:
                return events.status_code, await events.aread()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (403, b"Permission denied")


def test_a_stream_cut_in_the_middle_of_a_chunk_is_an_error(serve) -> None:
    server = serve(lambda *_: b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{"In')

    async def main() -> None:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=1)
        try:
            async with client.stream("GET", "/v1/event/stream") as events:
                async for _ in events.aiter_lines():
                    pass
        finally:
            await client.aclose()

    with pytest.raises(LeanHttpError, match="ended early"):
        asyncio.run(main())


def test_an_answer_past_the_cap_is_refused_naming_its_size_and_not_sent_again(serve) -> None:
    """Nomad's client reads at most ``max_answer`` bytes of an answer (a stand-in, or a real
    Nomad, must not make rock buffer without bound): one that says it is larger is refused
    unread, naming its size; one that turns out larger (chunked, or until the end) as it
    comes. Either way the request is not sent again (it had an answer)."""
    answers = {
        "/declared": b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000,
        "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"400\r\n"
        + b"x" * 1024
        + b"\r\n"
        + b"400\r\n"
        + b"x" * 1024
        + b"\r\n0\r\n\r\n",
        "/until-end": b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 5000,
        "/fits": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000,
    }
    server = serve(lambda method, target, *_: answers[target])

    async def main() -> dict[str, object]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=2, max_answer=1000)
        out: dict[str, object] = {}
        try:
            for target in answers:
                try:
                    out[target] = len((await client.request("GET", target)).content)
                except LeanHttpError as exc:
                    out[target] = (exc.too_large, exc.dropped, str(exc))
            return out
        finally:
            await client.aclose()

    out = asyncio.run(main())
    assert out["/declared"] == (
        True,
        False,
        "an answer of 5000 bytes, more than the 1000 bytes read (max_answer)",
    )
    assert out["/chunked"] == (True, False, "an answer, more than the 1000 bytes read (max_answer)")
    assert out["/until-end"] == out["/chunked"]
    assert out["/fits"] == 1000
    assert [target for _, target, _, _ in server.received] == list(answers)


def test_the_default_cap_is_nomads_largest_listing_with_room() -> None:
    from rock_core.lean_http import MAX_ANSWER

    client = LeanHttpClient("http://192.0.2.1:4646", timeout=1.0, max_connections=1)
    # 5,000 allocations with resources and task states at about 10 KB each, five times over.
    assert client.max_answer == MAX_ANSWER >= 5 * 5_000 * 10_000


def test_a_streamed_error_answer_past_the_cap_is_refused(serve) -> None:
    server = serve(lambda *_: b"HTTP/1.1 500 X\r\nContent-Length: 3000\r\n\r\n" + b"e" * 3000)

    async def main() -> None:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=1, max_answer=1000)
        try:
            async with client.stream("GET", "/v1/event/stream") as events:
                await events.aread()
        finally:
            await client.aclose()

    with pytest.raises(LeanHttpError, match="more than 1000 bytes") as caught:
        asyncio.run(main())
    assert caught.value.too_large


def test_a_streamed_line_past_the_cap_is_refused(serve) -> None:
    """An event stream is read as it comes, without a bound on its length; but one line (an
    event) longer than the cap is refused rather than held."""
    pieces = [b"%x\r\n%s\r\n" % (500, b"y" * 500) for _ in range(6)]
    server = serve(
        lambda *_: (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"4\r\nok\r\n\r\n"
            + b"".join(pieces)
            + b"0\r\n\r\n"
        )
    )

    async def main() -> list[str]:
        client = LeanHttpClient(server.address, timeout=5.0, max_connections=1, max_answer=1000)
        lines: list[str] = []
        try:
            async with client.stream("GET", "/v1/event/stream") as events:
                async for line in events.aiter_lines():
                    lines.append(line)
        except LeanHttpError as exc:
            assert exc.too_large and "longer than 1000 bytes" in str(exc)
            return lines
        finally:
            await client.aclose()
        raise AssertionError("no error")

    assert asyncio.run(main()) == ["ok"]
