"""The HTTP surface: ROCK's simple endpoints, the error contracts, keep-alive, validation."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess

import anyio
import httpx
import pytest

from rock_core.rocklet.server import TOKEN_ENV, TOKEN_HEADER
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.testing import eventually

from .conftest import system_python


def test_root_and_is_alive_answer_like_rock(rocklet):
    assert rocklet.client.get("/").json() == {"message": "hello world"}
    assert rocklet.client.get("/is_alive").json() == {"is_alive": True, "message": ""}


def test_statistics_have_rocks_fields(rocklet):
    stats = rocklet.client.get("/get_statistics").json()
    for key in ("cpu", "mem", "disk", "net"):
        assert key in stats
    assert 0 <= stats["mem"] <= 100
    assert 0 <= stats["disk"] <= 100
    assert stats["net"] >= 0
    assert stats["cpu"] >= 0


def test_unknown_path_is_404_and_wrong_method_405(rocklet):
    response = rocklet.client.get("/no_such_endpoint")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}
    response = rocklet.client.get("/execute")
    assert response.status_code == 405
    response = rocklet.client.delete("/processes/abc")
    assert response.status_code == 405


def test_malformed_json_is_400_with_detail(rocklet):
    response = rocklet.client.post("/execute", content=b"{not json")
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["detail"]
    response = rocklet.client.post("/execute", content=b"[1, 2]")
    assert response.status_code == 400
    assert "JSON object" in response.json()["detail"]


def test_wrong_field_type_is_400_naming_the_field(rocklet):
    response = rocklet.post("/run_in_session", command=["echo"], session="default")
    assert response.status_code == 400
    assert "'command'" in response.json()["detail"]
    response = rocklet.post("/run_in_session", command="true", check="loud")
    assert response.status_code == 400
    assert "'check'" in response.json()["detail"]
    response = rocklet.post("/create_session", session="x", env={"A": 1})
    assert response.status_code == 400
    assert "'env'" in response.json()["detail"]
    response = rocklet.post("/execute")
    assert response.status_code == 400
    assert "'command' is required" in response.json()["detail"]


def test_sandbox_id_and_unknown_keys_are_ignored(rocklet):
    body = rocklet.ok("/execute", command=["echo", "ok"], sandbox_id="sb-1", something_new=True)
    assert body["stdout"] == "ok\n"


def test_errors_follow_rocks_511_contract(rocklet):
    err = rocklet.error("/run_in_session", session="never-created", command="true")
    assert set(err) == {"message", "class_path", "traceback", "extra_info"}
    assert err["class_path"] == "rock.rocklet.exceptions.SessionDoesNotExistError"
    assert "never-created" in err["message"]
    assert "Traceback" in err["traceback"]


def test_keep_alive_serves_many_requests_on_one_connection(rocklet):
    with socket.create_connection(("127.0.0.1", rocklet.port)) as sock:
        stream = sock.makefile("rb")
        for _ in range(3):
            sock.sendall(b"GET /is_alive HTTP/1.1\r\nHost: x\r\n\r\n")
            status = stream.readline()
            assert status.startswith(b"HTTP/1.1 200")
            length = 0
            while True:
                line = stream.readline()
                if line == b"\r\n":
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            assert json.loads(stream.read(length))["is_alive"] is True


def test_chunked_request_body_is_accepted(rocklet):
    def body():
        yield b'{"command": ["echo",'
        yield b' "chunked"]}'

    response = rocklet.client.post(
        "/execute", content=body(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["stdout"] == "chunked\n"


def test_concurrent_requests_are_served_in_parallel(rocklet, tmp_path):
    # A slow command on one connection must not hold up another connection. The slow command
    # says it runs (a file) and holds until the test releases it (another file): the fast
    # request is sent while it surely runs, and answers before it is released.
    import threading

    results = {}
    entered, release = tmp_path / "entered", tmp_path / "release"
    held = f"touch {entered}; while [ ! -e {release} ]; do sleep 0.01; done; echo slow"

    def slow():
        with httpx.Client(
            base_url=rocklet.url, timeout=120, headers=rocklet.client.headers
        ) as client:
            results["slow"] = client.post("/execute", json={"command": held, "shell": True}).json()

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        eventually(entered.exists, what="the slow command running")
        # A rocklet serving one request at a time would not answer until the release: timeout.
        with httpx.Client(base_url=rocklet.url, timeout=30, headers=rocklet.client.headers) as fast:
            assert fast.get("/is_alive").json()["is_alive"] is True
        results["fast_done_while_slow_running"] = thread.is_alive()
    finally:
        release.touch()
        thread.join()
    assert results["slow"]["stdout"] == "slow\n"
    assert results["fast_done_while_slow_running"] is True


def test_listens_on_a_unix_socket_that_any_local_user_may_connect_to(pyz, tmp_path):
    """``--unix PATH`` (sandboxes without a network): HTTP over the socket, mode 0666, SIGTERM ends it."""
    path = tmp_path / "rocklet.sock"
    path.write_text("left by an earlier run")  # replaced, not an error
    stderr = tmp_path / "stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [system_python(), "-I", str(pyz), "--unix", str(path), "--no-auth"],
            stderr=err,
            cwd=str(tmp_path),
        )
    try:

        def listening() -> bool:
            assert proc.poll() is None, stderr.read_text()
            return "listening on unix:" in stderr.read_text()

        eventually(listening, what="the rocklet listening on its socket", timeout=30)
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o666
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(path)), base_url="http://rocklet"
        ) as client:
            assert client.get("/is_alive").json()["is_alive"] is True
            answer = client.post(
                "/execute", json={"command": ["echo", "over unix"], "shell": False}
            ).json()
            assert answer["stdout"].strip() == "over unix" and answer["exit_code"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, stderr.read_text()


def test_readiness_probe_says_yes_only_for_an_answering_rocklet(rocklet):
    """RockletClient.probe (the engine's readiness poll): 200 from /is_alive is yes; nothing
    listening, a listener that drops the connection (as Docker's proxy does before the container
    listens) and one that answers an error are no."""

    def dropper() -> socket.socket:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        return sock

    async def check() -> None:
        async with new_http_client() as http:
            port = rocklet.port
            assert await RockletClient(http, "127.0.0.1", port).probe()
            closed = dropper()
            closed_port = closed.getsockname()[1]
            closed.close()
            assert not await RockletClient(http, "127.0.0.1", closed_port).probe(timeout=1)
            drops = dropper()

            def accept_and_drop() -> None:
                conn, _ = drops.accept()
                conn.close()

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, accept_and_drop)
                assert not await RockletClient(http, "127.0.0.1", drops.getsockname()[1]).probe(
                    timeout=5
                )
            drops.close()
            errors = dropper()

            def answer_500() -> None:
                conn, _ = errors.accept()
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
                conn.close()

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, answer_500)
                assert not await RockletClient(http, "127.0.0.1", errors.getsockname()[1]).probe(
                    timeout=5
                )
            errors.close()

    anyio.run(check)


# -- the sandbox's secret -----------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {TOKEN_HEADER: "not-the-secret"}, {TOKEN_HEADER: ""}])
def test_a_call_without_the_secret_is_refused_with_401_before_routing(rocklet, headers):
    """Every route answers 401 without the right secret; unknown paths too (nothing about the
    route table leaks), and nothing runs."""
    with httpx.Client(base_url=rocklet.url, timeout=30, headers=headers) as client:
        for method, path, body in [
            ("POST", "/execute", {"command": "touch /tmp/should-not-exist-401", "shell": True}),
            ("POST", "/read_file", {"path": "/etc/hostname"}),
            ("GET", "/get_statistics", None),
            ("GET", "/processes", None),
            ("GET", "/no/such/route", None),
        ]:
            response = client.request(method, path, json=body)
            assert response.status_code == 401, (path, response.text)
            assert response.json() == {"detail": "Unauthorized"}
    assert not os.path.exists("/tmp/should-not-exist-401")


def test_the_bare_liveness_probe_needs_no_secret_and_reveals_nothing(rocklet):
    with httpx.Client(base_url=rocklet.url, timeout=30) as client:
        response = client.get("/is_alive")
    assert response.status_code == 200
    assert response.json() == {"is_alive": True, "message": ""}


def test_commands_do_not_inherit_the_secret(rocklet):
    """The rocklet takes the secret out of its environment before it runs anything."""
    answer = rocklet.ok("/execute", command="env", shell=True)
    assert TOKEN_ENV not in answer["stdout"] and rocklet.token not in answer["stdout"]


def test_a_rocklet_without_a_secret_refuses_to_start_unless_told_no_auth(pyz, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != TOKEN_ENV}
    result = subprocess.run(
        [system_python(), "-I", str(pyz), "--host", "127.0.0.1", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert TOKEN_ENV in result.stderr and "--no-auth" in result.stderr
