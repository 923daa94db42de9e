"""The rocklet answers its first request (the engine's readiness probe) before it warms its
endpoints up: what waits for the first answer runs once, after it, whatever else connects."""

from __future__ import annotations

import threading

import httpx

from rock_core.rocklet.http_messages import json_response
from rock_core.rocklet.server import RockletServer, Router


def test_work_after_the_first_answer_runs_once_and_after_the_answer_is_out() -> None:
    answered: list[str] = []
    ran: list[list[str]] = []
    router = Router()
    router.add("GET", "/is_alive", lambda request: json_response({"is_alive": True}))
    server = RockletServer(router, "127.0.0.1", 0)
    server.after_first_answer.append(lambda: ran.append(list(answered)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.address
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as http:
            for n in range(3):
                assert http.get("/is_alive").json() == {"is_alive": True}
                answered.append(f"answer {n}")
    finally:
        server.shutdown()
        thread.join(10)
    assert len(ran) == 1  # once, however many answers
    assert server.after_first_answer == []


def test_the_front_answers_only_a_whole_bare_probe_and_hands_everything_else_over() -> None:
    """What the front answers itself (a probe without a body, whole in what arrived) and what it
    leaves, unread, to the full server (anything else, however close to a probe)."""
    from rock_core.rocklet.front import _bare_probe, probe_answer

    probe = b"GET /is_alive HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n"
    assert _bare_probe(probe) == (len(probe), False)
    assert _bare_probe(probe + b"GET / HTTP/1.1\r\n") == (len(probe), False)  # the next waits
    assert _bare_probe(b"GET /is_alive HTTP/1.1\r\n\r\n") == (26, True)
    assert _bare_probe(b"GET /is_alive HTTP/1.1\r\nHost: r\r\n\r\n") == (35, True)
    for other in (
        b"GET /is_alive HTTP/1.1\r\nHost: r\r\n",  # not whole yet
        b"GET /is_alive?x=1 HTTP/1.1\r\n\r\n",
        b"GET /is_alive HTTP/1.0\r\n\r\n",
        b"POST /is_alive HTTP/1.1\r\n\r\n",
        b"GET /is_alive HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        b"GET /is_alive HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /is_alive HTTP/1.1\r\nUpgrade: x\r\n\r\n",
        b"GET /is_alive HTTP/1.1\r\nno colon\r\n\r\n",
        b"\r\nGET /is_alive HTTP/1.1\r\n\r\n",
        b"GET /execute HTTP/1.1\r\n\r\n",
    ):
        assert _bare_probe(other) is None, other
    assert probe_answer(True) == (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 30\r\n\r\n"
        b'{"is_alive":true,"message":""}'
    )
    assert probe_answer(False).split(b"\r\n")[3] == b"connection: close"


def test_the_full_server_answers_a_probe_with_the_fronts_bytes() -> None:
    """The front's answer is the full server's, byte for byte (keep-alive and close)."""
    import socket

    from rock_core.rocklet.api import Rocklet, build_router
    from rock_core.rocklet.front import probe_answer

    server = RockletServer(build_router(Rocklet("/nonexistent-state")), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for close, keep in ((b"Connection: close\r\n", False), (b"", True)):
            with socket.create_connection(server.address, timeout=10) as conn:
                request = b"GET /is_alive HTTP/1.1\r\nHost: r\r\n" + close + b"\r\n"
                conn.sendall(request)
                want = probe_answer(keep)
                got = b""
                while len(got) < len(want):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                assert got == want
    finally:
        server.shutdown()
        thread.join(10)


def test_the_front_whose_descriptors_are_past_1024_still_answers() -> None:
    """A front holding more than 1,024 descriptors gets numbers ``select`` refuses for its
    listener and wake-up pipe: its accept loop still answers the probe (it waits with poll)."""
    import os
    import resource
    import socket

    from rock_core.rocklet.front import Front, probe_answer

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1200, hard), hard))
    held: list[int] = []
    listener = None
    front = thread = None
    try:
        while not held or held[-1] <= 1030:
            held.append(os.open("/dev/null", os.O_RDONLY))
        listener = socket.create_server(("127.0.0.1", 0))
        assert listener.fileno() > 1024
        front = Front(listener, load=lambda: None)
        thread = threading.Thread(target=front.serve_forever, daemon=True)
        thread.start()
        with socket.create_connection(listener.getsockname(), timeout=10) as conn:
            conn.sendall(b"GET /is_alive HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer == probe_answer(False)
    finally:
        if front is not None:
            front.shutdown()
        if thread is not None:
            thread.join(10)
        if listener is not None:
            listener.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
