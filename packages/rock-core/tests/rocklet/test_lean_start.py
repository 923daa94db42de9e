"""The rocklet's start imports only what listening and the readiness probe need: every module
it imports costs CPU in each sandbox's small share while a thousand start at once. json (and
re, which json imports) come with the warm-up, after the first answer."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from rock_core.ports import listen_port
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.rocklet_delivery import launch_command, prepare_rocklet
from rock_core.testing import eventually


def _probe(port: int) -> bytes | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /is_alive HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
            return answer
    except OSError:
        return None


def _imported(stderr: str) -> list[str]:
    """The modules ``-X importtime`` reports, in the order their imports finished."""
    return [
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and not line.rstrip().endswith("| imported package")
    ]


def _launch(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """The rocklet as a runtime launches it (with the secret), ``-X importtime`` reporting on
    its stderr; and its port on 127.0.0.1."""
    delivery = prepare_rocklet(tmp_path)
    port = listen_port()
    shell, flag, script = launch_command(str(delivery.path), host="127.0.0.1", port=port)
    assert "exec python3 -I -S " in script
    script = script.replace("exec python3 -I -S ", "exec python3 -X importtime -I -S ")
    env = {**os.environ, TOKEN_ENV: "s3cret", "HOME": str(tmp_path)}
    process = subprocess.Popen(
        [shell, flag, script],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def test_the_rocklet_listens_before_it_imports_json_and_its_probe_answer_is_json(
    tmp_path: Path,
) -> None:
    process, port = _launch(tmp_path)
    try:
        answer = eventually(
            lambda: _probe(port), until=lambda a: a, what="the rocklet answering", timeout=30
        )
        assert answer is not None
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"application/json" in head
        import json

        assert json.loads(body) == {"is_alive": True, "message": ""}
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    before, listening, after = stderr.partition("listening on")
    assert listening, stderr[-2000:]
    started_with = _imported(before)
    assert "_socket" in started_with  # the report is there
    # Neither the server nor socket, signal and threading (with their enum and functools).
    for heavy in ("json", "re", "socket", "signal", "threading", "enum", "rocklet.server"):
        assert heavy not in started_with
    # Answering the probe loaded nothing either: that waits for the first real request.
    assert "rocklet.server" not in _imported(after)


def test_a_command_after_probes_loads_the_server_and_keeps_every_check(tmp_path: Path) -> None:
    """Probes are answered by the front; the first real request (unauthorised first) loads the
    server, which answers it with every check; probes on a kept connection go on working."""
    process, port = _launch(tmp_path)
    try:
        eventually(
            lambda: _probe(port), until=lambda a: a, what="the rocklet answering", timeout=30
        )
        import httpx

        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(3):  # a kept connection
                assert http.get("/is_alive").json() == {"is_alive": True, "message": ""}
            assert http.post("/execute", json={"command": "echo no"}).status_code == 401
            assert http.post("/warm_up").status_code == 401
            answer = http.post(
                "/execute",
                json={"command": "echo $ROCK_ROCKLET_TOKEN-x", "shell": True},
                headers={"x-rock-rocklet-token": "s3cret"},
            ).json()
            assert answer["stdout"] == "-x\n"  # the secret is not inherited
            assert http.post("/warm_up", headers={"x-rock-rocklet-token": "s3cret"}).json() == {
                "warm": True
            }
            assert http.get("/is_alive").json() == {"is_alive": True, "message": ""}
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
        _, stderr = process.communicate(timeout=10)
    _, _, after = stderr.partition("listening on")
    assert "rocklet.server" in _imported(after)


def test_the_warm_up_after_the_first_answer_leaves_out_what_no_first_command_needs(
    tmp_path: Path,
) -> None:
    """The warm-up runs in every sandbox while the others still start: shutil (with bz2 and
    lzma, for archives the rocklet never makes) comes only with a call that uses it."""
    delivery = prepare_rocklet(tmp_path)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from rocklet.api import Rocklet; "
        "Rocklet(sys.argv[2]).warm_up(); "
        "print(' '.join(m for m in ('shutil', 'bz2', 'lzma', 'json') if m in sys.modules))"
    )
    found = subprocess.run(
        ["python3", "-I", "-S", "-c", script, str(delivery.path), str(tmp_path / "state")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == ["json"]  # json is warmed up, as every answer but the probe's needs it


def test_the_endpoints_warm_up_only_once_no_request_started_or_ended_for_a_while() -> None:
    """A rollout's short, busy sandbox never pays for sessions, processes and statistics it
    does not use: the warm-up waits until the server's activity stands still for a period."""
    from rock_core.rocklet.__main__ import warm_when_idle

    class Server:
        reads = 0

        @property
        def activity(self) -> int:
            self.reads += 1
            return min(self.reads, 6)  # requests start and end for the first six looks

    warmed_at: list[int] = []
    server = Server()

    class Rocklet:
        def warm_up(self) -> None:
            warmed_at.append(server.reads)

    warm_when_idle(server, Rocklet(), idle=0.001)
    assert len(warmed_at) == 1
    assert warmed_at[0] >= 7  # not before the activity stood still for a whole period


def test_the_warm_up_writes_nothing_to_the_sandbox_s_files(tmp_path: Path) -> None:
    """An idle sandbox's files stay as they were (a fork unchanged since a snapshot reuses it):
    the warm-up, which runs once the rocklet is idle, makes no directory; the first session
    makes its scratch root, traversable but not listable, as before."""
    from rock_core.rocklet.api import Rocklet

    state = tmp_path / "state"
    state.mkdir()
    rocklet = Rocklet(str(state))
    rocklet.warm_up()
    assert list(state.iterdir()) == []
    rocklet.sessions.create("first")
    try:
        assert (state / "sessions").stat().st_mode & 0o777 == 0o711
    finally:
        rocklet.shutdown()
