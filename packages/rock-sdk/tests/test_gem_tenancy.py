"""GEM envs and EnvHub are tenants' namespaces (issue #22 point 2), attacked through a real admin.

One admin over a real socket with API keys of tenants ``a`` and ``b``, of ``c`` (a quota of one
sandbox), of ``d`` (a default egress policy of its own) and of an operator, env sandboxes on the local Docker engine from
``rock-gem/python:3.11``, ``envs_per_sandbox = 4`` (so envs would share a sandbox if the
provider let them). Each attack test is one tenant ``b`` makes on tenant ``a``.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import rock

ROOT = Path(__file__).resolve().parents[3]
KEY_A, KEY_B, KEY_C, KEY_D, KEY_OPS = (
    f"key-{t}-" + uuid.uuid4().hex for t in ("a", "b", "c", "d", "ops")
)
#: Tenant ``d``'s key's own default egress policy (its widest: nothing set).
D_EGRESS = {
    "default": "deny",
    "rules": [{"action": "allow", "cidr": "198.51.100.3/32", "ports": ["443"], "protocol": "any"}],
    "domains": [],
}

# These tests run an admin of their own: once is enough (the remote pass repeats them as they are).
pytestmark = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="runs an admin of its own; ran in the embedded pass",
)


@pytest.fixture(scope="module")
def gem_image(docker_client: Any) -> str:
    """rock-gem's env image, made when missing (offline: uv fetches the wheels)."""
    subprocess.run([str(ROOT / "scripts" / "ensure-gem-image.sh")], check=True, timeout=600)
    return "rock-gem/python:3.11"


@pytest.fixture(scope="module")
def keyed_admin(
    tmp_path_factory: pytest.TempPathFactory,
    docker_client: Any,
    admin_launcher: Any,
    gem_image: str,
) -> Iterator[Any]:
    """An admin with tenants ``a``, ``b``, ``c`` (one sandbox at most), ``d`` (its own default
    egress policy) and ``ops`` (an operator), GEM envs four to a sandbox."""
    from rock.admin.auth import hash_key

    launch_admin, stop_admin = admin_launcher
    config = (
        f'[admin]\napi_keys = [{{ tenant = "a", sha256 = "{hash_key(KEY_A)}" }}, {{ tenant = "b", sha256 = "{hash_key(KEY_B)}" }},\n'
        f'  {{ tenant = "c", sha256 = "{hash_key(KEY_C)}", max_sandboxes = 1 }},\n'
        f'  {{ tenant = "d", sha256 = "{hash_key(KEY_D)}", default_egress = {{ default = "deny", '
        'rules = [{ action = "allow", cidr = "198.51.100.3", ports = [443] }] } },\n'
        f'  {{ tenant = "ops", sha256 = "{hash_key(KEY_OPS)}", operator = true }}]\n'
        f'[plugins.gem]\nimage = "{gem_image}"\nenvs_per_sandbox = 4\n'
    )
    server = launch_admin(tmp_path_factory.mktemp("gem-tenancy"), config=config)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def _hub(server: Any, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"X-API-Key": key}, timeout=60, trust_env=False
    )


def _sandbox_of(env: Any) -> str:
    return str(env.sandbox_id).split(".")[0]


def _container(docker_client: Any, sandbox_id: str) -> Any:
    (container,) = docker_client.containers.list(filters={"label": f"rock.sandbox_id={sandbox_id}"})
    return container


# -- EnvHub --------------------------------------------------------------------------------------


def test_a_register_of_another_tenants_name_lands_in_the_callers_own_namespace(
    keyed_admin: Any, gem_image: str
) -> None:
    name = "t-tenancy-" + uuid.uuid4().hex[:8]
    with _hub(keyed_admin, KEY_A) as a, _hub(keyed_admin, KEY_B) as b:
        assert (
            a.post(
                "/env/register", json={"env_name": name, "image": gem_image, "tags": ["t-tenancy"]}
            ).status_code
            == 200
        )
        # The attack: b registers a's name with its own image.
        taken = b.post(
            "/env/register", json={"env_name": name, "image": "b-image:evil", "tags": ["t-tenancy"]}
        )
        assert taken.status_code == 200 and taken.json()["image"] == "b-image:evil"
        assert a.post("/env/get", json={"env_name": name}).json()["image"] == gem_image
        assert b.post("/env/get", json={"env_name": name}).json()["image"] == "b-image:evil"
        assert [
            e["image"]
            for e in a.post("/env/list", json={"tags": ["t-tenancy"]}).json()["envs"]
            if e["env_name"] == name
        ] == [gem_image]
        # b deletes its own entry, then finds nothing of a's to delete.
        assert b.post("/env/delete", json={"env_name": name}).json() is True
        gone = b.post("/env/delete", json={"env_name": name})
        assert gone.status_code == 404 and name in gone.json()["detail"]
        assert b.post("/env/get", json={"env_name": name}).status_code == 404
        assert a.post("/env/get", json={"env_name": name}).json()["image"] == gem_image
        assert a.post("/env/delete", json={"env_name": name}).json() is True


def test_an_entry_named_like_a_gem_id_changes_only_its_own_tenants_make(
    keyed_admin: Any, gem_image: str
) -> None:
    gem_id = "game:GuessTheNumber-v0-easy"
    with _hub(keyed_admin, KEY_B) as b:
        # The attack: b reroutes the GEM id to another game for whoever makes it.
        registered = b.post(
            "/env/register",
            json={
                "env_name": gem_id,
                "image": gem_image,
                "extra_spec": {"env_id": "game:Sokoban-v0-easy"},
            },
        )
        assert registered.status_code == 200
        try:
            env_a = rock.make(gem_id, base_url=keyed_admin.url, api_key=KEY_A)
            try:
                observation, _ = env_a.reset(seed=1)
                assert "Sokoban" not in observation and "number" in observation.lower()
            finally:
                env_a.close()
            env_b = rock.make(
                gem_id, base_url=keyed_admin.url, api_key=KEY_B
            )  # b's own make follows b's entry
            try:
                assert "Sokoban" in env_b.reset(seed=1)[0]
            finally:
                env_b.close()
        finally:
            b.post("/env/delete", json={"env_name": gem_id})


def test_a_tenant_neither_deletes_the_operators_entries_nor_names_another_tenants(
    keyed_admin: Any,
) -> None:
    with _hub(keyed_admin, KEY_B) as b:
        # The operator's entry (the admin's default image) is seen by every tenant, changed by none.
        assert (
            b.post("/env/get", json={"env_name": "EnvhubDefaultDockerImage"}).json()["tenant"]
            is None
        )
        refused = b.post("/env/delete", json={"env_name": "EnvhubDefaultDockerImage"})
        assert refused.status_code == 403 and "operator" in refused.json()["detail"]
        for path, body in (
            ("/env/register", {"env_name": "x", "image": "i"}),
            ("/env/get", {"env_name": "x"}),
            ("/env/delete", {"env_name": "x"}),
        ):
            named = b.post(path, json={**body, "tenant": "a"})
            assert named.status_code == 403 and "tenant" in named.json()["detail"], path
    with _hub(keyed_admin, KEY_A) as a:
        assert a.post("/env/get", json={"env_name": "EnvhubDefaultDockerImage"}).status_code == 200


def test_an_operator_key_writes_the_shared_entries_and_manages_any_tenants(
    keyed_admin: Any, gem_image: str
) -> None:
    name = "t-shared-" + uuid.uuid4().hex[:8]
    with (
        _hub(keyed_admin, KEY_OPS) as ops,
        _hub(keyed_admin, KEY_A) as a,
        _hub(keyed_admin, KEY_B) as b,
    ):
        shared = ops.post("/env/register", json={"env_name": name, "image": gem_image})
        assert shared.status_code == 200 and shared.json()["tenant"] is None
        assert a.post("/env/get", json={"env_name": name}).json()["image"] == gem_image
        assert (
            b.post("/env/register", json={"env_name": name, "image": "b-image:own"}).json()[
                "tenant"
            ]
            == "b"
        )
        assert (
            a.post("/env/get", json={"env_name": name}).json()["image"] == gem_image
        )  # b's stays b's
        assert b.post("/env/delete", json={"env_name": name}).json() is True
        assert (
            b.post("/env/delete", json={"env_name": name}).status_code == 403
        )  # what is left is the operator's
        b.post("/env/register", json={"env_name": name, "image": "b-image:own"})
        listed = {
            (e["env_name"], e["tenant"]) for e in ops.post("/env/list", json={}).json()["envs"]
        }
        assert {(name, None), (name, "b")} <= listed
        assert (
            ops.post("/env/get", json={"env_name": name, "tenant": "b"}).json()["image"]
            == "b-image:own"
        )
        assert ops.post("/env/delete", json={"env_name": name, "tenant": "b"}).json() is True
        assert b.post("/env/get", json={"env_name": name}).json()["tenant"] is None
        assert ops.post("/env/delete", json={"env_name": name}).json() is True
        assert a.post("/env/get", json={"env_name": name}).status_code == 404


# -- env sandboxes -------------------------------------------------------------------------------


def test_envs_of_two_tenants_never_share_an_env_sandbox(keyed_admin: Any) -> None:
    envs_a = [
        rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_A)
        for _ in range(2)
    ]
    envs_b = [
        rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_B)
        for _ in range(2)
    ]
    try:
        hosts_a, hosts_b = {_sandbox_of(e) for e in envs_a}, {_sandbox_of(e) for e in envs_b}
        assert len(hosts_a) == 1 and len(hosts_b) == 1  # each tenant's envs still share its sandbox
        assert hosts_a.isdisjoint(hosts_b)
    finally:
        for env in envs_a + envs_b:
            env.close()


def test_a_tenant_lists_only_its_own_env_sandboxes(keyed_admin: Any) -> None:
    """rock-gem's ``sandboxes`` route answers each tenant with its own env sandboxes only."""
    env_a = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_A)
    env_b = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_B)
    try:
        listed = {}
        for tenant, key in (("a", KEY_A), ("b", KEY_B)):
            with _hub(keyed_admin, key) as http:
                answer = http.post("/apis/v1/envs/gem/sandboxes", json={})
            assert answer.status_code == 200, answer.text
            listed[tenant] = {s["sandbox_id"] for s in answer.json()["sandboxes"]}
        assert _sandbox_of(env_a) in listed["a"] and _sandbox_of(env_a) not in listed["b"]
        assert _sandbox_of(env_b) in listed["b"] and _sandbox_of(env_b) not in listed["a"]
    finally:
        env_a.close()
        env_b.close()


def test_code_run_in_one_tenants_env_sandbox_cannot_write_what_anothers_env_reads(
    keyed_admin: Any, docker_client: Any
) -> None:
    """A ``code:*`` env runs the model's code in its env's process, as root in the env sandbox.
    The test stands in for that code with ``docker exec`` into b's env sandbox: it writes into
    GEM's runtime and ``/tmp``, which a's env process would read if they shared a sandbox."""
    env_a = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_A)
    env_b = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_B)
    try:
        env_a.reset(seed=1)
        marker = "b_was_here_" + uuid.uuid4().hex[:8]
        planted = _container(docker_client, _sandbox_of(env_b)).exec_run(
            ["sh", "-c", f"touch /opt/rock-gem/site/{marker}.py /tmp/{marker} && echo planted"]
        )
        assert planted.exit_code == 0 and b"planted" in planted.output
        # What a's env process sees: its sandbox's files.
        seen = _container(docker_client, _sandbox_of(env_a)).exec_run(
            ["sh", "-c", f"ls /opt/rock-gem/site/{marker}.py /tmp/{marker} 2>/dev/null; true"]
        )
        assert marker not in seen.output.decode()
        assert len(env_a.step("\\boxed{3}")) == 5
    finally:
        env_a.close()
        env_b.close()


def test_an_env_sandbox_is_its_tenants_sandbox(keyed_admin: Any) -> None:
    env_b = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_B)
    try:
        sandbox_id = _sandbox_of(env_b)
        with _hub(keyed_admin, KEY_B) as b, _hub(keyed_admin, KEY_A) as a:
            mine = b.get("/apis/envs/sandbox/v1/sandboxes").json()["result"]["items"]
            assert sandbox_id in {item["sandbox_id"] for item in mine}
            theirs = a.get("/apis/envs/sandbox/v1/sandboxes").json()["result"]["items"]
            assert sandbox_id not in {item["sandbox_id"] for item in theirs}
    finally:
        env_b.close()


def test_a_make_cannot_name_its_tenant(keyed_admin: Any) -> None:
    with _hub(keyed_admin, KEY_B) as b:
        spoofed = b.post(
            "/apis/v1/envs/gem/make",
            json={"env_id": "game:GuessTheNumber-v0-easy", "kwargs": {"tenant": "a"}},
        )
        assert (
            spoofed.status_code == 500
            and spoofed.json()["kind"] == "bad_request"
            and "kwargs.tenant" in spoofed.json()["detail"]
        )


def test_another_tenants_closed_env_is_answered_as_never_made(keyed_admin: Any) -> None:
    env_a = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_A)
    handle = env_a.sandbox_id
    env_a.close()
    with _hub(keyed_admin, KEY_B) as b, _hub(keyed_admin, KEY_A) as a:
        closed = b.post("/apis/v1/envs/gem/close", json={"sandbox_id": handle})
        assert (
            closed.status_code == 500 and "no env was made with this id" in closed.json()["detail"]
        )
        assert a.post("/apis/v1/envs/gem/close", json={"sandbox_id": handle}).json() == {
            "sandbox_id": handle
        }


def test_an_env_sandbox_counts_against_its_tenants_quota(keyed_admin: Any) -> None:
    env_c = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_C)
    try:
        with _hub(keyed_admin, KEY_C) as c:
            refused = c.post(
                "/apis/envs/sandbox/v1/start_async",
                json={"image": "python:3.11", "memory": "512m", "cpus": 0.5},
            )
            answer = refused.json()
            assert (
                answer["status"] == "Failed"
                and "max_sandboxes" in answer["error"]
                and "using 1" in answer["error"]
            )
        assert len(env_c.reset(seed=1)) == 2
    finally:
        env_c.close()


def test_an_env_sandbox_gets_its_keys_default_egress_policy(keyed_admin: Any) -> None:
    """An env sandbox passes the admin's admission as any start by the key does: a key's
    default egress policy reaches it (a code env's sandbox is no way around the key's policy)."""
    env_d = rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=KEY_D)
    try:
        with _hub(keyed_admin, KEY_D) as d:
            status = d.get(
                "/apis/envs/sandbox/v1/get_status", params={"sandbox_id": _sandbox_of(env_d)}
            ).json()["result"]
        assert status["egress"] == D_EGRESS
        assert len(env_d.reset(seed=1)) == 2  # the env still works behind it
    finally:
        env_d.close()


def test_a_gem_call_without_a_known_key_is_a_bad_request_saying_what_to_set(
    keyed_admin: Any,
) -> None:
    from rock_core.errors import BadRequestRockError

    for key in (None, "not-a-key"):
        with pytest.raises(BadRequestRockError, match="set ROCK_API_KEY") as refused:
            rock.make("game:GuessTheNumber-v0-easy", base_url=keyed_admin.url, api_key=key)
        assert "HTTP 401" in str(refused.value)
