"""Tenants are namespaces (issue #22 points 2, 5 and 6), against a real admin over a real socket
with real Docker sandboxes.

The module's admin has five keys: ``team-a`` (may add ``NET_RAW``), ``team-b`` (nothing beyond
the defaults), ``ops`` (the operator: warm pools), ``team-q`` (quotas of sandboxes, memory and
CPUs) and ``team-p`` (at most 3 sandboxes, for parallel starts). Its archive store is an ``fs``
folder that a second admin shares in the archive test. Each test replays an attack one tenant
could make on another: joining its network group, resizing the operator's pools, granting itself
capabilities, starting past its quota, overwriting or deleting its archive, and naming its
sandbox on every route of the admin.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.admin.auth import hash_key
from rock_core.testing import eventually

pytestmark = [pytest.mark.docker]

IMAGE = "python:3.11"
PREFIX = "/apis/envs/sandbox/v1"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}

KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
KEY_OPS = "key-ops-" + uuid.uuid4().hex
KEY_Q = "key-q-" + uuid.uuid4().hex
KEY_P = "key-p-" + uuid.uuid4().hex


def _config(archives: Path) -> str:
    return (
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}", allowed_cap_add = ["NET_RAW"] }},\n'
        f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
        f'  {{ tenant = "ops", sha256 = "{hash_key(KEY_OPS)}", operator = true }},\n'
        f'  {{ tenant = "team-q", sha256 = "{hash_key(KEY_Q)}", max_sandboxes = 3, max_memory = "1g", max_cpus = 1.5 }},\n'
        f'  {{ tenant = "team-p", sha256 = "{hash_key(KEY_P)}", max_sandboxes = 3 }},\n'
        "]\n"
        f'[engine]\narchive_store = "fs"\n[plugins.archive-fs]\nroot = "{archives}"\n'
    )


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive folder the module's admins share."""
    return tmp_path_factory.mktemp("tenancy-archives")


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    archives: Path,
) -> Iterator[Any]:
    """The module's admin (see the module docstring); its containers are removed at the end."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path_factory.mktemp("admin-tenancy"), config=_config(archives))
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def _client(admin: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=admin.url, timeout=180, headers={"X-API-Key": key})


@pytest.fixture(scope="module")
def http_a(admin: Any) -> Iterator[httpx.Client]:
    with _client(admin, KEY_A) as http:
        yield http


@pytest.fixture(scope="module")
def http_b(admin: Any) -> Iterator[httpx.Client]:
    with _client(admin, KEY_B) as http:
        yield http


@pytest.fixture(scope="module")
def http_ops(admin: Any) -> Iterator[httpx.Client]:
    with _client(admin, KEY_OPS) as http:
        yield http


def envelope(response: httpx.Response) -> dict[str, Any]:
    """ROCK's envelope of ``response`` (HTTP 200)."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"status", "message", "error", "result"}, body
    return body


def call(http: httpx.Client, method: str, route: str, **kw: Any) -> dict[str, Any]:
    """The envelope of ``method`` ``route`` (under ROCK's prefix)."""
    return envelope(http.request(method, f"{PREFIX}/{route}", **kw))


def ok(http: httpx.Client, method: str, route: str, **kw: Any) -> Any:
    """``route``'s result; it must succeed."""
    body = call(http, method, route, **kw)
    assert body["status"] == "Success", body
    return body["result"]


def refused(http: httpx.Client, method: str, route: str, code: int, **kw: Any) -> str:
    """``route`` must fail with ``code``; its error message."""
    body = call(http, method, route, **kw)
    assert body["status"] == "Failed" and (body["result"] or {}).get("rock_code") == code, body
    return str(body["error"])


def start(http: httpx.Client, **fields: Any) -> str:
    """Start a sandbox and wait until it runs; its id."""
    sandbox_id = fields.pop("sandbox_id", f"ten-{uuid.uuid4().hex[:12]}")
    ok(http, "POST", "start", json={**SMALL, **fields, "sandbox_id": sandbox_id})
    return sandbox_id


def shell(http: httpx.Client, sandbox_id: str, command: str) -> dict[str, Any]:
    """Run ``command`` with ``sh -c`` in the sandbox; its result (stdout, exit_code)."""
    return dict(
        ok(
            http,
            "POST",
            "execute",
            json={"sandbox_id": sandbox_id, "command": command, "shell": True, "timeout": 120},
        )
    )


def stop(http: httpx.Client, *sandbox_ids: str) -> None:
    for sandbox_id in sandbox_ids:
        ok(http, "POST", "stop", json={"sandbox_id": sandbox_id})


# A request to port 8000 of HOST from inside a sandbox: prints the status line, or fails.
PROBE = (
    'python3 -c "import socket,sys; s=socket.create_connection((sys.argv[1], 8000), timeout=5); '
    "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(12).decode())\" {host}"
)
SERVE = "mkdir -p /srv && echo secret-of-a > /srv/index.html && (nohup python3 -m http.server 8000 -d /srv >/dev/null 2>&1 &)"


def _ip_of(docker_client: Any, sandbox_id: str) -> str:
    """The address of the sandbox's container on its (only) network: only to prove, from inside
    another sandbox, that it cannot be reached."""
    (container,) = docker_client.containers.list(
        all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"}
    )
    (network,) = container.attrs["NetworkSettings"]["Networks"].values()
    return str(network["IPAddress"])


def _group_network(docker_client: Any, sandbox_id: str) -> str:
    (container,) = docker_client.containers.list(
        all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"}
    )
    return str(container.attrs["HostConfig"]["NetworkMode"])


# ---------------------------------------------------------------------------------------------
# Point 2: network groups


def test_another_tenants_group_name_is_a_network_of_its_own(
    http_a: httpx.Client, http_b: httpx.Client, docker_client: Any
) -> None:
    """B starts a sandbox with A's group name: it reaches A's service neither by sandbox id nor by
    address, while A's own second member does."""
    group = f"shared-{uuid.uuid4().hex[:6]}"
    server = start(http_a, network_group=group)
    member = start(http_a, network_group=group)
    intruder = start(http_b, network_group=group)
    try:
        shell(http_a, server, SERVE)
        # A's own member reaches the service by sandbox id (waiting for it to listen).
        reached = shell(
            http_a,
            member,
            f"for i in $(seq 60); do {PROBE.format(host=server)} && exit 0; sleep 0.5; done; exit 1",
        )
        assert reached["exit_code"] == 0 and reached["stdout"].startswith("HTTP/1.0 200"), reached
        by_name = shell(http_b, intruder, PROBE.format(host=server))
        by_address = shell(http_b, intruder, PROBE.format(host=_ip_of(docker_client, server)))
        assert by_name["exit_code"] != 0 and "HTTP" not in by_name["stdout"], by_name
        assert by_address["exit_code"] != 0 and "HTTP" not in by_address["stdout"], by_address
        # Two networks; each tenant still sees its own group name.
        assert _group_network(docker_client, server) == _group_network(docker_client, member)
        assert _group_network(docker_client, server) != _group_network(docker_client, intruder)
        for http, sandbox_id in ((http_a, server), (http_b, intruder)):
            status = ok(http, "GET", "get_status", params={"sandbox_id": sandbox_id})
            assert status["security"]["network"] == f"group:{group}"
        network_a = _group_network(docker_client, server)
    finally:
        stop(http_a, server, member)
        stop(http_b, intruder)
    # A group's network goes with its last sandbox.
    eventually(
        lambda: not docker_client.networks.list(names=[network_a]),
        what="the group's network removed",
        timeout=60,
        interval=0.2,
    )
    assert not docker_client.networks.list(names=[network_a])


# ---------------------------------------------------------------------------------------------
# Point 2: warm pools are the operator's


def test_warm_pools_are_managed_by_the_operator_only(
    admin: Any, http_b: httpx.Client, http_ops: httpx.Client
) -> None:
    kind = {**SMALL, "env": {"POOL": uuid.uuid4().hex[:8]}}
    # A tenant can neither make, resize, remove nor list the operator's pools ...
    for size in (1, 0):
        error = refused(http_b, "POST", "warmup/tasks", 4003, json={**kind, "size": size})
        assert "operator" in error and "'team-b'" in error and f"size {size}" in error
    assert "operator" in refused(http_b, "GET", "warm_pools", 4003)
    # ... while ROCK's plain warm-up (an image pull) stays everyone's.
    ok(http_b, "POST", "warmup/tasks", json={"image": IMAGE})
    ok(http_ops, "POST", "warmup/tasks", json={**kind, "size": 1})
    try:
        eventually(
            lambda: ok(http_ops, "GET", "warm_pools"),
            until=lambda pools: any(p["ready"] == 1 for p in pools["pools"]),
            what="a ready member in the operator's pool",
            timeout=180,
            interval=0.2,
        )
        error = refused(http_b, "POST", "warmup/tasks", 4003, json={**kind, "size": 0})
        assert [p["size"] for p in ok(http_ops, "GET", "warm_pools")["pools"]] == [1], error
        # A tenant's start claims a member: it is the tenant's now, counted for it.
        claimed = start(http_b, **kind)
        status = ok(http_b, "GET", "get_status", params={"sandbox_id": claimed})
        assert "claimed from warm pool" in json.dumps(status["status"]), status["status"]
        mine = http_b.get("/admin/status").json()["tenants"]
        assert list(mine) == ["team-b"] and mine["team-b"]["sandboxes"] == 1, mine
        assert http_b.get("/admin/status").json()["warm_pools"] == []
        assert "process" not in http_b.get("/admin/status").json()  # the operator's
        stop(http_b, claimed)
    finally:
        ok(http_ops, "POST", "warmup/tasks", json={**kind, "size": 0})


# ---------------------------------------------------------------------------------------------
# Point 6: capabilities per key


def test_capabilities_only_for_keys_allowed_them(
    http_a: httpx.Client, http_b: httpx.Client
) -> None:
    for cap in ("NET_RAW", "SYS_PTRACE"):
        error = refused(http_b, "POST", "start_async", 4001, json={**SMALL, "cap_add": [cap]})
        assert (
            f"cap_add: {cap} not allowed for tenant 'team-b'" in error
            and "allowed_cap_add" in error
        ), error
    error = refused(
        http_a, "POST", "start_async", 4001, json={**SMALL, "cap_add": ["NET_RAW", "SYS_PTRACE"]}
    )
    assert (
        "cap_add: SYS_PTRACE not allowed for tenant 'team-a'" in error
        and "allowed_cap_add on its api_keys entry: NET_RAW" in error
    )
    sandbox_id = start(http_a, cap_add=["net_raw"])
    try:
        security = ok(http_a, "GET", "get_status", params={"sandbox_id": sandbox_id})["security"]
        assert (
            "NET_RAW" in security["capabilities"] and "SYS_PTRACE" not in security["capabilities"]
        )
    finally:
        stop(http_a, sandbox_id)


# ---------------------------------------------------------------------------------------------
# Point 5: quotas per key


def test_a_start_past_a_quota_is_refused_naming_it_and_the_use(admin: Any) -> None:
    with _client(admin, KEY_Q) as http:
        first = start(http, auto_delete_seconds=600)  # kept when stopped: restartable
        second = start(http)
        third = fourth = ""
        try:
            error = refused(http, "POST", "start_async", 4029, json={**SMALL, "memory": "768m"})
            assert error == "tenant 'team-q': max_memory 1.00g reached (using 0.50g, asked 0.75g)"
            error = refused(http, "POST", "start_async", 4029, json={**SMALL, "cpus": 1})
            assert error == "tenant 'team-q': max_cpus 1.5 reached (using 1, asked 1)"
            # The CPU ceiling is what counts: limit_cpus, when set.
            error = refused(
                http, "POST", "start_async", 4029, json={**SMALL, "cpus": 0.25, "limit_cpus": 2}
            )
            assert "max_cpus 1.5 reached (using 1, asked 2)" in error
            third = start(http)
            error = refused(http, "POST", "start_async", 4029, json=SMALL)
            assert error == "tenant 'team-q': max_sandboxes 3 reached (using 3, asked 1)"
            row = http.get("/admin/status").json()["tenants"]["team-q"]
            assert row == {
                "sandboxes": 3,
                "memory": 3 * 256 * 2**20,
                "cpus": 1.5,
                "snapshots": 0,
                "quota": {
                    "max_sandboxes": 3,
                    "max_memory": 2**30,
                    "max_cpus": 1.5,
                    "max_snapshots": None,
                },
            }
            # Stopped sandboxes hold nothing: a slot is free again, and a restart needs one.
            stop(http, first)
            fourth = start(http)
            error = refused(http, "POST", "restart", 4029, json={"sandbox_id": first})
            assert "max_sandboxes 3 reached (using 3, asked 1)" in error
            stop(http, fourth)
            assert ok(http, "POST", "restart", json={"sandbox_id": first})["sandbox_id"] == first
        finally:
            for sandbox_id in filter(None, (first, second, third, fourth)):
                call(http, "POST", "stop", json={"sandbox_id": sandbox_id})
            call(http, "POST", "delete", json={"sandbox_id": first})


def test_rock_admin_status_shows_each_tenants_use_and_quota(
    admin: Any, http_ops: httpx.Client
) -> None:
    with _client(admin, KEY_Q) as http:
        sandbox_id = start(http)
        try:
            env = {
                **os.environ,
                "ROCK_ADMIN_STATE_DIR": str(admin.state_dir),
                "ROCK_API_KEY": KEY_OPS,
            }
            done = subprocess.run(
                [os.path.join(os.path.dirname(sys.executable), "rock"), "admin", "status"],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            assert (
                "tenant:    team-q: 1 sandboxes (max 3), 0.25g memory (max 1.00g), 0.5 cpus (max 1.5)"
                in done.stdout
            ), done.stdout
            assert "tenant:    team-b:" in done.stdout  # the operator sees every tenant
            # A tenant sees its own row only.
            assert list(http.get("/admin/status").json()["tenants"]) == ["team-q"]
        finally:
            stop(http, sandbox_id)


def test_parallel_starts_never_share_the_last_slot(admin: Any) -> None:
    """Twelve starts at once for three slots: exactly three pass, the others are refused."""
    with _client(admin, KEY_P) as http:

        def attempt(_: int) -> dict[str, Any]:
            return call(http, "POST", "start_async", json=SMALL)

        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(attempt, range(12)))
        started = [a["result"]["sandbox_id"] for a in answers if a["status"] == "Success"]
        try:
            codes = sorted(a["result"]["rock_code"] for a in answers if a["status"] != "Success")
            assert (len(started), codes) == (3, [4029] * 9), answers
            assert http.get("/admin/status").json()["tenants"]["team-p"]["sandboxes"] == 3
        finally:
            stop(http, *started)


# ---------------------------------------------------------------------------------------------
# Point 2: archive keys belong to a tenant


def test_another_tenants_archive_is_never_overwritten_restored_or_deleted(
    admin: Any,
    http_a: httpx.Client,
    http_b: httpx.Client,
    admin_launcher: Any,
    archives: Path,
    tmp_path: Path,
    docker_client: Any,
) -> None:
    """A archives sandbox X on this admin. On a second admin sharing the archive store, B starts,
    archives and deletes a sandbox of the same id X (ids are the client's to choose). Here, B
    names X on restart and delete. A's archive still restores A's files."""
    sandbox_id = f"arch-{uuid.uuid4().hex[:10]}"

    def archive(http: httpx.Client, mark: str) -> None:
        start(http, sandbox_id=sandbox_id, auto_delete_seconds=600)
        shell(http, sandbox_id, f"echo {mark} > /root/mark")
        stop(http, sandbox_id)
        ok(http, "POST", f"sandboxes/{sandbox_id}/archive", json={})
        eventually(
            lambda: ok(
                http,
                "GET",
                "get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
            ),
            until=lambda status: status["state"] == "archived",
            what="the sandbox archived",
            timeout=300,
            interval=0.5,
        )

    archive(http_a, "from-a")
    # B on this admin: A's archived sandbox is unknown to it, and stays.
    assert "not found" in refused(http_b, "POST", "restart", 4004, json={"sandbox_id": sandbox_id})
    ok(http_b, "POST", "delete", json={"sandbox_id": sandbox_id})
    launch_admin, stop_admin = admin_launcher
    other = launch_admin(tmp_path, config=_config(archives))
    try:
        with _client(other, KEY_B) as http_b2:
            archive(http_b2, "from-b")
            ok(http_b2, "POST", "delete", json={"sandbox_id": sandbox_id})
    finally:
        stop_admin(other, docker_client)
    ok(http_a, "POST", "restart", json={"sandbox_id": sandbox_id})
    status = eventually(
        lambda: ok(
            http_a,
            "GET",
            "get_status",
            params={"sandbox_id": sandbox_id, "include_all_states": "true"},
        ),
        until=lambda status: status["state"] != "pending",
        what="the restart settled",
        timeout=300,
        interval=0.5,
    )
    assert status["state"] == "running", (
        status
    )  # a failed restore is archived again, with the reason
    try:
        assert shell(http_a, sandbox_id, "cat /root/mark")["stdout"].strip() == "from-a"
    finally:
        stop(http_a, sandbox_id)
        call(http_a, "POST", "delete", json={"sandbox_id": sandbox_id})


# ---------------------------------------------------------------------------------------------
# Every route checks the tenant


#: Routes that name no sandbox, pool or group of a tenant (served to every key alike), and
#: rock-gem's plugin routes, whose envs and EnvHub entries rock-gem's own tests hold per tenant.
# Routes that name no sandbox (a snapshot is named by its name: its tenancy is the snapshot
# tests', test_admin_snapshots_tenancy.py).
_NAMES_NOTHING = {
    "/",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/rocklet.pyz",
    "/health",
    f"{PREFIX}/snapshots/delete",
}
_PLUGIN_PREFIXES = ("/apis/v1/envs/gem/", "/env/", "/e2b/")


def _requests_naming(sandbox_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    """For each route of ROCK's API, a request of it that names ``sandbox_id``."""
    p, sid = PREFIX, {"sandbox_id": sandbox_id}
    query = {"params": sid}
    return {
        ("GET", f"{p}/get_status"): {"params": {**sid, "include_all_states": "true"}},
        ("GET", f"{p}/is_alive"): query,
        ("GET", f"{p}/get_sandbox_statistics"): query,
        ("GET", f"{p}/sandboxes/{{sandbox_id}}/statistics"): query,
        ("POST", f"{p}/stop"): {"json": sid},
        ("POST", f"{p}/delete"): {"json": sid},
        ("POST", f"{p}/restart"): {"json": sid},
        ("POST", f"{p}/pause"): {"json": sid},
        ("POST", f"{p}/resume"): {"json": sid},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/restart"): {"json": {}},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/archive"): {"json": {}},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/snapshot"): {"json": sid},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/fork"): {"json": {**sid, "count": 1}},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/reset"): {"json": sid},
        ("POST", f"{p}/sandboxes/{{sandbox_id}}/egress"): {"json": {**sid, "egress": None}},
        ("GET", f"{p}/snapshots"): {},
        ("POST", f"{p}/commit"): {
            "json": {**sid, "image_tag": "rock-commit-walk:x", "username": "", "password": ""}
        },
        ("GET", f"{p}/commit/{{sandbox_id}}"): query,
        ("POST", f"{p}/execute"): {"json": {**sid, "command": "echo hi"}},
        ("POST", f"{p}/execute_stream"): {"json": {**sid, "command": "echo hi"}},
        ("POST", f"{p}/create_session"): {"json": {**sid, "session": "s"}},
        ("POST", f"{p}/run_in_session"): {"json": {**sid, "session": "s", "command": "echo hi"}},
        ("POST", f"{p}/close_session"): {"json": {**sid, "session": "s"}},
        ("POST", f"{p}/interrupt_session"): {"json": {**sid, "session": "s"}},
        ("POST", f"{p}/read_file"): {"json": {**sid, "path": "/etc/hostname"}},
        ("POST", f"{p}/write_file"): {"json": {**sid, "path": "/tmp/x", "content": "x"}},
        ("POST", f"{p}/download"): {"json": {**sid, "path": "/etc/hostname"}},
        ("POST", f"{p}/list_dir"): {"json": {**sid, "path": "/"}},
        ("POST", f"{p}/stat"): {"json": {**sid, "path": "/etc/hostname"}},
        ("POST", f"{p}/upload"): {
            "files": {"file": ("a.txt", b"x")},
            "data": {**sid, "target_path": "/tmp/a.txt"},
        },
        ("POST", f"{p}/processes"): {"json": {**sid, "command": "echo hi"}},
        ("GET", f"{p}/processes/{{process_id}}"): query,
        ("GET", f"{p}/processes/{{process_id}}/output"): query,
        ("POST", f"{p}/processes/{{process_id}}/kill"): {"json": sid},
        ("POST", f"{p}/warmup/tasks"): {"json": {**SMALL, **sid}},
        ("POST", f"{p}/start"): {"json": {**SMALL, **sid}},
        ("POST", f"{p}/start_async"): {"json": {**SMALL, **sid}},
        # These name no sandbox: the checks below look for the other tenant's in the answer.
        ("GET", f"{p}/sandboxes"): {},
        ("POST", f"{p}/sandboxes/batch"): {"json": {"sandbox_ids": [sandbox_id]}},
        ("POST", f"{p}/sandboxes/wait_any"): {"json": {"sandbox_ids": [sandbox_id]}},
        ("POST", f"{p}/sandboxes/start_batch"): {
            "json": {"items": [{"request": {**SMALL, **sid}}]}
        },
        ("GET", f"{p}/warm_pools"): {},
        ("GET", "/admin/status"): {},
    }


def _ask(
    http: httpx.Client, method: str, path: str, sandbox_id: str, request: dict[str, Any]
) -> httpx.Response:
    url = path.replace("{sandbox_id}", sandbox_id).replace("{process_id}", "p-1")
    return http.request(method, url, **request)


def test_every_route_answers_another_tenants_sandbox_as_unknown(
    admin: Any, http_a: httpx.Client, http_b: httpx.Client, docker_client: Any
) -> None:
    """B names A's running sandbox on every route the admin serves: each answers exactly as for
    an id nobody has, or refuses, and A's sandbox is untouched. A route added without a tenant
    check, or without an entry here, fails this test."""
    mine = start(http_a)
    nobody = f"nobody-{uuid.uuid4().hex[:12]}"
    try:
        routes = {
            (method.upper(), path)
            for path, methods in http_b.get("/openapi.json").json()["paths"].items()
            for method in methods
            if path not in _NAMES_NOTHING and not path.startswith(_PLUGIN_PREFIXES)
        }
        walk = _requests_naming(mine)
        assert routes <= set(walk), (
            f"routes the tenancy walk does not know: {sorted(routes - set(walk))}"
        )
        for (method, path), request in walk.items():
            answer = _ask(http_b, method, path, mine, request)
            text = answer.text
            if path.endswith(("/start", "/start_async")):
                # A's id is taken: refused as taken, without saying by whom.
                body = envelope(answer)
                assert body["status"] == "Failed" and body["result"]["rock_code"] == 4009, (
                    path,
                    body,
                )
                assert "is taken" in text and "team-a" not in text, (path, text)
            elif path.endswith("/sandboxes/start_batch"):  # the same, for the item
                [item] = envelope(answer)["result"]["items"]
                assert item["sandbox"] is None and item["rock_code"] == 4009, (path, item)
                assert "is taken" in text and "team-a" not in text, (path, text)
            elif path.endswith("/warmup/tasks"):
                body = envelope(answer)
                assert body["status"] == "Failed" and body["result"]["rock_code"] == 4004, (
                    path,
                    body,
                )
            elif path.endswith("/warm_pools"):
                assert envelope(answer)["result"]["rock_code"] == 4003, (path, text)
            elif path.endswith(("/sandboxes", "/sandboxes/batch", "/admin/status", "/snapshots")):
                assert answer.status_code == 200 and mine not in text and "team-a" not in text, (
                    path,
                    text,
                )
            else:
                unknown = _ask(
                    http_b,
                    method,
                    path,
                    nobody,
                    {
                        k: json.loads(json.dumps(v).replace(mine, nobody)) if k != "files" else v
                        for k, v in request.items()
                    },
                )
                assert (answer.status_code, text.replace(mine, "ID")) == (
                    unknown.status_code,
                    unknown.text.replace(nobody, "ID"),
                ), path
        # The services of A's sandbox, over HTTP and WebSocket: unknown to B.
        assert http_b.get(f"/sandboxes/{mine}/proxy/").status_code == 404
        # A's sandbox is as it was.
        assert ok(http_a, "GET", "get_status", params={"sandbox_id": mine})["state"] == "running"
        assert (
            shell(http_a, mine, "test -e /tmp/x || test -e /tmp/a.txt; echo $?")["stdout"].strip()
            == "1"
        )
    finally:
        stop(http_a, mine)


def test_a_group_network_is_found_again_and_removed_after_the_admin_is_killed(
    tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    """A keyless admin's tenant is its store, the same after a restart: a sandbox started in a
    group by the next admin joins the group's network, and the network goes with the last of
    them, one started before the kill among them (its network known only by its labels)."""
    launch_admin, stop_admin = admin_launcher
    group = f"kept-{uuid.uuid4().hex[:6]}"
    first = launch_admin(tmp_path)
    try:
        with httpx.Client(base_url=first.url, timeout=180) as http:
            before = start(http, network_group=group)
        network = _group_network(docker_client, before)
        assert first.process is not None
        first.process.kill()  # as kill -9: nothing is cleaned up
        first.process.wait()
        second = launch_admin(tmp_path)
        try:
            with httpx.Client(base_url=second.url, timeout=180) as http:
                assert (
                    ok(http, "GET", "get_status", params={"sandbox_id": before})["state"]
                    == "running"
                )
                after = start(http, network_group=group)
                assert _group_network(docker_client, after) == network
                stop(http, after, before)
            eventually(
                lambda: not docker_client.networks.list(names=[network]),
                what="the group's network removed",
                timeout=60,
                interval=0.2,
            )
            assert not docker_client.networks.list(names=[network])
        finally:
            stop_admin(second, docker_client)
    finally:
        stop_admin(first, docker_client)
