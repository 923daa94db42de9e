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
