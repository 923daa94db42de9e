"""``kill -9`` of a cluster's leader during 40 starts from 4 clients spread over both admins
(issue #24 points 3 and 5): every start is accounted for.

Four clients (rock's SDK, both admin URLs each, two of them trying the leader first and two the
follower) start 10 sandboxes each, five at a time. Once a third of the starts have answered,
the leader is killed with ``SIGKILL``, with up to 20 starts in flight on both admins (issue #24
said 100 starts: more starts only make the test longer, the kill meets as many in flight). Then:

- every start answered: a running sandbox, or an error with its reason;
- no sandbox is doubled: each start made at most one sandbox (its own id, one container);
- none is lost: each sandbox a client was told runs still runs, through the surviving admin;
- none is left untracked: once the cluster settled, each container of the cluster belongs to a
  running sandbox in the store, and no record stays pending.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import RockError
from rock_core.testing import eventually
from rock_postgres.testing import AdminProcess, postgres_url, run_sql, two_admins  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 180  # a guard against a hang; nothing waits for it to pass
CLIENTS = 4
PER_CLIENT = 10
AT_ONCE = 5  # starts in flight per client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower), both serving, reconciling every second; a cluster of
    the test's own (the records of the module's database are another test's otherwise)."""
    with two_admins(tmp_path, postgres_url, extra="reconcile_interval = 1.0\n") as admins:
        yield admins


def _containers(owner: str) -> dict[str, str]:
    """The cluster's containers: container id -> the sandbox id its label names."""
    out = subprocess.run(
        [
            "docker", "ps", "-a", "--filter", f"label=rock.owner={owner}",
            "--format", '{{.ID}} {{.Label "rock.sandbox_id"}}',
        ],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def _records(url: str, owner: str) -> dict[str, tuple[str, str | None]]:
    """Every record of the cluster: sandbox id -> (state, reason)."""
    rows = run_sql(
        url, "SELECT sandbox_id, state, record FROM rock_sandbox WHERE owner = $1", owner
    )
    import json

    return {str(row[0]): (str(row[1]), json.loads(row[2]).get("reason")) for row in rows}


async def test_kill_9_of_the_leader_during_40_starts_loses_and_doubles_nothing(
    admins: tuple[AdminProcess, AdminProcess], postgres_url: str
) -> None:
    leader, follower = admins
    owner = _owner(leader)
    running: dict[str, str] = {}  # sandbox id -> the client that started it
    failed: list[str] = []  # the errors of starts that failed
    answered = 0
    enough = anyio.Event()

    async def start_one(client: int, urls: list[str]) -> None:
        nonlocal answered
        sandbox = Sandbox(
            SandboxConfig(
                image="python:3.11", base_url=urls, memory="128m", cpus=0.25,
                auto_clear_seconds=600, startup_timeout=120,
            )
        )  # fmt: skip
        try:
            await sandbox.start()
        except RockError as exc:
            assert str(exc).strip(), "a failed start names its reason"
            failed.append(str(exc))
        else:
            assert sandbox.sandbox_id is not None
            assert sandbox.sandbox_id not in running, "two starts answered one sandbox"
            running[sandbox.sandbox_id] = f"client {client}"
        finally:
            answered += 1
            if answered >= (CLIENTS * PER_CLIENT) // 3:
                enough.set()

    async def client(index: int) -> None:
        first, second = (leader, follower) if index % 2 == 0 else (follower, leader)
        urls = [first.url, second.url]
        limiter = anyio.Semaphore(AT_ONCE)

        async def limited() -> None:
            async with limiter:
                await start_one(index, urls)

        async with anyio.create_task_group() as tg:
            for _ in range(PER_CLIENT):
                tg.start_soon(limited)

    async def kill_the_leader() -> None:
        await enough.wait()
        leader.process.kill()
        leader.process.wait()

    with anyio.fail_after(HANG * 3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_the_leader)
            for index in range(CLIENTS):
                tg.start_soon(client, index)

    # Every start answered.
    assert len(running) + len(failed) == CLIENTS * PER_CLIENT
    assert leader.process.returncode == -9
    assert follower.epochs_led(), "the follower took the lease"

    # The cluster settles: nothing pending, each container a running sandbox's, one each.
    def settled() -> tuple[dict[str, tuple[str, str | None]], dict[str, str]]:
        return _records(postgres_url, owner), _containers(owner)

    records, containers = eventually(
        settled,
        until=lambda found: (
            all(state != "pending" for state, _ in found[0].values())
            and all(found[0].get(s, ("",))[0] == "running" for s in found[1].values())
        ),
        what="the cluster to settle",
        timeout=HANG,
    )
    held = list(containers.values())
    assert len(held) == len(set(held)), "a sandbox with two containers"
    # Not doubled: at most one sandbox per start.
    assert len(records) <= CLIENTS * PER_CLIENT
    # Not lost: each sandbox a client was told runs still runs.
    for sandbox_id in running:
        assert records[sandbox_id][0] == "running", (sandbox_id, records[sandbox_id])
        assert sandbox_id in held
    # Every record not running says why.
    for sandbox_id, (state, reason) in records.items():
        if state != "running":
            assert reason, (sandbox_id, state)
    print(f"{len(running)} running, {len(failed)} failed: {sorted(set(failed))[:5]}")


def _status(url: str, sandbox_id: str) -> dict[str, object]:
    import httpx

    answer = httpx.get(
        f"{url}/apis/envs/sandbox/v1/get_status",
        params={"sandbox_id": sandbox_id, "include_all_states": "true"},
        timeout=30,
    ).json()
    result = answer["result"]
    assert isinstance(result, dict), answer
    return result


async def test_after_a_failover_the_new_leader_keeps_deadlines_and_restart_policies(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    urls = [leader.url, follower.url]
    idle = Sandbox(
        SandboxConfig(image="python:3.11", base_url=urls, memory="128m", auto_clear_seconds=6)
    )
    crashing = Sandbox(
        SandboxConfig(
            image="python:3.11", base_url=urls, memory="128m", auto_clear_seconds=600,
            restart_policy="on-failure",
        )
    )  # fmt: skip
    await idle.start()
    await crashing.start()
    try:
        leader.process.kill()
        leader.process.wait()
        eventually(follower.epochs_led, what="the follower leads", timeout=HANG)
        # The restart policy: the crashed sandbox comes back, by the new leader.
        assert crashing.sandbox_id is not None
        [container] = _containers_of(crashing.sandbox_id)
        subprocess.run(["docker", "kill", container], check=True, capture_output=True)
        eventually(
            lambda: _status(follower.url, str(crashing.sandbox_id)),
            until=lambda s: s["restart_count"] == 1 and s["state"] == "running",
            what="the crash restart",
            timeout=HANG,
        )
        # The idle deadline: left alone, the idle one is stopped by the new leader.
        assert idle.sandbox_id is not None
        eventually(
            lambda: _status(follower.url, str(idle.sandbox_id)),
            until=lambda s: s["state"] != "running",
            what="the idle stop",
            timeout=HANG,
        )
        assert "expired" in str(_status(follower.url, idle.sandbox_id).get("reason"))
    finally:
        await idle.close()
        await crashing.close()


def _containers_of(sandbox_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.split()


def _owner(admin: AdminProcess) -> str:
    """The owner of the cluster ``admin`` is in (its config names the cluster)."""
    text = (admin.folder / "admin.toml").read_text()
    return "cluster:" + text.split('cluster = "', 1)[1].split('"', 1)[0]


async def test_a_stop_sent_right_after_the_leader_is_killed_stops_the_sandbox(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    sandboxes = [
        Sandbox(SandboxConfig(image="python:3.11", base_url=leader.url, memory="128m"))
        for _ in range(3)
    ]
    for sandbox in sandboxes:
        await sandbox.start()
    ids = [str(s.sandbox_id) for s in sandboxes]
    leader.process.kill()
    leader.process.wait()
    # At once, before the follower took the lease: the stop waits for the new leader, which
    # answers it only once it took the cluster's sandboxes back (else 'unknown id: done').
    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(_stop_through, follower.url, sandbox_id)
    for sandbox_id in ids:
        assert _status(follower.url, sandbox_id)["state"] in ("stopped", "deleted")
        eventually(
            lambda s=sandbox_id: _containers_of(s),
            until=lambda found: not found,
            what=f"{sandbox_id}'s container removed",
            timeout=HANG,
        )


async def _stop_through(url: str, sandbox_id: str) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=120) as http:
        answer = (
            await http.post(f"{url}/apis/envs/sandbox/v1/stop", json={"sandbox_id": sandbox_id})
        ).json()
    assert answer["status"] == "Success", answer
