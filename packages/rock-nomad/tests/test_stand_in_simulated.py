"""The stand-in Nomad with simulated tasks (``simulate_tasks``): allocations run after their
start latency without Docker, their ports answer as a rocklet, and a stop ends them."""

from __future__ import annotations

import json
import time

import httpx

from rock_nomad.testing import StandInNomad


def _job(job_id: str) -> dict:
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Networks": [
                        {"Mode": "host", "DynamicPorts": [{"Label": "rocklet", "To": 22555}]}
                    ],
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "docker",
                            "Config": {"image": "not-pulled:anywhere"},
                            "Resources": {"CPU": 100, "MemoryMB": 128},
                        }
                    ],
                }
            ],
        }
    }


def _alloc(http: httpx.Client, job_id: str, status: str) -> dict:
    for _ in range(200):
        allocs = http.get(f"/v1/job/{job_id}/allocations").json()
        if allocs and allocs[0]["ClientStatus"] == status:
            return http.get(f"/v1/allocation/{allocs[0]['ID']}").json()
        time.sleep(0.05)
    raise AssertionError(f"{job_id}: no allocation became {status}: {allocs}")


def test_a_simulated_task_runs_without_docker_and_its_port_answers_as_a_rocklet():
    with (
        StandInNomad(nodes=2, simulate_tasks=(0.1, 0.2)) as nomad,
        httpx.Client(base_url=nomad.address, timeout=10) as http,
    ):
        assert http.post("/v1/jobs", json=_job("sim-1")).status_code == 200
        alloc = _alloc(http, "sim-1", "running")
        events = [e["Type"] for e in alloc["TaskStates"]["t"]["Events"]]
        assert events == ["Received", "Task Setup", "Started"]
        (port,) = alloc["AllocatedResources"]["Shared"]["Ports"]
        rocklet = f"http://{port['HostIP']}:{port['Value']}"
        assert httpx.get(f"{rocklet}/is_alive", timeout=10).status_code == 200

        assert http.delete("/v1/job/sim-1").status_code == 200
        done = _alloc(http, "sim-1", "complete")
        events = [e["Type"] for e in done["TaskStates"]["t"]["Events"]]
        assert events[-3:] == ["Killing", "Terminated", "Killed"]
        try:
            httpx.get(f"{rocklet}/is_alive", timeout=5)
        except httpx.ConnectError:
            pass
        else:
            raise AssertionError("the stopped task's port still answers")
        assert nomad._docker is None  # the simulated nodes never opened a Docker client


def test_a_node_made_ineligible_between_placements_takes_no_more_until_eligible_again():
    # Placement remembers which nodes a kind of job may run on until the node table changes:
    # a node turned ineligible (or eligible again) after jobs of the same kind were placed
    # counts at the very next placement.
    with (
        StandInNomad(nodes=2, simulate_tasks=(30, 30), algorithm="spread") as nomad,
        httpx.Client(base_url=nomad.address, timeout=10) as http,
    ):
        first, other = (n["ID"] for n in nomad.nodes())
        for i in range(2):  # spread: one on each node
            assert http.post("/v1/jobs", json=_job(f"before-{i}")).status_code == 200
        assert {_alloc(http, f"before-{i}", "pending")["NodeID"] for i in range(2)} == {
            first,
            other,
        }
        ineligible = {"NodeID": first, "Eligibility": "ineligible"}
        assert http.post(f"/v1/node/{first}/eligibility", json=ineligible).status_code == 200
        for i in range(3):
            assert http.post("/v1/jobs", json=_job(f"while-{i}")).status_code == 200
            placed = _alloc(http, f"while-{i}", "pending")
            assert placed["NodeID"] == other
            assert placed["Metrics"]["NodesEvaluated"] == 1
        eligible = {"NodeID": first, "Eligibility": "eligible"}
        assert http.post(f"/v1/node/{first}/eligibility", json=eligible).status_code == 200
        assert http.post("/v1/jobs", json=_job("after")).status_code == 200
        placed = _alloc(http, "after", "pending")
        assert placed["NodeID"] == first  # the emptier node, eligible again
        assert placed["Metrics"]["NodesEvaluated"] == 2


def test_an_allocation_event_carries_the_allocation_as_read_less_its_job():
    # Nomad's allocation events carry the allocation without its job; the stand-in encodes
    # what placement gave it once, and each event the rest: the event is the whole of it.
    with (
        StandInNomad(nodes=1, simulate_tasks=(0.1, 0.2)) as nomad,
        httpx.Client(base_url=nomad.address, timeout=10) as http,
    ):
        assert http.post("/v1/jobs", json=_job("told")).status_code == 200
        alloc = _alloc(http, "told", "running")
        told = []
        topics = [("topic", "Allocation:*"), ("index", "1")]
        with http.stream("GET", "/v1/event/stream", params=topics) as stream:
            for line in stream.iter_lines():
                frame = json.loads(line) if line.strip() else {}
                for event in frame.get("Events") or []:
                    told.append(event["Payload"]["Allocation"])
                if told and told[-1]["ModifyIndex"] == alloc["ModifyIndex"]:
                    break
        assert [a["ClientStatus"] for a in told] == ["pending", "pending", "running"]
        assert told[-1] == {**alloc, "Job": None}
        assert all(a["AllocatedResources"] == alloc["AllocatedResources"] for a in told)
        assert all(a["Metrics"] == alloc["Metrics"] for a in told)


def test_a_node_holds_what_each_placement_took_until_one_is_purged():
    # A node's use is counted on as allocations are placed (not walked again each time): the
    # third job that does not fit is refused for memory, and placed once room is freed.
    with (
        StandInNomad(nodes=1, node_memory=300, simulate_tasks=(30, 30)) as nomad,
        httpx.Client(base_url=nomad.address, timeout=10) as http,
    ):
        for job_id in ("first", "second"):
            assert http.post("/v1/jobs", json=_job(job_id)).status_code == 200
            _alloc(http, job_id, "pending")
        out = http.post("/v1/jobs", json=_job("third")).json()
        ev = http.get(f"/v1/evaluation/{out['EvalID']}").json()
        for _ in range(200):
            if ev["Status"] == "complete":
                break
            time.sleep(0.05)
            ev = http.get(f"/v1/evaluation/{out['EvalID']}").json()
        assert ev["FailedTGAllocs"]["g"]["DimensionExhausted"] == {"memory": 1}
        assert http.delete("/v1/job/first", params={"purge": "true"}).status_code == 200
        assert _alloc(http, "third", "pending")["ClientStatus"] == "pending"
