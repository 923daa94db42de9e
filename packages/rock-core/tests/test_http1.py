"""The HTTP/1.1 core both lean clients share (``rock_core.http1``), fed bytes directly: the
bounds on what a hostile server sends (head, trailers, chunks), which connections are kept,
which ends say "no byte of an answer" (the one a request may be sent again after), and a
streamed body that pauses the server while its reader is behind."""

from __future__ import annotations

import asyncio

import pytest

from rock_core.http1 import MAX_HEAD, STREAM_BUFFER, Connection, Dropped, Encoded, TooLarge


class FakeTransport:
    """What :class:`Connection` calls on its transport, recorded."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False
        self.paused = 0
        self.resumed = 0

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1


def _whole(*pieces: bytes, cap: int = 1 << 20, end: bool = False) -> tuple[Connection, object]:
    """Feed ``pieces`` to a connection awaiting a whole answer; the connection and what its
    waiter holds (``None``: not done; the answer's body; or the exception)."""

    async def main() -> tuple[Connection, object]:
        connection = Connection("the test server")
        transport = FakeTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        waiter = asyncio.get_running_loop().create_future()
        connection.begin(b"GET / HTTP/1.1\r\n\r\n", cap, waiter)
        for piece in pieces:
            connection.data_received(piece)
        if end:
            connection.eof_received()
        if not waiter.done():
            return connection, None
        if waiter.exception() is not None:
            return connection, waiter.exception()
        assert connection.answer is not None
        return connection, connection.answer.content

    return asyncio.run(main())


def test_an_answer_in_pieces_is_read_whole_and_its_connection_kept() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    connection, body = _whole(*[answer[i : i + 3] for i in range(0, len(answer), 3)])
    assert body == b"hello" and connection.keep and not connection.closed


def test_bytes_past_the_answer_leave_the_connection_unkept() -> None:
    connection, body = _whole(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200")
    assert body == b"ok" and not connection.keep


def test_a_chunked_answer_with_trailers_is_read_in_any_pieces() -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    for size in (1, 2, 7, len(answer)):
        connection, body = _whole(*[answer[i : i + size] for i in range(0, len(answer), size)])
        assert body == b"abcde" and connection.keep, size


@pytest.mark.parametrize(
    ("pieces", "error", "words"),
    [
        ([b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD], Dropped, "head is longer"),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"]
            + [b"T: " + b"t" * 1000 + b"\r\n"] * 70,
            Dropped,
            "trailers are longer",
        ),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: " + b"t" * MAX_HEAD],
            Dropped,
            "trailers are longer",
        ),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"],
            Dropped,
            "longer than its size",
        ),
        (
            [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * (MAX_HEAD + 1)],
            Dropped,
            "chunk size",
        ),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], Dropped, "chunk size"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n"], Dropped, "Content-Length"),
        ([b"SSH-2.0-OpenSSH\r\n\r\n"], Dropped, "not an HTTP answer"),
        ([b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n"], Encoded, "gzip"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 2001\r\n\r\n"], TooLarge, ""),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d1\r\n"], TooLarge, ""),
        ([b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 2001], TooLarge, ""),
    ],
    ids=[
        "long-head",
        "many-trailers",
        "one-long-trailer",
        "chunk-overrun",
        "long-size-line",
        "bad-size",
        "bad-length",
        "not-http",
        "encoded",
        "declared-length",
        "declared-chunk",
        "until-end",
    ],
)
def test_a_hostile_answer_fails_as_it_comes_and_closes_its_connection(
    pieces: list[bytes], error: type[Exception], words: str
) -> None:
    connection, outcome = _whole(*pieces, cap=2000)
    assert isinstance(outcome, error), outcome
    assert words in str(outcome)
    assert connection.closed
    if isinstance(outcome, TooLarge):
        assert outcome.limit == 2000


def test_only_an_end_before_any_byte_of_an_answer_is_unanswered() -> None:
    _, nothing = _whole(end=True)
    _, some = _whole(b"HTTP/1.1 200 OK\r\nContent-Le", end=True)
    _, body = _whole(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhal", end=True)
    assert isinstance(nothing, Dropped) and nothing.unanswered and nothing.ended
    assert isinstance(some, Dropped) and not some.unanswered and some.ended
    assert isinstance(body, Dropped) and not body.unanswered and "body ended early" in str(body)


def test_a_streamed_body_pauses_the_server_while_its_reader_is_behind() -> None:
    async def main() -> tuple[list[int], int, int, int]:
        connection = Connection()
        transport = FakeTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        waiter = asyncio.get_running_loop().create_future()
        connection.begin_stream(b"GET /v1/event/stream HTTP/1.1\r\n\r\n", 1000, waiter)
        connection.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await waiter
        block = b"x" * 65536
        fed = 0
        while not transport.paused and fed < 4 * STREAM_BUFFER:
            connection.data_received(b"%x\r\n%s\r\n" % (len(block), block))
            fed += len(block)
        paused_at = transport.resumed
        sizes = [len(piece) for piece in await connection.next_pieces()]
        connection.data_received(b"0\r\n\r\n")
        assert await connection.next_pieces() == []
        return sizes, fed, paused_at, transport.resumed

    sizes, fed, resumed_before, resumed_after = asyncio.run(main())
    assert sum(sizes) == fed and STREAM_BUFFER < fed <= STREAM_BUFFER + 65536
    assert (resumed_before, resumed_after) == (0, 1)
