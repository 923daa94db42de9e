"""API keys and tenancy of the admin server.

The settings rules run without a server. The rest drive a real admin (the conftest launcher's
``rock admin serve``) on a free port with two keys, one from the config file (as a hash) and one
from ``ROCK_ADMIN_API_KEYS`` (as plain text), each starting a small sandbox on the local Docker
engine. Every container the admin made is removed at the end (found by its ``rock.owner`` label).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.admin.auth import TENANT_METADATA_KEY, hash_key
from rock.admin.config import load_settings
from rock_core.errors import InvalidParameter

IMAGE = "python:3.11"
PREFIX = "/apis/envs/sandbox/v1"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}

KEY_A = "key-a-" + uuid.uuid4().hex  # configured in the file, as its sha256
KEY_B = "key-b-" + uuid.uuid4().hex  # configured through ROCK_ADMIN_API_KEYS, as plain text
KEY_OPS = "key-ops-" + uuid.uuid4().hex  # in the file, allowed the host's network
WRONG_KEY = "key-x-" + uuid.uuid4().hex
IDENTITY_A = {
    "X-User-Id": "ann",
    "X-Experiment-Id": "exp-a",
    "X-Namespace": "ns-a",
    "X-Cluster": "c-a",
}
IDENTITY_B = {
    "X-User-Id": "bob",
    "X-Experiment-Id": "exp-b",
    "X-Namespace": "ns-b",
    "X-Cluster": "c-b",
}


# ---------------------------------------------------------------------------------------------
# Settings


def test_keys_from_file_and_environment_add_up_and_only_hashes_are_kept(tmp_path: Path) -> None:
    config = tmp_path / "admin.toml"
    config.write_text(
        f'[admin]\napi_keys = [{{ tenant = "a", sha256 = "{hash_key(KEY_A)}" }}, '
        f'{{ tenant = "c", key = "{WRONG_KEY}" }}]\n'
    )
    settings = load_settings(
        config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), "ROCK_ADMIN_API_KEYS": f"b={KEY_B}"}
    )
    assert {(k.tenant, k.sha256) for k in settings.api_keys} == {
        ("a", hash_key(KEY_A)),
        ("b", hash_key(KEY_B)),
        ("c", hash_key(WRONG_KEY)),
    }
    for key in (KEY_B, WRONG_KEY):
        assert key not in repr(settings)


def test_environment_accepts_hashes_too(tmp_path: Path) -> None:
    env = {
        "ROCK_ADMIN_STATE_DIR": str(tmp_path),
        "ROCK_ADMIN_API_KEYS": f" a=sha256:{hash_key(KEY_A)} , b={KEY_B},",
    }
    settings = load_settings(environ=env)
    assert [(k.tenant, k.sha256) for k in settings.api_keys] == [
        ("a", hash_key(KEY_A)),
        ("b", hash_key(KEY_B)),
    ]


def test_no_keys_by_default(tmp_path: Path) -> None:
    assert load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)}).api_keys == ()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("a=short-key", "admin.api_keys[0].key: expected a key of at least 16 characters"),
        ("just-a-key-without-tenant", "admin.api_keys[0]: each entry is TENANT=KEY"),
        (f"bad tenant={KEY_A}", "admin.api_keys[0].tenant: expected a name of letters"),
        (f"a={KEY_A},b={KEY_A}", "two tenants"),
    ],
)
def test_bad_keys_are_refused_without_echoing_them(tmp_path: Path, value: str, named: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), "ROCK_ADMIN_API_KEYS": value})
    assert named in str(info.value)
    assert "api_keys" in str(info.value)
    for secret in ("short-key", "just-a-key-without-tenant", KEY_A):
        assert secret not in str(info.value)


def test_allow_host_network_on_a_key_must_be_a_boolean(tmp_path: Path) -> None:
    config = tmp_path / "admin.toml"
    config.write_text(
        f'[admin]\napi_keys = [{{ tenant = "t", key = "{KEY_A}", allow_host_network = "yes" }}]\n'
    )
    with pytest.raises(
        InvalidParameter,
        match=r"admin\.api_keys\[0\]\.allow_host_network: expected true or false, got 'yes'",
    ) as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert KEY_A not in str(info.value)
    config.write_text(
        f'[admin]\napi_keys = [{{ tenant = "t", key = "{KEY_A}", allow_host_network = true }}]\n'
    )
    (key,) = load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)}).api_keys
    assert key.allow_host_network is True


def test_bad_file_entries_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "admin.toml"
    config.write_text('[admin]\napi_keys = [{ tenant = "a", sha256 = "not-hex" }]\n')
    with pytest.raises(
        InvalidParameter, match=r"admin\.api_keys\[0\]\.sha256: expected 64 hex digits"
    ):
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    config.write_text(
        f'[admin]\napi_keys = [{{ tenant = "a", key = "{KEY_A}", sha256 = "{hash_key(KEY_A)}" }}]\n'
    )
    with pytest.raises(InvalidParameter, match="exactly one of") as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert KEY_A not in str(info.value)


def test_hash_helper_refuses_a_bad_tenant_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rock.admin.auth", "team a"],
        input=KEY_A,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("tenant: expected a name of letters, digits")
    assert "got 'team a'" in done.stderr and KEY_A not in done.stderr


def test_hash_helper_answers_help_and_never_takes_an_option_for_a_tenant() -> None:
    for flag, code in (("--help", 0), ("-h", 0), ("--tenant", 2)):
        done = subprocess.run(
            [sys.executable, "-m", "rock.admin.auth", flag],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, (flag, done)
        assert "usage: python -m rock.admin.auth TENANT" in done.stdout + done.stderr
        assert "sha256" not in done.stdout and "new key" not in done.stderr


def test_hash_helper_prints_an_entry_for_a_key() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rock.admin.auth", "team-a"],
        input=KEY_A,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f'{{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }}'
    assert KEY_A not in done.stdout + done.stderr


# ---------------------------------------------------------------------------------------------
# A real admin with two keys


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    """The module's admin, with key A in its config file and key B in its environment (its log
    at debug level, with the access log on); its sandboxes' containers are removed at the end."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("admin-auth"),
        config='[admin]\nlog_level = "debug"\naccess_log = true\n'
        f'api_keys = [{{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}", allowed_cap_add = ["NET_RAW", "SYS_ADMIN"] }},\n'
        f'  {{ tenant = "ops", sha256 = "{hash_key(KEY_OPS)}", allow_host_network = true, max_priority = 9 }}]\n',
        env={"ROCK_ADMIN_API_KEYS": f"team-b={KEY_B}"},
    )
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def client(admin: Any, headers: dict[str, str] | None = None) -> httpx.Client:
    """An HTTP client of the admin sending ``headers``."""
    return httpx.Client(base_url=admin.url, timeout=120, headers=headers or {})


def envelope_of(response: httpx.Response) -> dict[str, Any]:
    """The response's ROCK envelope (HTTP 200)."""
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"status", "message", "error", "result"}
    return body


def ok(http: httpx.Client, method: str, route: str, **kw: Any) -> Any:
    """Call ``route``; it must succeed; return its ``result``."""
    body = envelope_of(http.request(method, f"{PREFIX}/{route}", **kw))
    assert body["status"] == "Success", body
    return body["result"]


@pytest.fixture(scope="module")
def http_a(admin: Any) -> Iterator[httpx.Client]:
    """Key A, as ``X-API-Key``."""
    with client(admin, {"X-API-Key": KEY_A, **IDENTITY_A}) as http:
        yield http


@pytest.fixture(scope="module")
def http_b(admin: Any) -> Iterator[httpx.Client]:
    """Key B, as ``Authorization: Bearer``."""
    with client(admin, {"Authorization": f"Bearer {KEY_B}", **IDENTITY_B}) as http:
        yield http


@pytest.fixture(scope="module")
def sandboxes(admin: Any, http_a: httpx.Client, http_b: httpx.Client) -> tuple[str, str]:
    """One running sandbox of each key: (A's, B's)."""
    ids = []
    for http, prefix in ((http_a, "auth-a"), (http_b, "auth-b")):
        sandbox_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
        assert (
            ok(http, "POST", "start", json={**SMALL, "sandbox_id": sandbox_id})["sandbox_id"]
            == sandbox_id
        )
        ids.append(sandbox_id)
    return ids[0], ids[1]


def test_healthz_and_greeting_are_open(admin: Any) -> None:
    with client(admin) as http:
        assert http.get("/healthz").json()["status"] == "ok"
        assert http.get("/").json() == {"message": "hello, ROCK!"}


def test_the_rocklet_is_served_to_any_host_with_its_checksum(admin: Any) -> None:
    """Units on cluster nodes download the rocklet with no key; its digest names what they got."""
    with client(admin) as http:
        response = http.get("/rocklet.pyz")
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == response.headers["x-checksum-sha256"]
    with zipfile.ZipFile(io.BytesIO(response.content)) as pyz:
        assert "__main__.py" in pyz.namelist()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-API-Key": WRONG_KEY},
        {"Authorization": f"Bearer {WRONG_KEY}"},
        {"Authorization": f"Basic {KEY_A}"},
    ],
    ids=["none", "unknown", "unknown-bearer", "not-bearer"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"{PREFIX}/sandboxes"),
        ("POST", f"{PREFIX}/start_async"),
        ("GET", f"{PREFIX}/get_status"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/no/such/path"),
    ],
)
def test_a_missing_or_unknown_key_is_401_with_rocks_envelope(
    admin: Any, headers: dict[str, str], method: str, path: str
) -> None:
    with client(admin, headers) as http:
        response = http.request(method, path, json={**SMALL} if method == "POST" else None)
    assert response.status_code == 401
    body = response.json()
    assert body["status"] == "Failed"
    assert body["message"] == "unauthorized"
    assert "X-API-Key" in body["error"]
    assert body["result"]["rock_code"] == 4011
    for secret in (WRONG_KEY, KEY_A):
        assert secret not in response.text
        assert secret not in str(response.headers)


def test_each_key_sees_only_its_own_sandboxes(
    http_a: httpx.Client, http_b: httpx.Client, sandboxes: tuple[str, str]
) -> None:
    a, b = sandboxes
    assert [s["sandbox_id"] for s in ok(http_a, "GET", "sandboxes")["items"]] == [a]
    listing = ok(http_b, "GET", "sandboxes")
    assert ([s["sandbox_id"] for s in listing["items"]], listing["total"], listing["has_more"]) == (
        [b],
        1,
        False,
    )
    assert (
        ok(http_a, "GET", "get_status", params={"sandbox_id": a})["metadata"][TENANT_METADATA_KEY]
        == "team-a"
    )
    assert [
        s["sandbox_id"]
        for s in ok(http_a, "POST", "sandboxes/batch", json={"sandbox_ids": [a, b]})["statuses"]
    ] == [a]
    assert [
        s["sandbox_id"]
        for s in ok(http_b, "POST", "sandboxes/batch", json={"sandbox_ids": [a, b]})["statuses"]
    ] == [b]


def _same_answer(
    http: httpx.Client, method: str, route: str, foreign: str, **kw: Any
) -> dict[str, Any]:
    """Call ``route`` for ``foreign`` and for an id nobody has; the answers must match but for the id."""
    unknown = f"nobody-{uuid.uuid4().hex[:12]}"

    def ask(sandbox_id: str) -> dict[str, Any]:
        args = dict(kw)
        if method == "GET":
            args["params"] = {**args.get("params", {}), "sandbox_id": sandbox_id}
        else:
            args["json"] = {**args.get("json", {}), "sandbox_id": sandbox_id}
        return envelope_of(http.request(method, f"{PREFIX}/{route}", **args))

    answer = ask(foreign)
    assert json.dumps(answer).replace(foreign, "ID") == json.dumps(ask(unknown)).replace(
        unknown, "ID"
    ), route
    return answer


def test_another_keys_sandbox_answers_as_an_unknown_id(
    http_a: httpx.Client, http_b: httpx.Client, sandboxes: tuple[str, str], docker_client: Any
) -> None:
    a, b = sandboxes
    status = _same_answer(http_a, "GET", "get_status", b)
    assert (
        status["status"] == "Failed"
        and status["result"]["rock_code"] == 4004
        and "not found" in status["error"]
    )
    assert (
        _same_answer(http_a, "GET", "get_status", b, params={"include_all_states": "true"})[
            "result"
        ]["rock_code"]
        == 4004
    )
    assert (
        _same_answer(http_a, "POST", "execute", b, json={"command": "echo hi"})["result"][
            "rock_code"
        ]
        == 4004
    )
    assert (
        _same_answer(http_a, "POST", "create_session", b, json={"session": "s"})["result"][
            "rock_code"
        ]
        == 4004
    )
    assert (
        _same_answer(http_a, "POST", "read_file", b, json={"path": "/etc/hostname"})["result"][
            "rock_code"
        ]
        == 4004
    )
    assert _same_answer(http_a, "GET", "get_sandbox_statistics", b)["result"]["rock_code"] == 4004
    assert _same_answer(http_a, "POST", "restart", b)["result"]["rock_code"] == 4004
    assert _same_answer(http_a, "GET", "is_alive", b)["result"]["is_alive"] is False
    # ROCK answers stop and delete of an unknown id with success; they must not act.
    assert _same_answer(http_a, "POST", "stop", b)["status"] == "Success"
    assert _same_answer(http_a, "POST", "delete", b)["status"] == "Success"
    upload = envelope_of(
        http_a.post(
            f"{PREFIX}/upload",
            files={"file": ("a.txt", b"x")},
            data={"sandbox_id": b, "target_path": "/tmp/a.txt"},
        )
    )
    assert (upload["status"], upload["result"]["rock_code"]) == ("Failed", 4004)
    # B's sandbox is untouched: still running, and B still uses it.
    assert ok(http_b, "GET", "get_status", params={"sandbox_id": b})["state"] == "running"
    assert (
        ok(
            http_b, "POST", "execute", json={"sandbox_id": b, "command": "echo mine", "shell": True}
        )["stdout"].strip()
        == "mine"
    )
    assert [
        c.status
        for c in docker_client.containers.list(
            all=True, filters={"label": f"rock.sandbox_id={b}"}, ignore_removed=True
        )
    ] == ["running"]
    # And the owner acts on its own.
    assert (
        ok(http_a, "POST", "execute", json={"sandbox_id": a, "command": "echo a", "shell": True})[
            "stdout"
        ].strip()
        == "a"
    )


def test_identity_headers_are_stored_and_filterable(
    http_a: httpx.Client, sandboxes: tuple[str, str]
) -> None:
    a, _b = sandboxes
    status = ok(http_a, "GET", "get_status", params={"sandbox_id": a})
    assert (status["user_id"], status["experiment_id"], status["namespace"]) == (
        "ann",
        "exp-a",
        "ns-a",
    )
    for field, value in (
        ("user_id", "ann"),
        ("experiment_id", "exp-a"),
        ("namespace", "ns-a"),
        ("cluster", "c-a"),
    ):
        assert [
            s["sandbox_id"] for s in ok(http_a, "GET", "sandboxes", params={field: value})["items"]
        ] == [a], field
        assert ok(http_a, "GET", "sandboxes", params={field: "someone-else"})["items"] == [], field
    # B's identity is not a way into B's sandboxes.
    assert ok(http_a, "GET", "sandboxes", params={"user_id": "bob"})["items"] == []


def test_the_tenant_metadata_key_is_reserved(http_a: httpx.Client) -> None:
    body = envelope_of(
        http_a.post(
            f"{PREFIX}/start_async", json={**SMALL, "metadata": {TENANT_METADATA_KEY: "team-b"}}
        )
    )
    assert (body["status"], body["result"]["rock_code"]) == ("Failed", 4001)
    assert TENANT_METADATA_KEY in body["error"]


def test_metrics_and_openapi_with_a_key(http_a: httpx.Client, sandboxes: tuple[str, str]) -> None:
    metrics = http_a.get("/metrics")
    assert metrics.status_code == 200
    assert 'rock_sandboxes{state="running"}' in metrics.text
    assert 'outcome="unauthorized"' in metrics.text
    for sandbox_id in sandboxes:
        assert sandbox_id not in metrics.text
    document = http_a.get("/openapi.json").json()
    assert {"apiKey", "bearer"} <= set(document["components"]["securitySchemes"])
    assert document["paths"]["/healthz"]["get"]["security"] == []


def test_the_host_network_is_refused_unless_the_key_allows_it(
    http_a: httpx.Client, admin: Any
) -> None:
    body = envelope_of(http_a.post(f"{PREFIX}/start_async", json={**SMALL, "network": "host"}))
    assert body["status"] == "Failed" and body["result"]["rock_code"] == 4001
    assert "network: 'host'" in body["error"] and "tenant 'team-a'" in body["error"]
    assert "allow_host_network" in body["error"]
    pool = envelope_of(http_a.post(f"{PREFIX}/warmup/tasks", json={**SMALL, "network": "host"}))
    assert pool["status"] == "Failed" and "network: 'host'" in pool["error"]
    assert all(
        item["sandbox_id"].startswith("auth-a") for item in ok(http_a, "GET", "sandboxes")["items"]
    )
    with client(admin, {"X-API-Key": KEY_OPS}) as ops:
        started = ok(ops, "POST", "start", json={**SMALL, "network": "host"})
        status = ok(ops, "GET", "get_status", params={"sandbox_id": started["sandbox_id"]})
        assert status["state"] == "running" and status["security"]["network"].startswith("host")
        ok(ops, "POST", "stop", json={"sandbox_id": started["sandbox_id"]})


def test_pids_limit_and_capabilities_cross_the_wire(http_a: httpx.Client) -> None:
    # Key A lists SYS_ADMIN, but the engine never grants it: its own allowed_cap_add bounds every key.
    refused = envelope_of(
        http_a.post(f"{PREFIX}/start_async", json={**SMALL, "cap_add": ["SYS_ADMIN"]})
    )
    assert (
        refused["status"] == "Failed"
        and "cap_add: SYS_ADMIN may not be added here" in refused["error"]
    )
    started = ok(http_a, "POST", "start", json={**SMALL, "pids_limit": 128, "cap_add": ["NET_RAW"]})
    try:
        status = ok(http_a, "GET", "get_status", params={"sandbox_id": started["sandbox_id"]})
        security = status["security"]
        assert security["pids_limit"] == 128 and "NET_RAW" in security["capabilities"]
        assert security["rocklet_auth"] is True and security["no_new_privileges"] is True
        assert all("token" not in key for key in status)
    finally:
        ok(http_a, "POST", "stop", json={"sandbox_id": started["sandbox_id"]})


def test_owners_stop_and_delete_their_own(
    http_a: httpx.Client, http_b: httpx.Client, sandboxes: tuple[str, str], docker_client: Any
) -> None:
    a, b = sandboxes
    for http, sandbox_id in ((http_a, a), (http_b, b)):
        assert ok(http, "POST", "stop", json={"sandbox_id": sandbox_id}) == f"{sandbox_id} stopped"
        ok(http, "POST", "delete", json={"sandbox_id": sandbox_id})
    assert ok(http_a, "GET", "sandboxes")["items"] == []
    assert ok(http_b, "GET", "sandboxes")["items"] == []


def test_the_log_holds_no_key(
    admin: Any, http_a: httpx.Client, http_b: httpx.Client, sandboxes: tuple[str, str]
) -> None:
    ok(http_a, "GET", "sandboxes")
    ok(http_b, "GET", "sandboxes")
    with client(admin, {"X-API-Key": WRONG_KEY}) as http:
        assert http.get(f"{PREFIX}/sandboxes").status_code == 401
    text = admin.log_file.read_text(errors="replace")
    assert (
        "GET /apis/envs/sandbox/v1/sandboxes" in text
    )  # the access log was on: requests were logged
    for secret in (KEY_A, KEY_B, WRONG_KEY):
        assert secret not in text


def test_a_key_asks_for_at_most_its_max_priority(admin: Any, http_a: httpx.Client) -> None:
    """Key A has the default ceiling (5, normal); the ops key was raised to 9 in its entry."""
    body = envelope_of(http_a.post(f"{PREFIX}/start_async", json={**SMALL, "priority": 9}))
    assert (
        body["status"] == "Failed"
        and "priority: 9 is above the highest tenant 'team-a' may ask for (5" in body["error"]
    )
    with client(admin, {"X-API-Key": KEY_OPS}) as http_ops:
        started = ok(http_ops, "POST", "start_async", json={**SMALL, "priority": 9})
        ok(http_ops, "POST", "stop", json={"sandbox_id": started["sandbox_id"]})
    started = ok(http_a, "POST", "start_async", json={**SMALL, "priority": 2})
    ok(http_a, "POST", "stop", json={"sandbox_id": started["sandbox_id"]})


def test_the_cli_against_an_admin_with_keys_says_a_key_is_needed_and_how(admin: Any) -> None:
    import os

    rock = str(Path(sys.executable).with_name("rock"))
    base = {k: v for k, v in os.environ.items() if k not in ("ROCK_API_KEY", "ROCK_BASE_URL")}
    base["ROCK_ADMIN_STATE_DIR"] = str(admin.state_dir)

    def run(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**base, **({"ROCK_API_KEY": key} if key else {})}
        return subprocess.run([rock, *args], env=env, capture_output=True, text=True, timeout=120)

    status = run("admin", "status")
    assert "set ROCK_API_KEY to an operator's key" in status.stdout, status.stdout
    wrong = run("admin", "status", key="not-a-key")
    assert "ROCK_API_KEY is not a key of this admin" in wrong.stdout, wrong.stdout
    known = run("admin", "status", key=KEY_A).stdout
    assert "sandboxes: " in known and "unknown" not in known, known
    listed = run("envhub", "list", "--base-url", admin.url)
    assert listed.returncode == 1 and "needs an API key: set ROCK_API_KEY" in listed.stderr
    assert "None" not in listed.stderr
    wrong = run("envhub", "list", "--base-url", admin.url, key="not-a-key")
    assert wrong.returncode == 1 and "does not know the key in ROCK_API_KEY" in wrong.stderr
