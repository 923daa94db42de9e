"""The nomad runtime under rock's engine on a 3-node stand-in Nomad (issue #12 point 4): sandboxes
spread across nodes, a sandbox that fits nowhere fails with Nomad's reason, a lost node's
sandboxes become ``stopped`` ("node lost") with nothing left behind, a wrong ACL token is a
clear error naming the setting, and a restarted engine finds its sandboxes again.

Each test runs rock's engine (:class:`SandboxManager`) with the ``nomad`` runtime built from its
plugin table, real containers on the local Docker engine, and rock's rocklet downloaded by the
stand-in's nodes as a checksummed artifact.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.errors import InternalServerRockError, RockError
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.states import State
from rock_core.testing import eventually_async, eventually_empty
from rock_nomad._job import secret_path
from rock_nomad.testing import StandInNomad
from rock_nomad.testing.fixtures import stand_in_nomad_factory  # noqa: F401 - fixture

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5, "disk": None}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _jobs(nomad: StandInNomad) -> list[dict[str, Any]]:
    return httpx.get(
        f"{nomad.address}/v1/jobs", headers={"X-Nomad-Token": nomad.management_token}
    ).json()


def _variables(nomad: StandInNomad) -> list[dict[str, Any]]:
    return httpx.get(
        f"{nomad.address}/v1/vars", headers={"X-Nomad-Token": nomad.management_token}
    ).json()


def _running_allocs(nomad: StandInNomad) -> list[dict[str, Any]]:
    allocs = httpx.get(
        f"{nomad.address}/v1/allocations", headers={"X-Nomad-Token": nomad.management_token}
    ).json()
    return [a for a in allocs if a["ClientStatus"] in ("pending", "running")]


async def test_sandboxes_spread_across_the_nodes_and_show_their_node(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=3, algorithm="spread")
    addresses = {n["Name"]: n["Address"] for n in nomad.nodes()}
    async with engine_on(nomad) as engine:
        started = [engine.start(SandboxStartRequest(**SMALL)) for _ in range(3)]
        statuses = []
        async with anyio.create_task_group() as tg:

            async def one(coro: Any) -> None:
                statuses.append(await coro)

            for coro in started:
                tg.start_soon(one, coro)
        assert {s.state for s in statuses} == {State.RUNNING}
        assert engine.runtime.feed.frames > 0, "the starts did not follow Nomad's event stream"
        assert sorted(s.record.host_name for s in statuses) == sorted(addresses)
        for status in statuses:
            record = status.record
            assert record.host_ip == addresses[record.host_name]
            # SDK -> engine -> rocklet on that node's address: a command runs in the sandbox.
            result = await engine.rocklet(record.sandbox_id).execute(
                Command(command=["sh", "-c", "echo $NOMAD_ALLOC_ID"])
            )
            assert result.exit_code == 0 and result.stdout.strip()
            await engine.stop(record.sandbox_id)
    assert eventually_empty(lambda: _running_allocs(nomad)) == []
    assert eventually_empty(nomad.containers) == []


async def test_a_sandbox_that_fits_nowhere_fails_with_nomads_reason(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=3, node_memory=1024)
    async with engine_on(nomad) as engine:
        with pytest.raises(InternalServerRockError) as caught:
            await engine.start(SandboxStartRequest(**{**SMALL, "memory": "2g"}))
        message = str(caught.value)
        assert "Nomad could not place the sandbox" in message
        assert "dimension 'memory' exhausted on 3 node(s)" in message
        sandbox_id = caught.value.sandbox_id
        status = await engine.get_status(sandbox_id, include_all_states=True)
        assert status.record.phases["docker_run"].status.value == "failed"
        assert "memory" in status.record.phases["docker_run"].message
    assert _jobs(nomad) == [], (
        "the unplaceable job was left registered (its blocked evaluation would place it later)"
    )
    assert _variables(nomad) == [], "the unplaceable sandbox's secret was left in a Nomad Variable"


async def test_a_lost_nodes_sandbox_is_stopped_node_lost_and_nothing_is_left(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=3)
    async with engine_on(nomad) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL, auto_delete_seconds=3600))
        sandbox_id, node = status.sandbox_id, status.record.host_name
        before = {c.id for c in nomad.containers()}
        assert before
        nomad.lose_node(node)

        async def stopped() -> Any:
            got = await engine.get_status(sandbox_id, include_all_states=True)
            return got if got.state is State.STOPPED else None

        got = await eventually_async(stopped, what="the sandbox stopped")
        assert "node lost" in (got.record.reason or ""), got.record.reason
        assert node in got.record.reason
        # Nomad placed no replacement elsewhere, and the job is deregistered: nothing runs.
        assert eventually_empty(lambda: _running_allocs(nomad)) == []
        assert all(job["Stop"] or job["Status"] == "dead" for job in _jobs(nomad))
        assert eventually_empty(nomad.containers) == []


async def test_a_wrong_token_is_a_clear_error_naming_the_setting(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1, acl=True)
    async with engine_on(nomad, token="not-a-token-nomad-knows") as engine:
        with pytest.raises(RockError) as caught:
            await engine.start(SandboxStartRequest(**SMALL))
    message = str(caught.value)
    assert "ACL token not found" in message
    assert "plugins.nomad.token" in message
    # A token that may submit jobs but not write Variables cannot place the sandbox's secret.
    async with engine_on(nomad, token=nomad.add_token(variables=("read", "list"))) as engine:
        with pytest.raises(RockError) as caught:
            await engine.start(SandboxStartRequest(**SMALL))
    assert "Permission denied" in str(caught.value) and "variables write" in str(caught.value)
    assert "/v1/var/nomad/jobs/" in str(caught.value)
    # One that may write Variables but not submit jobs: the registration fails and the secret
    # it wrote first is deleted again.
    async with engine_on(
        nomad, token=nomad.add_token(write=False, variables=("write", "destroy"))
    ) as engine:
        with pytest.raises(RockError) as caught:
            await engine.start(SandboxStartRequest(**SMALL))
    assert "POST /v1/jobs" in str(caught.value) and "plugins.nomad.token" in str(caught.value)
    assert _variables(nomad) == [], (
        "a failed registration left the sandbox's secret in a Nomad Variable"
    )
    async with engine_on(nomad, token=nomad.management_token) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        assert status.state is State.RUNNING
        await engine.stop(status.sandbox_id)


async def test_a_restarted_engine_finds_its_sandboxes_from_their_jobs(
    stand_in_nomad_factory, engine_on, tmp_path
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=2)
    store = str(tmp_path / "rock.db")
    async with engine_on(nomad, store=store, keep=True) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        sandbox_id = status.sandbox_id
    async with engine_on(nomad, store=store) as engine:
        again = await engine.get_status(sandbox_id)
        assert again.state is State.RUNNING
        assert again.record.host_name == status.record.host_name
        result = await engine.rocklet(sandbox_id).execute(Command(command=["echo", "back"]))
        assert result.stdout.strip() == "back"
        await engine.stop(sandbox_id)


async def test_what_nomad_cannot_do_is_refused_naming_the_runtime(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    from rock_core.errors import InvalidParameter

    nomad = stand_in_nomad_factory(nodes=1)
    async with engine_on(nomad) as engine:
        for network in ("none", "host"):
            with pytest.raises(
                InvalidParameter,
                match=r"network: expected one of bridge, got '%s' \(what runtime 'nomad' offers\)"
                % network,
            ):
                await engine.start(SandboxStartRequest(**SMALL, network=network))
        status = await engine.start(SandboxStartRequest(**SMALL))
        await engine.stop(status.sandbox_id)
        with pytest.raises(RockError, match="nomad"):
            await engine.restart(status.sandbox_id)
    assert _jobs(nomad) == [] or all(job["Stop"] for job in _jobs(nomad))


async def test_a_silent_event_stream_only_slows_starts_down(
    stand_in_nomad_factory, engine_on, monkeypatch
) -> None:  # noqa: F811
    """The stream is a help: a start that hears nothing of its job reads Nomad after poll_after."""
    from rock_nomad._events import EventFeed

    monkeypatch.setattr(EventFeed, "_frame", lambda self, line: None)
    nomad = stand_in_nomad_factory(nodes=1)
    async with engine_on(nomad, poll_after=0.2) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        assert status.state is State.RUNNING
        assert engine.runtime.feed.connected and engine.runtime.feed.frames == 0
        await engine.stop(status.sandbox_id)


async def test_the_secret_is_in_the_jobs_variable_and_nowhere_in_the_job(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    """Anyone with read-job reads the job, its allocations and its events: none of them holds the
    sandbox's secret. The job's template reads it from the job's own Nomad Variable, the rocklet
    gets it, commands run, and a wrong secret is refused by the rocklet."""
    nomad = stand_in_nomad_factory(nodes=2, acl=True)
    # A token with read-job and no Variables capability (Nomad's read-job alone gives none).
    read_job = nomad.add_token(write=False, variables=(), name="read-job only")
    reader = httpx.Client(base_url=nomad.address, headers={"X-Nomad-Token": read_job})
    async with engine_on(nomad, token=nomad.management_token) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        record = status.record
        secret = record.rocklet_token
        assert secret and status.state is State.RUNNING
        job_id = record.unit_id
        # What read-job shows: the job, every version of it, its allocations (each with a copy of
        # the job), its evaluations, its summary, and the event stream's record of all of them.
        shown = [reader.get(f"/v1/job/{job_id}")]
        assert shown[0].status_code == 200 and shown[0].json()["ID"] == job_id
        template = shown[0].json()["TaskGroups"][0]["Tasks"][0]["Templates"][0]["EmbeddedTmpl"]
        assert f'nomadVar "{secret_path(job_id)}"' in template
        allocs = reader.get(f"/v1/job/{job_id}/allocations").json()
        shown += [reader.get(f"/v1/allocation/{a['ID']}") for a in allocs]
        shown += [
            reader.get(f"/v1/job/{job_id}/{what}")
            for what in ("allocations", "evaluations", "summary")
        ]
        shown += [reader.get("/v1/jobs", params={"meta": "true"}), reader.get("/v1/allocations")]
        with reader.stream("GET", "/v1/event/stream", params={"index": "1"}, timeout=10) as events:
            for line in events.iter_lines():
                if '"Topic":"Node"' not in line and line.strip() != "{}" and line.strip():
                    assert secret not in line, "the event stream carries the sandbox's secret"
                    if job_id in line and '"AllocationUpdated"' in line:
                        break
        assert len(allocs) == 1
        for response in shown:
            assert response.status_code == 200, response.text
            assert secret not in response.text, f"{response.request.url} shows the sandbox's secret"
        # The secret is the job's Variable, which a read-job token may not read.
        assert nomad.variable(secret_path(job_id))["Items"] == {"token": secret}
        assert reader.get(f"/v1/var/{secret_path(job_id)}").status_code == 403
        # The sandbox works end to end: a command runs through its rocklet, which has the secret.
        result = await engine.rocklet(record.sandbox_id).execute(
            Command(command=["sh", "-c", "echo ran; env | grep -c ROCK_ROCKLET_TOKEN || true"])
        )
        assert result.exit_code == 0 and result.stdout.split() == [
            "ran",
            "0",
        ]  # commands do not inherit it
        # The rocklet where the node publishes it (the engine's port_mapping is its own forward).
        unit = await engine.runtime.inspect(
            UnitHandle(runtime="nomad", unit_id=job_id, sandbox_id=record.sandbox_id)
        )
        assert unit.rocklet_host == record.host_ip
        wrong = RockletClient(
            engine.http, unit.rocklet_host, unit.rocklet_port, record.sandbox_id, token="not-it"
        )
        with pytest.raises(InternalServerRockError, match="refused .*secret for it is wrong"):
            await wrong.execute(Command(command=["echo", "no"]))
        await engine.stop(
            record.sandbox_id
        )  # deleted at once (no auto_delete_seconds): the job purged
        await engine.delete(record.sandbox_id)

        async def secret_gone() -> bool:
            return nomad.variable(secret_path(job_id)) is None

        await eventually_async(secret_gone, what="the deleted sandbox's Variable went")
        assert _variables(nomad) == []
    reader.close()
