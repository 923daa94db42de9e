"""The remote engine without an admin server: headers, error mapping, servers that are not rock's.

Everything here runs without Docker. The engine against a real admin server is in
``test_remote_admin.py`` (and the whole SDK suite, with ``ROCK_TEST_REMOTE=1``).
"""

from __future__ import annotations

import contextlib
import http.server
import inspect
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rock.sdk._drivers import RemoteDriver, get_remote_driver, remote_waits
from rock.sdk._drivers.remote import error_from_envelope, remote_headers
from rock.sdk.sandbox.client import Sandbox, SandboxGroup
from rock.sdk.sandbox.config import SandboxConfig, SandboxGroupConfig
from rock_core.errors import (
    BadRequestRockError,
    CommandTimeout,
    InternalServerRockError,
    InvalidParameter,
    NonZeroExitCode,
    NotSupported,
    RockError,
    SandboxNotFound,
    SessionNotFound,
)

pytestmark = pytest.mark.anyio


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when we return: nothing listens there


# -- headers ----------------------------------------------------------------------------------------


def test_the_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCK_API_KEY", "k-123")
    assert remote_headers({"X-Cluster": "c1"}) == {"X-Cluster": "c1", "X-API-Key": "k-123"}
    monkeypatch.delenv("ROCK_API_KEY")
    assert remote_headers({"X-Cluster": "c1"}) == {"X-Cluster": "c1"}


@pytest.mark.parametrize("given", [{"Authorization": "Bearer mine"}, {"x-api-key": "mine"}])
def test_a_key_in_extra_headers_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str]
) -> None:
    monkeypatch.setenv("ROCK_API_KEY", "from-env")
    assert remote_headers(given) == given


def test_an_explicit_api_key_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCK_API_KEY", raising=False)
    assert RemoteDriver("http://admin:8080/", api_key="k").headers == {"X-API-Key": "k"}


def test_a_sandbox_sends_rocks_headers_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCK_API_KEY", "k-9")
    config = SandboxConfig(
        base_url="http://admin.example:8080/",
        cluster="cl",
        user_id="u1",
        experiment_id="e1",
        namespace="ns",
        extra_headers={"X-Trace": "t"},
        xrl_authorization="secret",
    )
    with pytest.warns(DeprecationWarning, match="xrl_authorization"):
        engine = Sandbox(config)._get_driver()
    assert isinstance(engine, RemoteDriver)
    assert engine.api_url == "http://admin.example:8080/apis/envs/sandbox/v1"
    assert engine.headers == {
        "X-Cluster": "cl",
        "XRL-Authorization": "Bearer secret",
        "X-Trace": "t",
        "X-User-Id": "u1",
        "X-Experiment-Id": "e1",
        "X-Namespace": "ns",
        "X-API-Key": "k-9",
    }


def test_sandboxes_of_one_server_and_identity_share_an_engine() -> None:
    group = SandboxGroup(
        SandboxGroupConfig(base_url="http://admin.example:8080", size=3, experiment_id="e")
    )
    engines = {id(s._get_driver()) for s in group.sandbox_list}
    assert len(engines) == 1
    other = Sandbox(
        SandboxConfig(base_url="http://admin.example:8080", experiment_id="f")
    )._get_driver()
    assert id(other) not in engines
    assert get_remote_driver("http://admin.example:8080/", {"X-Cluster": "x"}) is get_remote_driver(
        "http://admin.example:8080", {"X-Cluster": "x"}
    )


# -- errors -----------------------------------------------------------------------------------------


def _failed(code: int | None, error: str, **result: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "Failed",
        "message": "call failed",
        "error": error,
        "result": None,
    }
    if code is not None:
        body["result"] = {"code": code, "exit_code": None, "failure_reason": error, **result}
    return body


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (4004, SandboxNotFound),
        (4014, SessionNotFound),
        (6002, CommandTimeout),
        (4000, BadRequestRockError),
        (4999, BadRequestRockError),  # unknown code: the base class of its range
        (5000, InternalServerRockError),
    ],
)
def test_a_failed_envelope_raises_the_class_of_its_code(
    code: int, expected: type[RockError]
) -> None:
    err = error_from_envelope(_failed(code, "it went wrong"), sandbox_id="sb1", attempted="arun")
    assert type(err) is expected
    assert (str(err), err.code, err.sandbox_id, err.attempted) == (
        "it went wrong",
        code,
        "sb1",
        "arun",
    )


def test_a_non_zero_exit_keeps_its_exit_code_and_output() -> None:
    err = error_from_envelope(_failed(6001, "exit code 3", exit_code=3, output="about to fail"))
    assert isinstance(err, NonZeroExitCode)
    assert (err.exit_code, err.output) == (3, "about to fail")


def test_an_envelope_without_a_code_is_a_plain_rock_error() -> None:
    err = error_from_envelope(
        {"status": "Failed", "message": "start sandbox failed", "error": "boom", "result": None}
    )
    assert type(err) is RockError and str(err) == "boom"
    invalid = error_from_envelope(
        {"status": "Failed", "message": "invalid parameter", "error": "image: blank"}
    )
    assert isinstance(invalid, InvalidParameter) and str(invalid) == "image: blank"


# -- servers that are not there, or not rock's ---------------------------------------------------------


async def test_an_unreachable_admin_is_named_with_the_fix() -> None:
    port = _closed_port()
    engine = RemoteDriver(f"http://127.0.0.1:{port}")
    with pytest.raises(
        InternalServerRockError, match=rf"rock admin at http://127.0.0.1:{port} is unreachable"
    ) as info:
        await engine.get_status("sb1")
    assert "`rock admin start`" in str(info.value) and info.value.sandbox_id == "sb1"


def test_one_engine_works_from_successive_event_loops() -> None:
    # An httpx client belongs to the loop that made it: a second asyncio.run() must get its own.
    engine = RemoteDriver(f"http://127.0.0.1:{_closed_port()}")
    for _ in range(2):
        with pytest.raises(InternalServerRockError, match="unreachable"):
            engine.call_blocking(engine.get_status, "sb1")


async def test_call_blocking_refuses_a_running_loop() -> None:
    engine = RemoteDriver("http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="await the call"):
        engine.call_blocking(engine.get_status, "sb1")


@pytest.fixture
def plain_http_server() -> Iterator[str]:
    """A real HTTP server that is not rock's admin (Python's static file server)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_a_server_that_is_not_rocks_admin_is_named(plain_http_server: str) -> None:
    engine = RemoteDriver(plain_http_server)
    with pytest.raises(
        InvalidParameter,
        match=r"base_url http://127.0.0.1:\d+ does not point at a rock admin: it "
        r"answered GET /apis/envs/sandbox/v1/get_status with HTTP 404",
    ) as info:
        await engine.get_status("sb1")
    assert info.value.field == "base_url"
    # A POST it does not know (HTTP 501 with an HTML page) is named the same way.
    with pytest.raises(
        InvalidParameter, match=r"answered POST /apis/envs/sandbox/v1/stop with HTTP 501"
    ) as info:
        await engine.stop("sb1")
    assert info.value.field == "base_url" and "<html" not in str(info.value).lower()


async def test_an_older_rock_admin_is_told_apart_from_a_wrong_base_url() -> None:
    """A rock admin (its /healthz answers) that lacks a route is older than the SDK: upgrade it."""

    def answer(path: str) -> tuple[int, bytes]:
        return (
            (200, b'{"status":"ok","version":"0.0.1"}')
            if path == "/healthz"
            else (404, b"Not Found")
        )

    with _serving(answer) as url:
        engine = RemoteDriver(url)
        with pytest.raises(
            NotSupported,
            match=r"\(version 0.0.1\) does not serve GET /apis/envs/sandbox/v1/get_status .*upgrade it",
        ):
            await engine.get_status("sb1")


@contextlib.contextmanager
def _serving(answer: Callable[[str], tuple[int, bytes]]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 whose GETs ``answer(path)`` gives (status, JSON body); its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    ).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_admin_that_does_not_hold_get_status_is_polled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ROCK's admin ignores rock's ``wait`` and answers at once: the SDK then polls, pausing
    between requests, until the sandbox runs."""
    asked: list[dict[str, list[str]]] = []

    def answer(path: str) -> tuple[int, bytes]:
        asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(path).query))
        state = "running" if len(asked) > 3 else "pending"
        result = {"sandbox_id": "sb1", "state": state, "status": {}}
        return 200, json.dumps(
            {"status": "Success", "message": "", "error": None, "result": result}
        ).encode()

    # The engine's pauses, as it asks for them (the clock is not the witness: a loaded machine
    # only makes them longer). Only the remote engine's own: other tasks of the process (the
    # remote pass's admin and its clients) sleep through the same anyio.
    pauses: list[float] = []
    sleep = remote_waits.anyio.sleep

    async def recorded(seconds: float) -> None:
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if (
            seconds > 0
            and caller is not None
            and caller.f_globals.get("__name__") == remote_waits.__name__
        ):
            pauses.append(seconds)
        await sleep(seconds)

    monkeypatch.setattr(remote_waits.anyio, "sleep", recorded)
    with _serving(answer) as url:
        engine = RemoteDriver(url)
        try:
            status = await engine.wait_until_running("sb1", timeout=60)
        finally:
            await engine.aclose()
    assert status.state is not None and status.state.value == "running"
    assert len(asked) == 4
    assert all(query["wait"] == ["20"] for query in asked)
    # Three pauses of 0.05, 0.075 and 0.1125 s between the four requests: not a busy loop.
    assert pauses == pytest.approx([0.05, 0.075, 0.1125])
