"""The stand-in Nomad's HTTP layer: its own ASGI entry (a method no route takes, a handler's
error), an answer's writes gathered into one, and a simulated task's bounded wait for a kill."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx

from rock_nomad.testing import StandInNomad
from rock_nomad.testing._http_writes import CoalescedWrites
from rock_nomad.testing._simulated import KillRequest


class _Transport:
    """What a transport was asked to do, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def close(self) -> None:
        self.calls.append(("close", None))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", None))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> Any:
        return f"extra {name}"


def test_one_turns_writes_leave_in_one_write_before_a_close_and_none_after_an_abort() -> None:
    async def main() -> list[list[tuple[str, Any]]]:
        seen = []
        for end in ("turn", "close", "abort"):
            transport = _Transport()
            writes = CoalescedWrites(transport)  # type: ignore[arg-type]
            writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
            writes.write(bytearray(b"body"))
            assert transport.calls == []  # nothing sent within the turn
            if end == "close":
                writes.close()
            elif end == "abort":
                writes.abort()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert writes.get_extra_info("peername") == "extra peername"
            seen.append(transport.calls)
        return seen

    turn, close, abort = asyncio.run(main())
    assert turn == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody")]
    assert close == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody"), ("close", None)]
    assert abort == [("abort", None)]


def test_an_answer_is_one_write_on_the_wire_and_whole() -> None:
    with StandInNomad(nodes=1, simulate_tasks=(0.1, 0.1)) as nomad:
        with socket.create_connection((nomad.host, nomad.port), timeout=10) as conn:
            conn.sendall(b"GET /v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n")
            # The first read holds the headers and the whole body (its Content-Length).
            first = conn.recv(1 << 20)
        head, _, body = first.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        assert head.startswith(b"HTTP/1.1 200")
        assert len(body) == length and body.startswith(b"[{")


def test_a_method_no_route_takes_is_405_and_a_handlers_error_is_500() -> None:
    with (
        StandInNomad(nodes=1, simulate_tasks=(0.1, 0.1)) as nomad,
        httpx.Client(base_url=nomad.address, timeout=10) as http,
    ):
        refused = http.request("TRACE", "/v1/nodes")
        assert refused.status_code == 405
        assert refused.text == "Method Not Allowed"
        assert set(refused.headers["allow"].split(", ")) == {
            "GET",
            "PUT",
            "POST",
            "DELETE",
            "HEAD",
            "PATCH",
            "OPTIONS",
        }
        # A route's wrong method stays Nomad's own answer.
        assert http.delete("/v1/nodes").text == "Invalid method"
        assert http.get("/v1/nothing").text == "404 page not found\n"

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a stand-in bug")

        assert nomad.cluster is not None
        nomad.cluster.register = broken  # type: ignore[method-assign]
        failed = http.post("/v1/jobs", json={"Job": {"ID": "x"}})
        assert (failed.status_code, failed.text) == (500, "Internal Server Error")
        assert http.get("/v1/nodes").status_code == 200  # it serves on


def test_a_kill_request_is_waited_for_at_most_the_time_given() -> None:
    async def main() -> tuple[bool, bool, bool, int]:
        timed_out = await KillRequest().within(0.01)
        request = KillRequest()
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, request.set)
        killed = await request.within(5)
        already = await request.within(30)
        left = len(request._within) + len(KillRequest()._within)
        return timed_out, killed, already, left

    timed_out, killed, already, left = asyncio.run(main())
    assert (timed_out, killed, already, left) == (False, True, True, 0)
