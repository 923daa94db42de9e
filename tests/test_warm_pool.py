"""Warm pools (rock-core's engine + rock-docker): started sandboxes kept ready, claimed in one round trip."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import anyio
import docker.errors
import httpx
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.converters import spec_from_start_request
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import LABEL_ENGINE_ID, LABEL_SANDBOX_ID, SandboxManager
from rock_core.engine.pool import LABEL_POOL, LABEL_POOL_MEMBER, pool_key
from rock_core.errors import InvalidParameter
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.states import State
from rock_core.testing import eventually_async, eventually_empty

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

IMAGE = "python:3.11"
KIND = {"image": IMAGE, "memory": "256m", "cpus": 0.5}
OTHER_KIND = {"image": IMAGE, "memory": "300m", "cpus": 0.5}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def members(docker_client, engine):
    """The containers of ``engine`` that are pool members nobody has claimed."""
    found = docker_client.containers.list(
        all=True,
        filters={"label": [f"{LABEL_ENGINE_ID}={engine.engine_id}", LABEL_POOL]},
        ignore_removed=True,
    )
    return [c for c in found if c.name == c.labels.get(LABEL_POOL_MEMBER)]


def engine_containers(docker_client, engine):
    return docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_ENGINE_ID}={engine.engine_id}"}, ignore_removed=True
    )


@pytest.fixture
async def pooled(docker_client):
    """An engine keeping a warm pool of 2 sandboxes of ``KIND``, full before the test starts."""
    # forward_rocklet_port: a claimed member's 22555 forward is checked, and opened to attack its secret
    config = EngineConfig(
        warm_pools=[{**KIND, "size": 2}],
        timer_interval=0.2,
        reconcile_interval=1.0,
        forward_rocklet_port=True,
    )
    async with SandboxManager(config) as engine:
        (status,) = await engine.wait_warm(timeout=120)
        assert (status.ready, status.size, status.last_error) == (2, 2, None)
        yield engine
    assert eventually_empty(lambda: engine_containers(docker_client, engine)) == [], (
        "closing the engine must remove pool members too"
    )


async def test_members_are_running_unclaimed_containers(pooled, docker_client):
    found = members(docker_client, pooled)
    assert len(found) == 2
    for container in found:
        assert container.status == "running"
        assert LABEL_SANDBOX_ID not in container.labels
        assert container.labels[LABEL_POOL] == pool_key(
            spec_from_start_request(SandboxStartRequest(**KIND))
        )
        assert container.name.startswith("rock-pool-")
    assert pooled.list_records() == [], "members are not sandboxes: no record until claimed"


async def test_a_start_of_the_kind_claims_a_member_and_the_pool_refills(pooled, docker_client):
    before = {c.id for c in members(docker_client, pooled)}
    status = await pooled.start(SandboxStartRequest(**KIND, sandbox_id="claimed-1"))
    assert status.state is State.RUNNING
    assert status.phases["docker_run"].message.startswith("claimed from warm pool")
    # Renamed after the sandbox once it runs, in the background (not on the claim's path).
    (container,) = await eventually_async(
        lambda: docker_client.containers.list(filters={"name": "^/claimed-1$"}),
        what="the claimed member renamed after its sandbox",
    )
    assert container.id in before, "the sandbox is one of the members, renamed"
    assert set(status.port_mapping) >= {22555, 8080}
    result = await pooled.rocklet("claimed-1").execute(
        Command(command=["sh", "-c", "echo $HOSTNAME; ls /tmp"])
    )
    assert result.exit_code == 0

    (pool,) = await eventually_async(
        lambda: [p for p in pooled.warm_pools() if p.ready == 2 and p.made == 3]
    )
    assert pool.claimed == 1
    assert len(members(docker_client, pooled)) == 2

    await pooled.stop("claimed-1")
    await eventually_async(lambda: pooled.get_record("claimed-1").state is State.DELETED)
    with pytest.raises(docker.errors.NotFound, match="No such container|404"):
        docker_client.containers.get(container.id)


async def test_two_claims_get_separate_containers(pooled):
    a = await pooled.start(SandboxStartRequest(**KIND))
    b = await pooled.start(SandboxStartRequest(**KIND))
    assert a.phases["docker_run"].message.startswith("claimed") and b.phases[
        "docker_run"
    ].message.startswith("claimed")
    await pooled.rocklet(a.sandbox_id).execute(
        Command(command=["sh", "-c", "echo secret > /tmp/mine"])
    )
    seen = await pooled.rocklet(b.sandbox_id).execute(Command(command=["ls", "/tmp"]))
    assert "mine" not in seen.stdout


async def test_another_kind_starts_cold_and_leaves_the_pool_alone(pooled, docker_client):
    status = await pooled.start(SandboxStartRequest(**OTHER_KIND))
    assert status.phases["docker_run"].message == "docker run success"
    (pool,) = pooled.warm_pools()
    assert (pool.ready, pool.claimed) == (2, 0)


async def test_an_empty_pool_falls_back_to_an_ordinary_start(docker_client):
    async with SandboxManager(EngineConfig(warm_pools=[{**KIND, "size": 1}])) as engine:
        await engine.wait_warm(timeout=120)
        results = []

        async def start():
            results.append(await engine.start(SandboxStartRequest(**KIND)))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(start)
        messages = sorted(r.phases["docker_run"].message.split(" pool-")[0] for r in results)
        assert all(r.state is State.RUNNING for r in results)
        assert messages == ["claimed from warm pool", "docker run success", "docker run success"]


async def test_a_member_removed_behind_rocks_back_is_replaced_and_never_handed_out(
    pooled, docker_client
):
    doomed = {c.id for c in members(docker_client, pooled)}
    for container in members(docker_client, pooled):
        container.remove(force=True)
    # Whatever the pool still believes, the start gets a working sandbox.
    status = await pooled.start(SandboxStartRequest(**KIND))
    assert status.state is State.RUNNING
    result = await pooled.rocklet(status.sandbox_id).execute(Command(command=["true"]))
    assert result.exit_code == 0
    await eventually_async(
        lambda: (
            len(members(docker_client, pooled)) == 2
            and not doomed & {c.id for c in members(docker_client, pooled)}
        )
    )
    await eventually_async(lambda: pooled.warm_pools()[0].ready == 2)


async def test_a_member_that_does_not_answer_is_removed_and_the_start_goes_the_ordinary_way(
    pooled, docker_client
):
    """Frozen members (docker pause): each claim's one round trip fails and the member is removed
    before the next try, so the name is free for whatever serves the start (a refill or an
    ordinary start)."""
    frozen = {c.id for c in members(docker_client, pooled)}
    for container in members(docker_client, pooled):
        container.pause()
    status = await pooled.start(SandboxStartRequest(**KIND, sandbox_id="after-a-frozen-member"))
    assert status.state is State.RUNNING
    # A refill or an ordinary start serves it; a refill's member is renamed once it runs.
    (container,) = await eventually_async(
        lambda: docker_client.containers.list(filters={"name": "^/after-a-frozen-member$"}),
        what="a container named after the sandbox",
    )
    assert container.status == "running" and container.id not in frozen
    assert (
        await pooled.rocklet("after-a-frozen-member").execute(Command(command=["true"]))
    ).exit_code == 0
    left = {c.id for c in docker_client.containers.list(all=True, ignore_removed=True)}
    assert not frozen & left, "the frozen members were removed"
    await eventually_async(
        lambda: (
            pooled.warm_pools()[0].ready == 2
            and all(c.status == "running" for c in members(docker_client, pooled))
        )
    )


def _hold(monkeypatch, owner, name, *, after=False, when=lambda *args: True):
    """A gate on the async method ``owner.name``: a call for which ``when(*args)`` holds waits
    there (before the real call, or ``after`` it) until the test sets the returned ``released``;
    ``entered`` is set when one waits. The wait is cancellable, as the real call's await is."""
    entered, released = anyio.Event(), anyio.Event()
    real = getattr(owner, name)

    async def held(*args, **kwargs):
        if not when(*args):
            return await real(*args, **kwargs)
        result = await real(*args, **kwargs) if after else None
        entered.set()
        await released.wait()
        return result if after else await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, held)
    return entered, released


async def _cut_at(entered, released, cut):
    """Run ``cut`` once a call waits at the gate; let the call go once ``cut`` waits in turn
    (a stop waits for the start it cancelled, which may be shielded at the gate)."""
    with anyio.fail_after(120):
        await entered.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(cut)
            await anyio.wait_all_tasks_blocked()
            released.set()


async def test_stopping_starts_while_they_claim_leaves_no_container(
    pooled, docker_client, monkeypatch
):
    """A stop at any moment of a claim (at its member's first answer, or before or after the
    rename that follows the start) removes the unit."""
    from rock_core.rocklet_client import RockletClient

    started = await pooled.start_async(SandboxStartRequest(**KIND))
    await pooled.stop(started.sandbox_id)  # at once: before the start task has run
    runtime = pooled.runtime
    # Each claim held at a gate it passes: in the rename after the start (before and after
    # Docker's), then at the claimed member's first answer; the stop comes while it waits there.
    cuts = [
        (runtime, "assign", False, lambda *args: True),
        (runtime, "assign", True, lambda *args: True),
        (RockletClient, "is_alive", False, lambda client, *a: client.sandbox_id == sandbox_id),
    ]
    for owner, method, after, when in cuts:
        await eventually_async(lambda: pooled.warm_pools()[0].ready >= 1, what="a member ready")
        sandbox_id = f"claim-cut-{method}-{after}-{time.monotonic_ns()}"
        with monkeypatch.context() as patch:
            entered, released = _hold(patch, owner, method, after=after, when=when)
            await pooled.start_async(SandboxStartRequest(**KIND, sandbox_id=sandbox_id))
            await _cut_at(entered, released, lambda: pooled.stop(sandbox_id))
    await eventually_async(
        lambda: all(
            c.name == c.labels.get(LABEL_POOL_MEMBER)
            for c in engine_containers(docker_client, pooled)
        )
    )


async def test_a_claim_under_a_taken_name_runs_under_its_pool_name(pooled, docker_client, caplog):
    """The claimed member is renamed after its sandbox once the sandbox runs; when another
    container holds that name, the sandbox runs on under its pool member's name, the other
    container untouched, and the engine still knows, stops and removes it by its unit."""
    squatter = docker_client.containers.create(
        IMAGE, name="taken-name", labels={"rock.test": "squatter"}
    )
    try:
        status = await pooled.start(SandboxStartRequest(**KIND, sandbox_id="taken-name"))
        assert status.state is State.RUNNING
        result = await pooled.rocklet("taken-name").execute(Command(command=["true"]))
        assert result.exit_code == 0
        await eventually_async(
            lambda: "keeps its pool name" in caplog.text, what="the failed rename logged"
        )
        assert docker_client.containers.get("taken-name").id == squatter.id
        unit_id = pooled.get_record("taken-name").unit_id
        assert docker_client.containers.get(unit_id).name.startswith("rock-pool-")
        await pooled.stop("taken-name")
        await eventually_async(
            lambda: (
                not docker_client.containers.list(
                    all=True, filters={"id": unit_id}, ignore_removed=True
                )
            ),
            what="the claimed unit removed at its stop",
        )
        assert docker_client.containers.get("taken-name").id == squatter.id
    finally:
        squatter.remove(force=True)
    await eventually_async(lambda: pooled.warm_pools()[0].ready == 2)


async def test_resize_and_remove_a_pool(pooled, docker_client):
    await pooled.set_warm_pool(SandboxStartRequest(**KIND), 1)
    await eventually_async(lambda: len(members(docker_client, pooled)) == 1)
    assert pooled.warm_pools()[0].size == 1
    await pooled.set_warm_pool(SandboxStartRequest(**KIND), 0)
    await eventually_async(lambda: members(docker_client, pooled) == [])
    assert pooled.warm_pools() == []
    status = await pooled.start(SandboxStartRequest(**KIND))
    assert status.phases["docker_run"].message == "docker run success"


async def test_removing_a_pool_while_its_members_start_leaves_nothing(docker_client, monkeypatch):
    """Members cut short at any point of their start (create, start, first answer) are removed."""
    from rock_core.rocklet_client import RockletClient

    async with SandboxManager(EngineConfig()) as engine:
        # At once, then held at each gate a member's start passes: before and after Docker's
        # create (a unit made as the removal came, its handle never returned), after the
        # container's start, and at the member's first answer.
        await engine.set_warm_pool(SandboxStartRequest(**KIND), 2)
        await engine.set_warm_pool(SandboxStartRequest(**KIND), 0)
        await eventually_async(lambda: engine_containers(docker_client, engine) == [], timeout=30)
        runtime = engine.runtime
        cuts = [
            (runtime, "create", False),
            (runtime, "create", True),
            (runtime, "start", True),
            (RockletClient, "probe", False),
        ]
        for owner, method, after in cuts:
            with monkeypatch.context() as patch:
                entered, released = _hold(patch, owner, method, after=after)
                await engine.set_warm_pool(SandboxStartRequest(**KIND), 2)
                await _cut_at(
                    entered,
                    released,
                    lambda: engine.set_warm_pool(SandboxStartRequest(**KIND), 0),
                )
            await eventually_async(
                lambda: engine_containers(docker_client, engine) == [], timeout=30
            )
        assert engine.warm_pools() == []


async def test_a_pool_of_an_image_that_cannot_be_pulled_reports_why(docker_client):
    config = EngineConfig(warm_pools=[{"image": "rock-test/does-not-exist:404", "size": 2}])
    async with SandboxManager(config) as engine:
        (status,) = await engine.wait_warm(timeout=120)
        assert status.ready == 0 and status.failures >= 1
        assert "Failed to pull image rock-test/does-not-exist:404" in status.last_error
        assert engine_containers(docker_client, engine) == []


@pytest.mark.parametrize(
    ("pool", "field"),
    [
        ({**KIND, "memory": "8x", "size": 1}, "memory"),
        ({**KIND, "size": -1}, "size"),
        ({**KIND}, "size"),
        ({**KIND, "size": 1, "colour": "red"}, "colour"),
        ({**KIND, "size": 1, "pull": "always"}, "pull"),
    ],
)
def test_bad_pool_settings_name_the_field(pool, field):
    with pytest.raises(InvalidParameter, match=field) as failure:
        EngineConfig(warm_pools=[pool])
    assert "warm_pools[0]" in failure.value.message


async def test_set_warm_pool_refuses_what_the_engine_would_refuse(pooled):
    with pytest.raises(InvalidParameter, match="cpus: 64 is above the maximum"):
        await pooled.set_warm_pool(SandboxStartRequest(image=IMAGE, cpus=64), 1)
    with pytest.raises(InvalidParameter, match="size"):
        await pooled.set_warm_pool(SandboxStartRequest(**KIND), -3)
    with pytest.raises(InvalidParameter, match="pull: 'always'") as failure:
        await pooled.set_warm_pool(SandboxStartRequest(**KIND, pull="always"), 1)
    assert failure.value.field == "pull"


async def test_stale_members_of_an_earlier_run_are_removed(docker_client):
    owner = f"test-owner-{time.time_ns()}"
    config = EngineConfig(
        warm_pools=[{**KIND, "size": 1}], remove_on_close=False, reap_orphans=False
    )
    async with SandboxManager(config, owner=owner) as first:
        await first.wait_warm(timeout=120)
        claimed = await first.start(SandboxStartRequest(**KIND))
    try:
        assert members(docker_client, first) == [], "idle members do not outlive their engine"
        assert docker_client.containers.get(claimed.sandbox_id).status == "running", (
            "sandboxes do (remove_on_close=False)"
        )
        # An engine killed before it could clean up leaves a member behind; make one the same way.
        name = f"rock-pool-stale{time.time_ns()}"
        stale = docker_client.containers.run(
            IMAGE,
            ["sleep", "600"],
            name=name,
            detach=True,
            labels={
                "rock.engine": "rock",
                "rock.owner": owner,
                "rock.engine_id": "gone",
                LABEL_POOL: "pool-x",
                LABEL_POOL_MEMBER: name,
            },
        )
        async with SandboxManager(
            EngineConfig(remove_on_close=False, reap_orphans=False), owner=owner
        ):
            # Removed in the background, so that starts never wait for it.
            await eventually_async(
                lambda: (
                    not docker_client.containers.list(
                        all=True, filters={"id": stale.id}, ignore_removed=True
                    )
                )
            )
            # A claimed member is a sandbox, not a stale member: it stays.
            assert docker_client.containers.get(claimed.sandbox_id).status == "running"
    finally:
        for container in docker_client.containers.list(
            all=True, filters={"label": f"rock.owner={owner}"}, ignore_removed=True
        ):
            container.remove(force=True)


async def test_refills_wait_while_ordinary_starts_are_queued(docker_client):
    """With one start slot, a claim's refill starts only after the queued ordinary starts have run."""
    config = EngineConfig(warm_pools=[{**KIND, "size": 1}], max_concurrent_starts=1)
    async with SandboxManager(config) as engine:
        await engine.wait_warm(timeout=120)
        (first,) = members(docker_client, engine)
        statuses = []

        async def start(kind):
            statuses.append(await engine.start(SandboxStartRequest(**kind)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(start, KIND)
            for _ in range(3):
                tg.start_soon(start, OTHER_KIND)
        await eventually_async(lambda: engine.warm_pools()[0].ready == 1)
        (refill,) = members(docker_client, engine)
        assert refill.id != first.id
        created = {c.name: c.attrs["Created"] for c in engine_containers(docker_client, engine)}
        cold = [
            created[s.sandbox_id]
            for s in statuses
            if s.phases["docker_run"].message == "docker run success"
        ]
        assert len(cold) == 3
        assert created[refill.name] > max(cold), "the refill waited for the queued starts"


def test_the_readme_way_an_embedded_sdk_process_with_a_warm_pool(docker_client, tmp_path):
    """README "Warm pools": configure_embedded_driver(EngineConfig(warm_pools=[...])), then plain SDK code."""
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, time
        from rock_core.engine.config import EngineConfig
        from rock.sdk import configure_embedded_driver, get_embedded_driver
        from rock.sdk.sandbox.client import Sandbox
        from rock.sdk.sandbox.config import SandboxConfig

        configure_embedded_driver(EngineConfig(warm_pools=[{{"image": {IMAGE!r}, "memory": "256m", "cpus": 0.5, "size": 2}}]))
        engine = get_embedded_driver()
        engine.start()
        engine.call_blocking(engine.manager.wait_warm, 120)

        async def main():
            sandbox = Sandbox(SandboxConfig(image={IMAGE!r}, memory="256m", cpus=0.5))
            await sandbox.start()
            status = await sandbox.get_status()
            print(status.status["docker_run"].message.split(" pool-")[0])
            await sandbox.stop()

        asyncio.run(main())
    """)
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "claimed from warm pool"
    left = eventually_empty(
        lambda: docker_client.containers.list(
            all=True, filters={"label": "rock.pool"}, ignore_removed=True
        )
    )
    assert [c.name for c in left] == [], "the process's engine removed its pool at exit"


async def test_each_claimed_member_keeps_a_secret_of_its_own(pooled):
    """A member's rocklet secret is made for it alone; the sandbox that claims it takes it over,
    and no other sandbox's secret opens it."""
    a = await pooled.start(SandboxStartRequest(**KIND))
    b = await pooled.start(SandboxStartRequest(**KIND))
    assert a.phases["docker_run"].message.startswith("claimed") and b.phases[
        "docker_run"
    ].message.startswith("claimed")
    token_a, token_b = (
        pooled.get_record(a.sandbox_id).rocklet_token,
        pooled.get_record(b.sandbox_id).rocklet_token,
    )
    assert token_a and token_b and token_a != token_b
    assert pooled.get_record(a.sandbox_id).security["rocklet_auth"] is True
    body = {"command": "true", "shell": True}
    async with httpx.AsyncClient(timeout=30) as http:
        url_b = f"http://127.0.0.1:{b.port_mapping[22555]}/execute"
        assert (
            await http.post(url_b, json=body, headers={TOKEN_HEADER: token_a})
        ).status_code == 401
        assert (await http.post(url_b, json=body)).status_code == 401
        assert (
            await http.post(url_b, json=body, headers={TOKEN_HEADER: token_b})
        ).status_code == 200
    # And the engine's own calls carry the right one.
    assert (await pooled.rocklet(a.sandbox_id).execute(Command(command=["true"]))).exit_code == 0
