"""The admin server as users meet it: a real ``rock admin`` process on a free port, driven over
real sockets with httpx, sandboxes on the local Docker engine.

One admin serves the whole module (the conftest launcher's ``rock admin serve``, with a temp state
directory and config file); the last test stops it with ``rock admin stop``, checks its sandbox
still runs, and starts it again with ``rock admin start``. Every container the admin made is
removed at the end (found by its ``rock.owner`` label).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rock_core.testing import eventually

IMAGE = "python:3.11"
PREFIX = "/apis/envs/sandbox/v1"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}
IDENTITY = {
    "X-User-Id": "alice",
    "X-Experiment-Id": "exp-admin-test",
    "X-Namespace": "ns1",
    "X-Cluster": "local",
}

# The `rock` command of this environment.
ROCK = Path(sys.executable).with_name("rock")

# Every route a client may call: ROCK's (reference §4.2, §4.3) and rock's additions.
EXPECTED_ROUTES = {
    ("post", "start"),
    ("post", "start_async"),
    ("get", "get_status"),
    ("get", "is_alive"),
    ("get", "get_sandbox_statistics"),
    ("post", "stop"),
    ("post", "delete"),
    ("post", "restart"),
    ("post", "pause"),
    ("post", "resume"),
    ("post", "execute"),
    ("post", "create_session"),
    ("post", "run_in_session"),
    ("post", "close_session"),
    ("post", "read_file"),
    ("post", "write_file"),
    ("post", "upload"),
    ("get", "sandboxes"),
    ("post", "sandboxes/batch"),
    ("post", "sandboxes/wait_any"),
    ("post", "sandboxes/start_batch"),
    ("post", "interrupt_session"),
    ("post", "execute_stream"),
    ("post", "download"),
    ("post", "list_dir"),
    ("post", "stat"),
    ("post", "processes"),
    ("get", "processes/{process_id}"),
    ("get", "processes/{process_id}/output"),
    ("post", "processes/{process_id}/kill"),
    ("post", "warmup/tasks"),
    ("get", "warm_pools"),
    ("post", "sandboxes/{sandbox_id}/archive"),
    ("post", "sandboxes/{sandbox_id}/restart"),
    ("get", "sandboxes/{sandbox_id}/statistics"),
    ("post", "sandboxes/{sandbox_id}/snapshot"),
    ("post", "sandboxes/{sandbox_id}/fork"),
    ("post", "sandboxes/{sandbox_id}/reset"),
    ("post", "sandboxes/{sandbox_id}/egress"),
    ("get", "snapshots"),
    ("post", "commit"),
    ("get", "commit/{sandbox_id}"),
    ("post", "snapshots/delete"),
}


def unique_id(prefix: str) -> str:
    """A sandbox id no other test run will use."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def admin_cli(admin: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``rock admin ARGS`` with the admin's state directory; never raises on exit code."""
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(admin.state_dir)}
    return subprocess.run(
        [str(ROCK), "admin", *args], env=env, capture_output=True, text=True, timeout=120
    )


def admin_pid(admin: Any) -> int:
    """The pid the admin wrote in its pid file."""
    return int(json.loads((admin.state_dir / "admin.pid").read_text())["pid"])


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    """The module's admin (json bodies limited to 1 MiB, uploads to 2 MiB by its config)."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("admin-state"),
        config='[admin]\nmax_json_body = "1m"\nmax_upload_body = "2m"\n\n[engine]\nreconcile_interval = 5\n',
    )
    try:
        yield server
    finally:
        admin_cli(
            server, "stop"
        )  # the one the last test started with `rock admin start`, if it ran
        stop_admin(server, docker_client)


@pytest.fixture(scope="module")
def http(admin: Any) -> Iterator[httpx.Client]:
    """A client of the admin's base URL."""
    with httpx.Client(base_url=admin.url, timeout=60) as client:
        yield client


def call(http: httpx.Client, method: str, route: str, **kw: Any) -> dict[str, Any]:
    """Call ``route`` under ROCK's prefix; return the envelope (always HTTP 200)."""
    response = http.request(method, f"{PREFIX}/{route}", **kw)
    assert response.status_code == 200, response.text
    envelope = response.json()
    assert set(envelope) == {"status", "message", "error", "result"}
    return envelope


def ok(http: httpx.Client, method: str, route: str, **kw: Any) -> Any:
    """Call ``route``; it must succeed; return its ``result``."""
    envelope = call(http, method, route, **kw)
    assert envelope["status"] == "Success", envelope
    return envelope["result"]


@pytest.fixture(scope="module")
def running(http: httpx.Client) -> str:
    """A running small sandbox started through ``/start`` with identity headers."""
    sandbox_id = unique_id("adm")
    result = ok(http, "POST", "start", json={**SMALL, "sandbox_id": sandbox_id}, headers=IDENTITY)
    assert result["sandbox_id"] == sandbox_id
    return sandbox_id


# ---------------------------------------------------------------------------------------------
# Service routes


def test_root_health_and_every_route_documented_and_served(http: httpx.Client) -> None:
    assert http.get("/").json() == {"message": "hello, ROCK!"}
    assert http.get("/healthz").json()["status"] == "ok"
    document = http.get("/openapi.json").json()
    documented = {
        (method, path[len(PREFIX) + 1 :])
        for path, operations in document["paths"].items()
        if path.startswith(PREFIX)
        for method in operations
    }
    assert documented == EXPECTED_ROUTES
    assert {"/", "/healthz", "/metrics", "/openapi.json"} <= set(document["paths"])
    # Each documented route is really served: called with no input, it answers ROCK's envelope
    # (Failed for want of a sandbox id; the listings need none).
    for method, path in sorted(documented):
        response = http.request(
            method,
            f"{PREFIX}/{path.replace('{process_id}', 'p1').replace('{sandbox_id}', 'no-such-sandbox')}",
        )
        assert response.status_code == 200, (method, path, response.status_code)
        expected = "Success" if path in ("sandboxes", "warm_pools", "snapshots") else "Failed"
        assert response.json()["status"] == expected, (method, path)


# ---------------------------------------------------------------------------------------------
# Validation: a Failed envelope naming the field, never a 500


@pytest.mark.parametrize(
    ("method", "route", "kw", "named"),
    [
        (
            "POST",
            "stop",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            "malformed JSON",
        ),
        ("POST", "stop", {"json": {"sandbox_id": "   "}}, "sandbox_id"),
        ("POST", "stop", {"json": {}}, "sandbox_id"),
        ("POST", "stop", {"json": ["a"]}, "expected an object"),
        ("POST", "start_async", {"json": {"image": IMAGE, "cpus": "lots"}}, "cpus"),
        ("POST", "start_async", {"json": {"memory": "1g"}}, "image"),
        ("POST", "start_async", {"json": {"image": IMAGE, "memory": "a lot"}}, "memory"),
        ("POST", "execute", {"json": {"sandbox_id": "x", "command": 5}}, "command"),
        (
            "POST",
            "run_in_session",
            {"json": {"sandbox_id": "x", "command": "ls", "check": "maybe"}},
            "check",
        ),
        ("GET", "get_status", {}, "sandbox_id"),
        (
            "GET",
            "get_status",
            {"params": {"sandbox_id": "x", "include_all_states": "perhaps"}},
            "include_all_states",
        ),
        ("GET", "sandboxes", {"params": {"page_size": "5000"}}, "page_size"),
        ("GET", "sandboxes", {"params": {"page": "0"}}, "page"),
        ("POST", "sandboxes/batch", {"json": {"sandbox_ids": "abc"}}, "sandbox_ids"),
        (
            "POST",
            "sandboxes/batch",
            {"json": {"sandbox_ids": [f"s{i}" for i in range(2001)]}},
            "sandbox_ids",
        ),
        (
            "POST",
            "upload",
            {"files": {"file": ("a.txt", b"x")}, "data": {"sandbox_id": " "}},
            "target_path",
        ),
        (
            "POST",
            "upload",
            {
                "files": {"file": ("a.txt", b"x")},
                "data": {"sandbox_id": "x", "target_path": "/a", "unzip": "perhaps"},
            },
            "unzip",
        ),
        ("POST", "processes/p1/kill", {"json": {"sandbox_id": "x", "signal": [9]}}, "signal"),
        ("GET", "processes/a%20b", {"params": {"sandbox_id": "x"}}, "process_id"),
    ],
)
def test_bad_input_is_a_failed_envelope_naming_the_field(
    http: httpx.Client, method: str, route: str, kw: dict[str, Any], named: str
) -> None:
    envelope = call(http, method, route, **kw)
    assert envelope["status"] == "Failed"
    assert envelope["message"] == "invalid parameter"
    assert named in envelope["error"]
    assert envelope["result"] == {
        "code": 4000,  # ROCK's: its SDK knows only 2000, 4000, 5000 and 6000
        "rock_code": 4001,
        "exit_code": None,
        "failure_reason": envelope["error"],
    }


def test_unknown_fields_are_ignored_with_a_warning(http: httpx.Client, admin: Any) -> None:
    """As Kubernetes' default field validation: a newer client's extra keys do not break it."""
    response = http.get(
        f"{PREFIX}/get_status", params={"sandbox_id": "no-such-sandbox", "colour": "red"}
    )
    assert response.json()["result"]["rock_code"] == 4004  # served; only the unknown id fails
    assert response.headers["Warning"] == '299 rock "unknown field(s) ignored: colour"'
    response = http.post(
        f"{PREFIX}/stop", json={"sandbox_id": "no-such-sandbox", "reason": "x", "force": True}
    )
    assert response.json()["status"] == "Success"
    assert response.headers["Warning"] == '299 rock "unknown field(s) ignored: force, reason"'
    assert "ignored unknown field(s) force, reason" in admin.log_file.read_text(errors="replace")


def test_a_strict_admin_refuses_unknown_fields(
    tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path, config="[admin]\nstrict_fields = true\n")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as strict:
            envelope = call(strict, "POST", "start_async", json={"image": IMAGE, "resources": {}})
            assert envelope["status"] == "Failed" and "'resources'" in envelope["error"]
            envelope = call(
                strict, "GET", "get_status", params={"sandbox_id": "x", "colour": "red"}
            )
            assert envelope["status"] == "Failed" and "'colour'" in envelope["error"]
    finally:
        stop_admin(server, docker_client)


def test_bodies_over_the_limit_get_413(http: httpx.Client) -> None:
    big = json.dumps(
        {"sandbox_id": "x", "path": "/tmp/f", "content": "a" * (1024 * 1024 + 10)}
    ).encode()
    declared = http.post(
        f"{PREFIX}/write_file", content=big, headers={"content-type": "application/json"}
    )
    assert declared.status_code == 413
    assert declared.json()["result"]["rock_code"] == 4013

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is checked while reading
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    chunked = http.post(
        f"{PREFIX}/write_file", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    upload = http.post(
        f"{PREFIX}/upload",
        files={"file": ("big.bin", b"\0" * (3 * 1024 * 1024))},
        data={"sandbox_id": "x", "target_path": "/tmp/big.bin"},
    )
    assert upload.status_code == 413
    # Under its own, larger limit an upload is read (and fails later, on the unknown sandbox).
    small_upload = call(
        http,
        "POST",
        "upload",
        files={"file": ("f.bin", b"\0" * (1536 * 1024))},
        data={"sandbox_id": "no-such-sandbox", "target_path": "/tmp/f.bin"},
    )
    assert small_upload["result"]["rock_code"] == 4004


# ---------------------------------------------------------------------------------------------
# A sandbox through the API


def test_runtime_calls_through_the_admin(http: httpx.Client, running: str) -> None:
    sid = running
    assert ok(http, "GET", "is_alive", params={"sandbox_id": sid})["is_alive"] is True
    assert (
        ok(http, "GET", "is_alive", params={"sandbox_id": "no-such-sandbox"})["is_alive"] is False
    )

    done = ok(
        http,
        "POST",
        "execute",
        json={"sandbox_id": sid, "command": "echo out; echo err >&2; exit 3", "shell": True},
    )
    assert (done["stdout"], done["stderr"], done["exit_code"]) == ("out\n", "err\n", 3)

    ok(http, "POST", "create_session", json={"sandbox_id": sid, "session": "s1"})
    ok(
        http,
        "POST",
        "run_in_session",
        json={"sandbox_id": sid, "session": "s1", "command": "export GREETING=hi"},
    )
    seen = ok(
        http,
        "POST",
        "run_in_session",
        json={"sandbox_id": sid, "session": "s1", "command": "echo $GREETING"},
    )
    assert (seen["output"], seen["exit_code"]) == ("hi", 0)
    failed = call(
        http,
        "POST",
        "run_in_session",
        json={"sandbox_id": sid, "session": "s1", "command": "false"},
    )
    assert failed["status"] == "Failed" and failed["message"] == "run in session failed"
    assert failed["result"]["rock_code"] == 6001 and failed["result"]["exit_code"] == 1
    ok(http, "POST", "close_session", json={"sandbox_id": sid, "session": "s1"})
    gone = call(
        http, "POST", "run_in_session", json={"sandbox_id": sid, "session": "s1", "command": "true"}
    )
    assert gone["status"] == "Failed" and gone["result"]["rock_code"] // 1000 == 4

    assert ok(
        http,
        "POST",
        "write_file",
        json={"sandbox_id": sid, "path": "/tmp/a/b.txt", "content": "héllo"},
    )["success"]
    assert (
        ok(http, "POST", "read_file", json={"sandbox_id": sid, "path": "/tmp/a/b.txt"})["content"]
        == "héllo"
    )
    uploaded = ok(
        http,
        "POST",
        "upload",
        files={"file": ("blob.bin", bytes(range(256)))},
        data={"sandbox_id": sid, "target_path": "/tmp/up/blob.bin"},
    )
    assert uploaded["success"] and uploaded["file_name"] == "/tmp/up/blob.bin"
    download = http.post(f"{PREFIX}/download", json={"sandbox_id": sid, "path": "/tmp/up/blob.bin"})
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.content == bytes(range(256))
    missing = call(http, "POST", "download", json={"sandbox_id": sid, "path": "/tmp/up/nothing"})
    assert missing["status"] == "Failed" and "nothing" in missing["error"]
    names = {
        e["name"]
        for e in ok(http, "POST", "list_dir", json={"sandbox_id": sid, "path": "/tmp/up"})[
            "entries"
        ]
    }
    assert names == {"blob.bin"}

    with http.stream(
        "POST",
        f"{PREFIX}/execute_stream",
        json={"sandbox_id": sid, "command": "echo one; echo two >&2; exit 4", "shell": True},
    ) as stream:
        assert stream.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in stream.iter_lines() if line]
    assert (
        events[0]["type"] == "start"
        and events[-1]["type"] == "exit"
        and events[-1]["exit_code"] == 4
    )
    assert {(e["stream"], e["data"]) for e in events if e["type"] == "output"} == {
        ("stdout", "one\n"),
        ("stderr", "two\n"),
    }

    process = ok(http, "POST", "processes", json={"sandbox_id": sid, "command": "echo bg; exit 7"})
    finished = ok(
        http, "GET", f"processes/{process['process_id']}", params={"sandbox_id": sid, "wait": "10"}
    )
    assert (finished["running"], finished["exit_code"]) == (False, 7)
    output = http.get(
        f"{PREFIX}/processes/{process['process_id']}/output", params={"sandbox_id": sid}
    )
    assert output.content == b"bg\n"
    sleeper = ok(http, "POST", "processes", json={"sandbox_id": sid, "command": ["sleep", "60"]})
    killed = ok(
        http,
        "POST",
        f"processes/{sleeper['process_id']}/kill",
        json={"sandbox_id": sid, "signal": "KILL"},
    )
    assert killed["running"] is False and killed["signal"] == 9


def test_the_log_has_no_line_per_rocklet_call(http: httpx.Client, admin: Any, running: str) -> None:
    if not admin.log_file.is_file():
        pytest.skip("the suite's admin was given (ROCK_TEST_ADMIN_URL): its log is not here")
    for _ in range(3):
        http.post(f"{PREFIX}/execute", json={"sandbox_id": running, "command": ["true"]})
    assert "httpx: HTTP Request" not in admin.log_file.read_text(errors="replace")


def test_get_status_and_its_throughput(http: httpx.Client, admin: Any, running: str) -> None:
    for flag in ("True", "true", "False", "false"):
        status = ok(
            http, "GET", "get_status", params={"sandbox_id": running, "include_all_states": flag}
        )
        assert status["state"] == "running" and status["is_alive"] is True
    assert (status["user_id"], status["experiment_id"], status["namespace"]) == (
        "alice",
        "exp-admin-test",
        "ns1",
    )
    assert status["memory"] == "0.25g" and status["cpus"] == 0.5
    assert status["status"]["docker_run"]["status"] == "success"
    unknown = call(http, "GET", "get_status", params={"sandbox_id": "no-such-sandbox"})
    assert unknown["status"] == "Failed" and unknown["result"]["rock_code"] == 4004

    # Figures, not a goal: 8 concurrent clients for 2 seconds; every answer must be a success.
    import anyio

    async def load() -> tuple[int, float]:
        count = 0
        deadline = time.monotonic() + 2.0

        async def client() -> None:
            nonlocal count
            async with httpx.AsyncClient(base_url=admin.url) as c:
                while time.monotonic() < deadline:
                    response = await c.get(f"{PREFIX}/get_status", params={"sandbox_id": running})
                    assert response.json()["status"] == "Success"
                    count += 1

        began = time.monotonic()
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(client)
        return count, time.monotonic() - began

    count, seconds = anyio.run(load)
    print(
        f"\nget_status through the admin: {count / seconds:.0f} requests/s (8 httpx clients, one process)"
    )


def _get_status_requests(http: httpx.Client) -> float:
    """How many get_status requests the admin has answered (its metrics)."""
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "rock_http_requests_total" and sample.labels == {
                "route": f"{PREFIX}/get_status",
                "outcome": "success",
            }:
                return sample.value
    return 0.0


def test_get_status_wait_holds_the_answer_until_the_start_settles(
    http: httpx.Client, running: str
) -> None:
    """rock's ``wait``: a starting sandbox's status comes once it runs, in one request; a running
    one's at once (the client's 10 s limit is a third of the wait asked); a bad value is named."""
    sid = unique_id("adm-wait")
    ok(http, "POST", "start_async", json={**SMALL, "sandbox_id": sid})
    try:
        status = ok(
            http, "GET", "get_status", params={"sandbox_id": sid, "wait": "120"}, timeout=150
        )
        assert status["state"] == "running"
        again = ok(
            http, "GET", "get_status", params={"sandbox_id": running, "wait": "30"}, timeout=10
        )
        assert again["state"] == "running"
        bad = call(http, "GET", "get_status", params={"sandbox_id": sid, "wait": "-1"})
        assert bad["status"] == "Failed" and "wait" in bad["error"] and "-1" in bad["error"]
    finally:
        ok(http, "POST", "stop", json={"sandbox_id": sid})


def test_the_sdk_waits_for_a_start_with_one_held_request_not_a_poll(
    http: httpx.Client, admin: Any
) -> None:
    """``Sandbox.start()`` against rock's admin: the status of a start comes in one held
    request (a thousand starting sandboxes no longer poll the admin every second each)."""
    import anyio

    from rock.actions import SandboxStartRequest
    from rock.sdk._drivers.remote import RemoteDriver

    async def start() -> str:
        engine = RemoteDriver(admin.url)
        try:
            started = await engine.start_async(
                SandboxStartRequest(**SMALL, sandbox_id=unique_id("adm-held"))
            )
            assert started.sandbox_id is not None
            status = await engine.wait_until_running(started.sandbox_id, timeout=120)
            assert status.state is not None and status.state.value == "running"
            return started.sandbox_id
        finally:
            await engine.aclose()

    before = _get_status_requests(http)
    sid = anyio.run(start)
    try:
        assert _get_status_requests(http) - before <= 2
    finally:
        ok(http, "POST", "stop", json={"sandbox_id": sid})


def test_listing_filters_paging_and_batch(http: httpx.Client, running: str) -> None:
    mine = ok(http, "GET", "sandboxes", params={"experiment_id": "exp-admin-test"})
    assert [item["sandbox_id"] for item in mine["items"]] == [running]
    assert (mine["total"], mine["has_more"]) == (1, False)
    both = ok(
        http,
        "GET",
        "sandboxes",
        params={"user_id": "alice", "namespace": "ns1", "state": "running"},
    )
    assert [item["sandbox_id"] for item in both["items"]] == [running]
    assert ok(http, "GET", "sandboxes", params={"user_id": "bob"}) == {
        "code": None,
        "exit_code": None,
        "failure_reason": None,
        "items": [],
        "total": 0,
        "has_more": False,
    }
    assert (
        ok(
            http,
            "GET",
            "sandboxes",
            params={"experiment_id": "exp-admin-test", "page": "2", "page_size": "1"},
        )["items"]
        == []
    )

    batch = ok(
        http, "POST", "sandboxes/batch", json={"sandbox_ids": [running, "no-such-sandbox", running]}
    )
    assert [s["sandbox_id"] for s in batch["statuses"]] == [running]


def test_lifecycle_start_async_stop_delete(http: httpx.Client) -> None:
    sid = unique_id("adm-life")
    started = ok(
        http,
        "POST",
        "start_async",
        json={**SMALL, "sandbox_id": sid, "auto_delete_seconds": 300},
        headers=IDENTITY,
    )
    assert started["sandbox_id"] == sid and started["memory"] == "0.25g"
    duplicate = call(http, "POST", "start_async", json={**SMALL, "sandbox_id": sid})
    assert duplicate["status"] == "Failed" and duplicate["message"] == "start sandbox failed"
    assert duplicate["result"]["rock_code"] == 4009

    def state() -> str:
        return str(
            ok(http, "GET", "get_status", params={"sandbox_id": sid, "include_all_states": "true"})[
                "state"
            ]
        )

    eventually(lambda: state() == "running", what="the sandbox running", timeout=120)
    not_now = call(http, "POST", "restart", json={"sandbox_id": sid})
    assert not_now["status"] == "Failed" and "cannot be restarted" in not_now["error"]
    running_delete = call(http, "POST", "delete", json={"sandbox_id": sid})
    assert (
        running_delete["status"] == "Failed" and running_delete["result"]["rock_code"] // 1000 == 4
    )

    assert ok(http, "POST", "stop", json={"sandbox_id": sid}) == f"{sid} stopped"
    hidden = call(http, "GET", "get_status", params={"sandbox_id": sid})
    assert hidden["status"] == "Failed" and hidden["result"]["rock_code"] == 4004
    assert state() == "stopped"
    assert [
        s for s in ok(http, "POST", "sandboxes/batch", json={"sandbox_ids": [sid]})["statuses"]
    ] == []

    restarted = ok(http, "POST", "restart", json={"sandbox_id": sid})
    assert restarted["sandbox_id"] == sid
    eventually(lambda: state() == "running", what="the sandbox running", timeout=120)
    ok(http, "POST", "stop", json={"sandbox_id": sid})
    assert ok(http, "POST", "delete", json={"sandbox_id": sid}) == f"{sid} deleted"
    assert state() == "deleted"
    assert (
        ok(http, "POST", "delete", json={"sandbox_id": "never-existed"}) == "never-existed deleted"
    )
    assert ok(http, "POST", "stop", json={"sandbox_id": "never-existed"}) == "never-existed stopped"


def test_metrics_in_prometheus_text(http: httpx.Client, running: str) -> None:
    response = http.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(name: str, **labels: str) -> float:
        return values[(name, frozenset(labels.items()))]

    assert value("rock_sandboxes", state="running") >= 1
    assert value("rock_sandbox_start_seconds_count") >= 1
    assert value("rock_sandbox_start_seconds_bucket", le="+Inf") == value(
        "rock_sandbox_start_seconds_count"
    )
    assert ("rock_start_queue_depth", frozenset()) in values
    assert value("rock_http_requests_total", route=f"{PREFIX}/get_status", outcome="success") >= 1
    assert value("rock_http_requests_total", route=f"{PREFIX}/stop", outcome="invalid") >= 1
    assert value("rock_http_requests_total", route=f"{PREFIX}/write_file", outcome="too_large") >= 1
    # Labelled by route template: one series for every process id.
    routes = {
        dict(labels).get("route") for name, labels in values if name == "rock_http_requests_total"
    }
    assert not any(route and "/processes/" in route and "{" not in route for route in routes)
    assert not any(name.endswith("_created") for name, _ in values)


def test_metrics_never_go_backwards(http: httpx.Client) -> None:
    """Counters and the start histogram are cumulative: a later scrape is never below an earlier one."""

    def samples() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        found = {}
        for family in text_string_to_metric_families(http.get("/metrics").text):
            if family.type in ("counter", "histogram"):
                for sample in family.samples:
                    found[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return found

    before = samples()
    for _ in range(5):
        http.get(f"{PREFIX}/get_status", params={"sandbox_id": "no-such-sandbox"})
    after = samples()
    assert all(after.get(key, 0) >= v for key, v in before.items())
    key = (
        "rock_http_requests_total",
        frozenset({("route", f"{PREFIX}/get_status"), ("outcome", "failed")}),
    )
    assert after[key] >= before.get(key, 0) + 5


def test_admin_status_is_json(http: httpx.Client, running: str) -> None:
    status = http.get("/admin/status").json()
    assert status["sandboxes"]["running"] >= 1 and set(status["start_queue"]) == {"depth", "active"}
    assert isinstance(status["warm_pools"], list) and status["version"]
    # The served admin tuned its collector (rock.admin.daemon.GC_THRESHOLDS) and froze what it
    # made to start; its resident memory is read from /proc.
    process = status["process"]
    assert process["gc_thresholds"] == [1_000_000, 50, 100], process
    assert process["gc_frozen"] > 10_000 and process["rss_bytes"] > 20 * 2**20, process


# ---------------------------------------------------------------------------------------------
# The daemon: refuses to start twice, stops gracefully, sandboxes outlive it (runs last)


def test_admin_daemon_stop_keeps_sandboxes_and_restart_finds_them(
    admin: Any, http: httpx.Client, running: str, docker_client: Any, free_port: Any
) -> None:
    config = admin.state_dir / "admin.toml"
    shown = admin_cli(admin, "status")
    assert shown.returncode == 0, shown.stderr
    assert (
        admin.url in shown.stdout
        and str(admin_pid(admin)) in shown.stdout
        and "running 1" in shown.stdout
    )
    assert "gc thresholds 1000000/50/100" in shown.stdout, shown.stdout

    again = admin_cli(admin, "start", "--port", str(free_port()), "--config", str(config))
    assert again.returncode == 1 and "already runs" in again.stderr

    pid = admin_pid(admin)
    stopped = admin_cli(admin, "stop")
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert not (admin.state_dir / "admin.pid").exists()
    assert admin_cli(admin, "status").returncode == 3
    log_text = (admin.state_dir / "admin.log").read_text()
    assert "Application shutdown complete" in log_text  # uvicorn's graceful path, not a kill
    containers = docker_client.containers.list(
        filters={"label": f"rock.sandbox_id={running}"}, ignore_removed=True
    )
    assert [c.status for c in containers] == ["running"]

    started = admin_cli(admin, "start", "--port", str(admin.port), "--config", str(config))
    assert started.returncode == 0, started.stdout + started.stderr
    assert admin.url in started.stdout
    listed = ok(http, "GET", "sandboxes", params={"experiment_id": "exp-admin-test"})
    assert [(i["sandbox_id"], i["state"]) for i in listed["items"]] == [(running, "running")]
    assert "running 1" in admin_cli(admin, "status").stdout
