"""What the stand-in Nomad server does beyond the shared contract: several nodes on their own
loopback addresses, placement across them, capacity and blocked evaluations, injected faults
(image pull failure, task exit, OOM kill, node lost), restart and reschedule policies, logs,
ACL rights, and cleaning up every container it made (also a crashed stand-in's).

Every test runs real containers on the local Docker engine and talks to the stand-in over HTTP.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from rock_core.testing import eventually
from rock_nomad.testing import LABEL_OWNER, LABEL_SERVER, StandInNomad
from rock_nomad.testing.contract import (
    GUARD_SECONDS,
    ArtifactServer,
    NomadApi,
    NomadTarget,
    event_types,
    events,
    new_job_id,
    sandbox_job,
)
from rock_nomad.testing.fixtures import stand_in_nomad, stand_in_nomad_factory  # noqa: F401 - fixtures
from rock_nomad.testing.server import owner_tag

pytestmark = pytest.mark.docker

IMAGE = "rock-test/python:3.11"
SERVE = ["-m", "http.server", "${NOMAD_PORT_http}"]


@pytest.fixture
def connect() -> Iterator[Callable[[StandInNomad], NomadApi]]:
    made: list[NomadApi] = []

    def make(nomad: StandInNomad, token: str | None = None) -> NomadApi:
        api = NomadApi(
            NomadTarget(
                address=nomad.address,
                token=token or (nomad.management_token if nomad.acl else None),
            )
        )
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def running(alloc: dict[str, Any]) -> bool:
    return alloc["ClientStatus"] != "pending"


def ended(alloc: dict[str, Any]) -> bool:
    return alloc["ClientStatus"] in ("complete", "failed", "lost")


def test_nodes_spread_tasks_each_on_its_own_loopback_address(
    stand_in_nomad_factory, connect
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=3, algorithm="spread")
    api = connect(nomad)
    addresses = {n["ID"]: n["Address"] for n in nomad.nodes()}
    assert sorted(addresses.values()) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE, command="python3", args=SERVE, ports=["http"], count=3)
    job["TaskGroups"][0]["Tasks"][0]["Config"]["labels"] = [
        {"team": "a", "rock.sandbox_id": "must-not-be-copied"}
    ]
    api.register(job)
    allocs = api.wait(
        f"/v1/job/{job_id}/allocations", lambda a: len(a) == 3 and all(map(running, a)), "3 started"
    )
    assert {a["ClientStatus"] for a in allocs} == {"running"}
    assert {a["NodeID"] for a in allocs} == set(addresses)
    for stub in allocs:
        alloc = api.ok("GET", f"/v1/allocation/{stub['ID']}")
        (port,) = alloc["AllocatedResources"]["Shared"]["Ports"]
        assert port["HostIP"] == addresses[alloc["NodeID"]]
        container = nomad.container_of(alloc["ID"], "main")
        bindings = container.attrs["HostConfig"]["PortBindings"][f"{port['Value']}/tcp"]
        assert bindings == [{"HostIp": port["HostIP"], "HostPort": str(port["Value"])}]
        assert container.attrs["HostConfig"]["Memory"] == 64 * 1024 * 1024
        assert container.attrs["HostConfig"]["CpuShares"] == 100
        labels = container.labels
        assert (
            labels[LABEL_SERVER] == nomad.server_id
            and labels["com.hashicorp.nomad.alloc_id"] == alloc["ID"]
        )
        assert labels["team"] == "a" and not [k for k in labels if k.startswith("rock.")]
        eventually(
            lambda: _answers(f"http://{port['HostIP']}:{port['Value']}/"),
            what="the task's server answered",
            timeout=GUARD_SECONDS,
        )


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_binpack_fills_the_fullest_node_that_fits(stand_in_nomad_factory, connect) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=2, algorithm="binpack")
    api = connect(nomad)
    job_id = new_job_id()
    api.register(sandbox_job(job_id, IMAGE, count=2))
    allocs = api.wait(f"/v1/job/{job_id}/allocations", lambda a: len(a) == 2, "2 placed")
    assert len({a["NodeID"] for a in allocs}) == 1


def test_an_ineligible_node_takes_no_new_allocations(stand_in_nomad_factory, connect) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=2, algorithm="binpack")
    api = connect(nomad)
    first, other = (n["ID"] for n in nomad.nodes())
    out = api.ok(
        "POST", f"/v1/node/{first}/eligibility", json={"NodeID": first, "Eligibility": "ineligible"}
    )
    assert out["NodeModifyIndex"] > 0
    assert api.ok("GET", f"/v1/node/{first}")["SchedulingEligibility"] == "ineligible"
    job_id = new_job_id()
    api.register(sandbox_job(job_id, IMAGE, count=2))
    allocs = api.wait(f"/v1/job/{job_id}/allocations", lambda a: len(a) == 2, "2 placed")
    assert {a["NodeID"] for a in allocs} == {other}
    bad = api.request("POST", f"/v1/node/{first}/eligibility", json={"Eligibility": "sometimes"})
    assert bad.status_code == 400


def test_a_slow_scheduler_and_slow_clients_show_their_pending_states(
    stand_in_nomad_factory, connect
) -> None:  # noqa: F811
    slow_scheduler = stand_in_nomad_factory(nodes=1, scheduler_delay=3600)
    api = connect(slow_scheduler)
    out = api.register(sandbox_job(new_job_id(), IMAGE))
    assert api.ok("GET", f"/v1/evaluation/{out['EvalID']}")["Status"] == "pending"

    slow_client = stand_in_nomad_factory(nodes=1, start_delay=3600)
    api = connect(slow_client)
    job_id = new_job_id()
    api.register(sandbox_job(job_id, IMAGE))
    placed = api.wait_alloc(job_id, lambda a: True, "placed")
    assert placed["ClientStatus"] == "pending" and event_types(placed) == ["Received"]
    assert (
        api.ok("GET", f"/v1/job/{job_id}")["Status"] == "running"
    )  # an alloc that is not terminal
    api.ok("DELETE", f"/v1/job/{job_id}")
    killed = api.wait_alloc(job_id, ended, "stopped before it started")
    assert killed["ClientStatus"] == "complete" and event_types(killed) == ["Received", "Killed"]
    assert slow_client.containers() == []


def test_a_full_cluster_blocks_and_freed_room_places_the_job(
    stand_in_nomad_factory, connect
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=2, node_memory=200)
    api = connect(nomad)
    first, second, third = new_job_id("a"), new_job_id("b"), new_job_id("c")
    for job_id in (first, second):
        api.register(sandbox_job(job_id, IMAGE, memory=150))
    placed = {
        job_id: api.wait_alloc(job_id, running, "placed and started") for job_id in (first, second)
    }
    assert placed[first]["NodeID"] != placed[second]["NodeID"]
    out = api.register(sandbox_job(third, IMAGE, memory=150))
    ev = api.wait_eval(out["EvalID"], lambda e: e["Status"] == "complete", "evaluated")
    metric = ev["FailedTGAllocs"]["sandbox"]
    assert metric["NodesExhausted"] == 2 and metric["DimensionExhausted"] == {"memory": 2}
    assert metric["NodesAvailable"] == {"dc1": 2}
    api.ok("DELETE", f"/v1/job/{first}", params={"purge": "true"})
    alloc = api.wait_alloc(third, running, "the blocked job placed")
    assert alloc["ClientStatus"] == "running" and alloc["NodeID"] == placed[first]["NodeID"]
    blocked = api.wait_eval(
        ev["BlockedEval"], lambda e: e["Status"] != "blocked", "the blocked eval done"
    )
    assert blocked["Status"] == "complete"
    assert api.ok("GET", f"/v1/job/{third}")["Status"] == "running"


def test_a_lost_node_loses_its_allocations_and_nomad_replaces_them_unless_told_not_to(
    stand_in_nomad_factory,
    connect,  # noqa: F811
) -> None:
    nomad = stand_in_nomad_factory(nodes=3, algorithm="spread")
    api = connect(nomad)
    kept_lost = new_job_id("kept-lost")
    job = sandbox_job(kept_lost, IMAGE)
    job["TaskGroups"][0]["PreventRescheduleOnLost"] = True
    api.register(job)
    before = api.wait_alloc(kept_lost, running, "started")
    assert nomad.container_of(before["ID"], "main") is not None
    assert nomad.lose_node(before["NodeName"]) == [before["ID"]]
    lost = api.wait_alloc(kept_lost, lambda a: a["ClientStatus"] == "lost", "lost")
    assert lost["ID"] == before["ID"] and not lost["NextAllocation"]
    assert lost["DesiredStatus"] == "stop"
    assert lost["DesiredDescription"] == "alloc is lost since its node is down"
    assert api.wait_job(kept_lost, lambda j: j["Status"] == "dead", "dead")["Status"] == "dead"
    eventually(
        lambda: nomad.container_of(before["ID"], "main") is None,
        what="the lost task's container removed",
        timeout=GUARD_SECONDS,
    )
    down = api.ok("GET", f"/v1/node/{before['NodeID']}")
    assert down["Status"] == "down"

    replaced = new_job_id("replaced")
    api.register(sandbox_job(replaced, IMAGE))
    first = api.wait_alloc(replaced, running, "started")
    assert first["NodeID"] != before["NodeID"]
    nomad.lose_node(first["NodeID"])
    second = api.wait_alloc(
        replaced, lambda a: a["ID"] != first["ID"] and running(a), "replacement started"
    )
    assert second["PreviousAllocation"] == first["ID"] and second["ClientStatus"] == "running"
    assert second["NodeID"] not in (first["NodeID"], before["NodeID"])
    old = api.ok("GET", f"/v1/allocation/{first['ID']}")
    assert old["ClientStatus"] == "lost" and old["NextAllocation"] == second["ID"]
    eventually(
        lambda: nomad.container_of(first["ID"], "main") is None,
        what="the lost task's container removed",
        timeout=GUARD_SECONDS,
    )
    nomad.restore_node(before["NodeName"])
    assert api.ok("GET", f"/v1/node/{before['NodeID']}")["Status"] == "ready"


def test_injected_exit_and_oom_and_pull_failure(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    exits, ooms = new_job_id("exit"), new_job_id("oom")
    api.register(sandbox_job(exits, IMAGE))
    api.register(sandbox_job(ooms, IMAGE))
    for job_id in (exits, ooms):
        assert api.wait_alloc(job_id, running, "started")["ClientStatus"] == "running"
    stand_in_nomad.exit_task(api.ok("GET", f"/v1/job/{exits}/allocations")[0]["ID"], 7)
    stand_in_nomad.oom_kill(api.ok("GET", f"/v1/job/{ooms}/allocations")[0]["ID"])
    exited = api.wait_alloc(exits, ended, "failed")
    assert exited["ClientStatus"] == "failed"
    assert [e["ExitCode"] for e in events(exited) if e["Type"] == "Terminated"] == [7]
    oomed = api.wait_alloc(ooms, ended, "failed")
    terminated = [e for e in events(oomed) if e["Type"] == "Terminated"]
    assert terminated[-1]["ExitCode"] == 137 and terminated[-1]["Details"]["oom_killed"] == "true"
    assert "OOM Killed" in terminated[-1]["DisplayMessage"]

    stand_in_nomad.fail_image_pull("rock-test/python:*", "toomanyrequests: injected")
    pulls = new_job_id("pull")
    api.register(sandbox_job(pulls, IMAGE))
    failed = api.wait_alloc(pulls, ended, "failed")
    failure = [e for e in events(failed) if e["Type"] == "Driver Failure"]
    assert failure and "toomanyrequests: injected" in failure[-1]["DriverError"]
    assert "Started" not in event_types(failed)
    stand_in_nomad.clear_faults()


def test_unknown_driver_config_fails_validation_and_system_jobs_are_refused(
    stand_in_nomad, connect
) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE)
    job["TaskGroups"][0]["Tasks"][0]["Config"]["no_such_option"] = True
    api.register(job)
    alloc = api.wait_alloc(job_id, ended, "failed")
    failure = [e for e in events(alloc) if e["Type"] == "Failed Validation"]
    assert failure and "no_such_option" in failure[-1]["ValidationError"]
    system = sandbox_job(new_job_id(), IMAGE, job_type="system")
    response = api.request("POST", "/v1/jobs", json={"Job": system})
    assert response.status_code == 500 and "not supported by the stand-in" in response.text


def test_restart_policy_restarts_the_task_then_gives_up(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE)
    job["TaskGroups"][0]["RestartPolicy"] = {
        "Attempts": 1,
        "Interval": 3600 * 10**9,
        "Delay": 0,
        "Mode": "fail",
    }
    api.register(job)
    alloc = api.wait_alloc(job_id, running, "started")
    stand_in_nomad.exit_task(alloc["ID"], 2)
    again = api.wait_alloc(
        job_id,
        lambda a: (
            a["TaskStates"]["main"]["Restarts"] == 1
            and a["TaskStates"]["main"]["State"] == "running"
        ),
        "restarted",
    )
    assert again["ID"] == alloc["ID"] and "Restarting" in event_types(again)
    stand_in_nomad.exit_task(alloc["ID"], 2)
    done = api.wait_alloc(job_id, ended, "failed")
    assert done["ClientStatus"] == "failed" and event_types(done)[-1] == "Not Restarting"


def test_reschedule_policy_places_a_linked_replacement(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE)
    job["TaskGroups"][0]["ReschedulePolicy"] = {
        "Attempts": 1,
        "Interval": 3600 * 10**9,
        "Delay": 0,
        "DelayFunction": "constant",
        "Unlimited": False,
    }
    api.register(job)
    first = api.wait_alloc(job_id, running, "started")
    stand_in_nomad.exit_task(first["ID"], 1)
    second = api.wait_alloc(
        job_id, lambda a: a["ID"] != first["ID"] and running(a), "replacement started"
    )
    assert second["PreviousAllocation"] == first["ID"]
    assert [e["PrevAllocID"] for e in second["RescheduleTracker"]["Events"]] == [first["ID"]]
    old = api.ok("GET", f"/v1/allocation/{first['ID']}")
    assert old["ClientStatus"] == "failed" and old["NextAllocation"] == second["ID"]
    assert old["DesiredDescription"] == "alloc was rescheduled because it failed"
    stand_in_nomad.exit_task(second["ID"], 1)
    last = api.wait_alloc(job_id, ended, "the replacement failed")
    assert last["ID"] == second["ID"] and not last["NextAllocation"]  # attempts used up


def test_a_reschedule_delay_waits_in_a_follow_up_evaluation(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE)
    job["TaskGroups"][0]["ReschedulePolicy"] = {
        "Attempts": 1,
        "Interval": 3600 * 10**9,
        "Delay": 10**9,
        "DelayFunction": "constant",
        "Unlimited": False,
    }
    api.register(job)
    first = api.wait_alloc(job_id, running, "started")
    stand_in_nomad.exit_task(first["ID"], 1)
    failed = api.wait(
        f"/v1/allocation/{first['ID']}", lambda a: a["FollowupEvalID"] != "", "a follow-up planned"
    )
    follow_up = api.ok("GET", f"/v1/evaluation/{failed['FollowupEvalID']}")
    assert (
        follow_up["TriggeredBy"] == "alloc-failure"
        and follow_up["WaitUntil"] != "0001-01-01T00:00:00Z"
    )
    second = api.wait_alloc(
        job_id, lambda a: a["ID"] != first["ID"] and running(a), "replacement started"
    )
    assert second["PreviousAllocation"] == first["ID"] and second["EvalID"] == follow_up["ID"]


def test_stopping_an_allocation_places_a_replacement(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    api.register(sandbox_job(job_id, IMAGE))
    first = api.wait_alloc(job_id, running, "started")
    out = api.ok("POST", f"/v1/allocation/{first['ID']}/stop")
    assert out["EvalID"]
    second = api.wait_alloc(
        job_id, lambda a: a["ID"] != first["ID"] and running(a), "replacement started"
    )
    assert second["PreviousAllocation"] == first["ID"]
    old = api.wait(
        f"/v1/allocation/{first['ID']}",
        lambda a: a["ClientStatus"] == "complete",
        "old one stopped",
    )
    assert old["DesiredStatus"] == "stop"


def test_a_changed_job_scales_in_place_and_replaces_on_a_task_change(
    stand_in_nomad, connect
) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    job = sandbox_job(job_id, IMAGE)
    api.register(job)
    first = api.wait_alloc(job_id, running, "started")
    job["TaskGroups"][0]["Count"] = 2
    api.register(job)
    allocs = api.wait(
        f"/v1/job/{job_id}/allocations", lambda a: len(a) == 2 and all(map(running, a)), "scaled"
    )
    assert first["ID"] in {a["ID"] for a in allocs}
    assert {a["JobVersion"] for a in allocs} == {1}
    job["TaskGroups"][0]["Count"] = 1
    job["TaskGroups"][0]["Tasks"][0]["Config"]["args"] = ["3601"]
    api.register(job)
    allocs = api.wait(
        f"/v1/job/{job_id}/allocations",
        lambda a: (
            sum(x["DesiredStatus"] == "run" and running(x) and x["JobVersion"] == 2 for x in a) == 1
            and all(x["ClientStatus"] == "complete" for x in a if x["JobVersion"] != 2)
        ),
        "replaced",
    )
    old = [a for a in allocs if a["JobVersion"] != 2]
    assert len(old) == 2 and {a["DesiredDescription"] for a in old} == {
        "alloc not needed due to job update"
    }


def test_task_environment_and_logs(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    job_id = new_job_id()
    script = (
        'echo "meta=$NOMAD_META_sandbox_id alloc=$NOMAD_ALLOC_ID dir=$NOMAD_TASK_DIR '
        'secret=$(cat /secrets/token) greeting=$GREETING"; echo oops >&2; sleep 3600'
    )
    job = sandbox_job(
        job_id, IMAGE, command="sh", args=["-c", script], meta={"sandbox_id": "sbx-1"}
    )
    job["TaskGroups"][0]["Tasks"][0]["Templates"] = [
        {"EmbeddedTmpl": "s3cret", "DestPath": "secrets/token", "Perms": "0600"},
        {
            "EmbeddedTmpl": 'GREETING=hi-{{ env "NOMAD_JOB_ID" }}',
            "DestPath": "local/env",
            "Envvars": True,
        },
    ]
    api.register(job)
    alloc = api.wait_alloc(job_id, running, "started")

    def stdout() -> str:
        response = api.get(
            f"/v1/client/fs/logs/{alloc['ID']}",
            params={"task": "main", "type": "stdout", "plain": "true"},
        )
        return response.text if response.status_code == 200 else ""

    text = eventually(stdout, what="the task's output", timeout=GUARD_SECONDS)
    assert (
        text.strip()
        == f"meta=sbx-1 alloc={alloc['ID']} dir=/local secret=s3cret greeting=hi-{job_id}"
    )
    stderr = api.get(
        f"/v1/client/fs/logs/{alloc['ID']}",
        params={"task": "main", "type": "stderr", "plain": "true"},
    )
    assert stderr.text.strip() == "oops"
    tail = api.get(
        f"/v1/client/fs/logs/{alloc['ID']}",
        params={"task": "main", "type": "stderr", "plain": "true", "origin": "end", "offset": 3},
    )
    assert tail.text == "ps\n"
    missing = api.get(
        f"/v1/client/fs/logs/{alloc['ID'][:-4]}beef", params={"task": "main", "type": "stdout"}
    )
    assert missing.status_code == 404


def test_a_rocklet_delivered_as_an_artifact_serves_on_its_nodes_address(
    stand_in_nomad, connect, tmp_path
) -> None:  # noqa: F811
    """The way the nomad runtime will run a sandbox: rock's rocklet zipapp as a checksummed
    artifact, its secret in a template under /secrets, its port published on the node."""
    from rock_core.rocklet.zipapp import build_zipapp

    served = tmp_path / "served"
    served.mkdir()
    build_zipapp(served / "rocklet.pyz", cache_dir=tmp_path / "cache")
    artifacts = ArtifactServer(served, "127.0.0.1")
    try:
        url, checksum = (
            f"{artifacts.url}/rocklet.pyz",
            "sha256:" + hashlib.sha256((served / "rocklet.pyz").read_bytes()).hexdigest(),
        )
        api = connect(stand_in_nomad)
        job_id = new_job_id("sandbox")
        token = uuid.uuid4().hex
        job = sandbox_job(
            job_id,
            IMAGE,
            command="python3",
            ports=["rocklet"],
            args=["${NOMAD_TASK_DIR}/rocklet.pyz", "--port", "${NOMAD_PORT_rocklet}"],
            artifacts=[{"GetterSource": url, "GetterOptions": {"checksum": checksum}}],
        )
        job["TaskGroups"][0]["Tasks"][0]["Templates"] = [
            {
                "EmbeddedTmpl": f"ROCK_ROCKLET_TOKEN={token}\n",
                "DestPath": "secrets/rocklet.env",
                "Envvars": True,
                "Perms": "0600",
            }
        ]
        api.register(job)
        alloc = api.wait_alloc(job_id, running, "the rocklet's task started")
        assert alloc["ClientStatus"] == "running", event_types(alloc)
        (port,) = alloc["AllocatedResources"]["Shared"]["Ports"]
        rocklet = f"http://{port['HostIP']}:{port['Value']}"
        assert port["HostIP"] == next(
            n["Address"] for n in stand_in_nomad.nodes() if n["ID"] == alloc["NodeID"]
        )
        eventually(
            lambda: _answers(f"{rocklet}/is_alive"),
            what="the rocklet answered",
            timeout=GUARD_SECONDS,
        )
        refused = httpx.post(f"{rocklet}/execute", json={"command": "true"})
        assert refused.status_code in (401, 403)
        done = httpx.post(
            f"{rocklet}/execute",
            json={"command": "echo $NOMAD_JOB_ID", "shell": True},
            headers={"X-Rock-Rocklet-Token": token},
            timeout=60,
        )
        assert done.status_code == 200, done.text
        assert done.json()["stdout"].strip() == job_id
    finally:
        artifacts.close()


def test_archives_are_unpacked_and_file_mode_artifacts_renamed(
    stand_in_nomad, connect, tmp_path
) -> None:  # noqa: F811
    import io
    import tarfile

    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "bundle.tar.gz", "w:gz") as tar:
        data = b"from the archive\n"
        info = tarfile.TarInfo("a/b.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (served / "plain.txt").write_bytes(b"renamed\n")
    artifacts = ArtifactServer(served, "127.0.0.1")
    try:
        api = connect(stand_in_nomad)
        job_id = new_job_id()
        api.register(
            sandbox_job(
                job_id,
                IMAGE,
                command="sh",
                args=["-c", "cat /local/a/b.txt /local/renamed.txt; ls /local"],
                job_type="batch",
                artifacts=[
                    {"GetterSource": f"{artifacts.url}/bundle.tar.gz"},
                    {
                        "GetterSource": f"{artifacts.url}/plain.txt",
                        "GetterMode": "file",
                        "RelativeDest": "local/renamed.txt",
                    },
                ],
            )
        )
        alloc = api.wait_alloc(job_id, ended, "the task ended")
        assert alloc["ClientStatus"] == "complete", event_types(alloc)
        out = api.get(
            f"/v1/client/fs/logs/{alloc['ID']}",
            params={"task": "main", "type": "stdout", "plain": "true"},
        )
        assert out.text.split("\n") == ["from the archive", "renamed", "a", "renamed.txt", ""]
    finally:
        artifacts.close()


def test_a_read_only_token_cannot_write(stand_in_nomad_factory, connect) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1, acl=True)
    reader = connect(nomad, token=nomad.add_token(write=False))
    assert reader.get("/v1/jobs").status_code == 200
    refused = reader.request("POST", "/v1/jobs", json={"Job": sandbox_job(new_job_id(), IMAGE)})
    assert refused.status_code == 403 and refused.text == "Permission denied"
    writer = connect(nomad, token=nomad.add_token())
    assert (
        writer.request(
            "POST", "/v1/jobs", json={"Job": sandbox_job(new_job_id(), IMAGE, count=0)}
        ).status_code
        == 200
    )


def test_variables_are_checked_against_the_tokens_capabilities(
    stand_in_nomad_factory, connect
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1, acl=True)
    path = f"nomad/jobs/{new_job_id('var')}"
    admin = connect(nomad)
    assert admin.put_variable(path, {"token": "kept"}).status_code == 200
    reader = connect(
        nomad, token=nomad.add_token(write=False)
    )  # a coarse read policy: read and list
    assert reader.get(f"/v1/var/{path}").json()["Items"] == {"token": "kept"}
    assert [v["Path"] for v in reader.get("/v1/vars").json()] == [path]
    refused = reader.request("PUT", f"/v1/var/{path}", json={"Items": {"token": "changed"}})
    assert refused.status_code == 403 and refused.text == "Permission denied"
    assert reader.request("DELETE", f"/v1/var/{path}").status_code == 403
    writer = connect(
        nomad, token=nomad.add_token(variables=("write",))
    )  # may write, not read or destroy
    assert writer.get(f"/v1/var/{path}").status_code == 403
    assert writer.get("/v1/vars").status_code == 403
    conflict = writer.request(
        "PUT", f"/v1/var/{path}", params={"cas": 0}, json={"Items": {"token": "x"}}
    )
    assert (
        conflict.status_code == 409 and conflict.json()["Items"] is None
    )  # who may not read sees no items
    assert writer.request("DELETE", f"/v1/var/{path}").status_code == 403
    assert nomad.variable(path)["Items"] == {"token": "kept"}
    job_only = connect(
        nomad, token=nomad.add_token(variables=())
    )  # read-job and submit-job, no variables
    assert job_only.get("/v1/jobs").status_code == 200
    assert job_only.get(f"/v1/var/{path}").status_code == 403


def test_a_task_reads_only_its_own_jobs_variables(stand_in_nomad, connect) -> None:  # noqa: F811
    api = connect(stand_in_nomad)
    other = f"nomad/jobs/{new_job_id('other')}"
    assert api.put_variable(other, {"token": "not yours"}).status_code == 200
    job_id = new_job_id()
    own = f"nomad/jobs/{job_id}"
    assert api.put_variable(f"{own}/sandbox", {"group": "g"}).status_code == 200
    assert api.put_variable(f"{own}/sandbox/main", {"task": "t"}).status_code == 200
    job = sandbox_job(
        job_id, IMAGE, command="sh", job_type="batch", args=["-c", 'test "$OWN" = "g t" || exit 3']
    )
    job["TaskGroups"][0]["Tasks"][0]["Templates"] = [
        {
            "EmbeddedTmpl": f'OWN={{{{ with nomadVar "{own}/sandbox" }}}}{{{{ .group }}}}{{{{ end }}}} '
            f'{{{{- with nomadVar "{own}/sandbox/main" }}}} {{{{ .task }}}}{{{{ end }}}}\n',
            "DestPath": "local/own.env",
            "Envvars": True,
        }
    ]
    api.register(job)
    done = api.wait_alloc(
        job_id, lambda a: a["ClientStatus"] in ("complete", "failed"), "the task ended"
    )
    assert done["ClientStatus"] == "complete", events(done)
    thief_id = new_job_id()
    thief = sandbox_job(thief_id, IMAGE)
    thief["TaskGroups"][0]["Tasks"][0]["Templates"] = [
        {
            "EmbeddedTmpl": f'STOLEN={{{{ with nomadVar "{other}" }}}}{{{{ .token }}}}{{{{ end }}}}\n',
            "DestPath": "secrets/stolen.env",
            "Envvars": True,
        }
    ]
    api.register(thief)
    failed = api.wait_alloc(
        thief_id, lambda a: a["ClientStatus"] in ("failed", "running", "complete"), "the task ended"
    )
    assert failed["ClientStatus"] == "failed", event_types(failed)
    setup = [e for e in events(failed) if e["Type"] == "Setup Failure"]
    assert (
        setup
        and "Permission denied" in setup[-1]["SetupError"]
        and other in setup[-1]["SetupError"]
    )
    assert "Started" not in event_types(failed)


def test_the_template_language_the_stand_in_renders() -> None:
    from rock_nomad.testing._template import TemplateError, VariableMissing, render

    items = {"a/b": {"user": "rock", "token": "t0k"}}

    def variable(path: str, namespace: str) -> dict[str, str] | None:
        return items.get(path) if namespace == "ns" else {"ns": namespace}

    def out(text: str, **kw: Any) -> str:
        return render(text, env={"HOME": "/root"}, variable=variable, namespace="ns", **kw)

    assert out('home={{ env "HOME" }} none={{env "NOPE"}}.') == "home=/root none=."
    assert (
        out('{{ with nomadVar "a/b" }}{{ .user }}:{{ .token }}:{{ .absent }}{{ end }}')
        == "rock:t0k:<no value>"
    )
    assert out('x  {{- with nomadVar "a/b" -}}  {{ .user }}  {{- end -}}  y') == "xrocky"
    assert out('{{ with nomadVar "a/b@other" }}{{ .ns }}{{ end }}') == "other"
    assert (
        out('[[ with nomadVar "a/b" ]][[ .user ]][[ end ]] {{ kept }}', left="[[", right="]]")
        == "rock {{ kept }}"
    )
    with pytest.raises(VariableMissing) as missing:
        out('T={{ with nomadVar "c/d" }}{{ .token }}{{ end }}')
    assert (missing.value.path, missing.value.namespace) == ("c/d", "ns")
    for unsupported in (
        '{{ key "consul/key" }}',
        "{{ .user }}",
        '{{ with nomadVar "a/b" }}',
        "{{ end }}",
        '{{ range nomadVarList "a" }}{{ end }}',
    ):
        with pytest.raises(TemplateError):
            out(unsupported)


def test_each_node_has_docker_networks_of_its_own(stand_in_nomad_factory, connect) -> None:  # noqa: F811
    """``network_mode`` as on a node with its own Docker engine: unset is the node's ``bridge``
    (Docker's defaults: inter-container traffic on), a network its operator made has the options
    it was made with, one the node lacks fails the task as Docker's 404 does, and containers of
    different nodes never share a network."""
    nomad = stand_in_nomad_factory(
        nodes=3,
        algorithm="spread",  # three jobs, one a node
        node_networks={"isolated": {"com.docker.network.bridge.enable_icc": "false"}},
    )
    api = connect(nomad)
    jobs = {}
    for mode in ("", "isolated", "isolated"):
        job_id = new_job_id("net")
        job = sandbox_job(job_id, IMAGE)
        if mode:
            job["TaskGroups"][0]["Tasks"][0]["Config"]["network_mode"] = mode
        api.register(job)
        jobs[job_id] = api.wait_alloc(job_id, running, "started")
    networks = {}
    for job_id, alloc in jobs.items():
        assert alloc["ClientStatus"] == "running", alloc
        container = nomad.container_of(alloc["ID"], "main")
        [name] = container.attrs["NetworkSettings"]["Networks"]
        networks[job_id] = (alloc["NodeName"], name)
    made = {n["Name"]: n for n in nomad.networks()}
    for node, name in networks.values():
        assert name in made and made[name]["Labels"]["nomad-stand-in.node"] == node
        icc = made[name]["Options"].get("com.docker.network.bridge.enable_icc", "true")
        assert icc == (
            "true" if made[name]["Labels"]["nomad-stand-in.network"] == "bridge" else "false"
        )
    isolated = [networks[j] for j in list(jobs)[1:]]
    assert (
        isolated[0][0] != isolated[1][0] and isolated[0][1] != isolated[1][1]
    )  # two nodes: two networks
    missing = new_job_id("net")
    job = sandbox_job(missing, IMAGE)
    job["TaskGroups"][0]["Tasks"][0]["Config"]["network_mode"] = "not-made-here"
    api.register(job)
    failure = [
        e for e in events(api.wait_alloc(missing, ended, "failed")) if e["Type"] == "Driver Failure"
    ]
    assert failure and "network not-made-here not found" in failure[-1]["DriverError"]


def test_close_removes_every_container_and_start_removes_a_crashed_stand_ins(
    docker_client, connect
) -> None:
    crashed = docker_client.containers.create(
        IMAGE,
        command=["sleep", "60"],
        labels={LABEL_OWNER: owner_tag(999_999_999), LABEL_SERVER: "crashed"},
    )
    alive = docker_client.containers.create(
        IMAGE,
        command=["sleep", "60"],
        labels={LABEL_OWNER: owner_tag(), LABEL_SERVER: "another-live-one"},
    )
    crashed_network = docker_client.api.create_network(
        f"nomad-stand-in-crashed-{uuid.uuid4().hex[:8]}",
        labels={LABEL_OWNER: owner_tag(999_999_999), LABEL_SERVER: "crashed"},
    )
    try:
        nomad = StandInNomad(nodes=1, docker_client=docker_client).start()
        try:
            assert _gone(docker_client, crashed.id)
            assert not docker_client.api.networks(ids=[crashed_network["Id"]])
            assert not _gone(
                docker_client, alive.id
            )  # a live stand-in's containers are not ours to remove
            api = connect(nomad)
            for _ in range(2):
                job_id = new_job_id()
                api.register(sandbox_job(job_id, IMAGE))
                api.wait_alloc(job_id, running, "started")
            assert len(nomad.containers()) == 2
            assert len(nomad.networks()) == 1  # the one node's network its tasks joined
        finally:
            nomad.close()
        assert nomad.containers() == []
        assert nomad.networks() == []
        assert not nomad.work_dir.exists()
    finally:
        alive.remove(force=True)
        if not _gone(docker_client, crashed.id):
            crashed.remove(force=True)


def _gone(client, container_id: str) -> bool:
    import docker.errors

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_the_program_serves_until_sigterm_then_cleans_up(docker_client) -> None:
    token = "bench-token"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rock_nomad.testing",
            "--nodes",
            "2",
            "--acl",
            "--token",
            token,
            "--memory",
            "512",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first = process.stdout.readline().strip()
        assert first.startswith("NOMAD_ADDR=http://127.0.0.1:"), first + process.stderr.read()
        assert process.stdout.readline().strip() == f"NOMAD_TOKEN={token}"
        api = NomadApi(NomadTarget(address=first.split("=", 1)[1], token=token))
        nodes = api.ok("GET", "/v1/nodes", params={"resources": "true"})
        assert sorted(n["Address"] for n in nodes) == ["127.0.0.2", "127.0.0.3"]
        assert {n["NodeResources"]["Memory"]["MemoryMB"] for n in nodes} == {512}
        job_id = new_job_id()
        api.register(sandbox_job(job_id, IMAGE))
        alloc = api.wait_alloc(job_id, running, "started")
        assert alloc["ClientStatus"] == "running"
        api.jobs.clear()  # the program's exit removes it
        api.http.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(GUARD_SECONDS) == 0
        assert (
            docker_client.containers.list(
                all=True, filters={"label": f"com.hashicorp.nomad.alloc_id={alloc['ID']}"}
            )
            == []
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
