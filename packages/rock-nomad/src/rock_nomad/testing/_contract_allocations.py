"""The Nomad API contract, part 2: an allocation's life with a real container, the failures
a real container produces, and placement failures (see :mod:`rock_nomad.testing.contract`)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from typing import Any

import httpx

from rock_nomad.testing._contract_support import (
    GUARD_SECONDS,
    ArtifactServer,
    ContractFixtures,
    NomadApi,
    NomadTarget,
    event_types,
    events,
    fetch_when_listening,
    new_job_id,
    sandbox_job,
)

__all__ = ["AllocationsContract"]


class AllocationsContract(ContractFixtures):
    """Allocations, task failures, placement (mixed into :class:`~rock_nomad.testing.contract.NomadApiContract`)."""

    # -- an allocation's life --------------------------------------------------------------------

    def test_a_sandbox_job_runs_with_its_artifact_and_its_port(
        self, api: NomadApi, nomad_target: NomadTarget, artifacts: ArtifactServer
    ) -> None:
        payload = uuid.uuid4().hex.encode() * 100
        url, checksum = artifacts.add("payload.bin", payload)
        job_id = new_job_id()
        job = sandbox_job(
            job_id,
            nomad_target.image,
            command="python3",
            args=["-m", "http.server", "${NOMAD_PORT_http}", "--directory", "${NOMAD_TASK_DIR}"],
            ports=["http"],
            meta={"sandbox_id": job_id},
            artifacts=[{"GetterSource": url, "GetterOptions": {"checksum": checksum}}],
        )
        out = api.register(job)
        ev = api.wait_eval(
            out["EvalID"], lambda e: e["Status"] == "complete", "the evaluation completed"
        )
        assert not ev["FailedTGAllocs"] and not ev["BlockedEval"]
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] != "pending", "the allocation started"
        )
        assert alloc["ClientStatus"] == "running", event_types(alloc)
        assert alloc["DesiredStatus"] == "run"
        assert alloc["Name"] == f"{job_id}.sandbox[0]"
        assert alloc["JobID"] == job_id and alloc["NodeID"] and alloc["NodeName"]
        assert alloc["TaskStates"]["main"]["State"] == "running"
        types = event_types(alloc)
        assert types[0] == "Received" and "Task Setup" in types and "Started" in types
        assert "Downloading Artifacts" in types
        ports = alloc["AllocatedResources"]["Shared"]["Ports"]
        assert [p["Label"] for p in ports] == ["http"]
        port = ports[0]
        assert 20000 <= port["Value"] <= 32000 and port["HostIP"]
        assert alloc["AllocatedResources"]["Tasks"]["main"]["Memory"]["MemoryMB"] == 64
        assert alloc["AllocatedResources"]["Tasks"]["main"]["Cpu"]["CpuShares"] == 100
        served = fetch_when_listening(f"http://{port['HostIP']}:{port['Value']}/payload.bin")
        assert served == payload
        stub = api.ok("GET", f"/v1/job/{job_id}/allocations")[0]
        assert stub["ID"] == alloc["ID"]
        assert (
            stub.get("AllocatedResources") is None
        )  # list stubs carry no resources: GET the alloc
        assert (
            api.wait_job(job_id, lambda j: j["Status"] == "running", "the job ran")["Status"]
            == "running"
        )
        summary = api.ok("GET", f"/v1/job/{job_id}/summary")
        assert summary["Summary"]["sandbox"]["Running"] == 1

    def test_deregister_stops_the_job_and_purge_removes_it(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        api.register(sandbox_job(job_id, nomad_target.image))
        running = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] != "pending", "the allocation started"
        )
        assert running["ClientStatus"] == "running", event_types(running)
        out = api.ok("DELETE", f"/v1/job/{job_id}")
        assert out["EvalID"]
        api.wait_eval(
            out["EvalID"],
            lambda e: e["Status"] == "complete",
            "the deregister evaluation completed",
        )
        job = api.wait_job(job_id, lambda j: j["Status"] == "dead", "the job died")
        assert job["Stop"] is True
        stopped = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] == "complete", "the allocation completed"
        )
        assert stopped["ID"] == running["ID"]
        assert stopped["DesiredStatus"] == "stop"
        assert stopped["DesiredDescription"] == "alloc not needed due to job update"
        assert stopped["TaskStates"]["main"]["State"] == "dead"
        assert stopped["TaskStates"]["main"]["Failed"] is False
        types = event_types(stopped)
        assert types.index("Killing") < types.index("Killed") == len(types) - 1
        purged = api.ok(
            "DELETE", f"/v1/job/{job_id}", params={"purge": "True"}
        )  # Go's ParseBool, as python-nomad sends it
        assert purged["JobModifyIndex"] > 0
        missing = api.get(f"/v1/job/{job_id}")
        assert missing.status_code == 404 and "job not found" in missing.text

    def test_a_blocking_query_returns_when_the_job_changes(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        out = api.register(sandbox_job(job_id, nomad_target.image, count=0))
        api.wait_eval(
            out["EvalID"], lambda e: e["Status"] == "complete", "the evaluation completed"
        )
        first = api.get(
            f"/v1/job/{job_id}"
        )  # settled: nothing changes the job until the deregister
        index = int(first.headers["X-Nomad-Index"])
        assert index == first.json()["ModifyIndex"]
        unchanged = api.get(f"/v1/job/{job_id}", params={"index": index, "wait": "100ms"})
        assert unchanged.status_code == 200 and int(unchanged.headers["X-Nomad-Index"]) == index
        answers: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: answers.append(
                api.get(f"/v1/job/{job_id}", params={"index": index, "wait": "60s"})
            )
        )
        waiter.start()
        api.ok("DELETE", f"/v1/job/{job_id}")
        waiter.join(GUARD_SECONDS)
        assert answers, "the blocking query never returned"
        assert int(answers[0].headers["X-Nomad-Index"]) > index
        assert answers[0].json()["Stop"] is True

    def test_the_event_stream_reports_a_jobs_registration_and_its_allocation(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        seen: dict[str, dict[str, Any]] = {}
        params = httpx.QueryParams([("topic", f"Job:{job_id}"), ("topic", f"Allocation:{job_id}")])
        with api.http.stream("GET", "/v1/event/stream", params=params, timeout=30) as stream:
            assert stream.status_code == 200
            api.register(
                sandbox_job(
                    job_id,
                    nomad_target.image,
                    command="sh",
                    args=["-c", "exit 0"],
                    job_type="batch",
                )
            )
            deadline = time.monotonic() + GUARD_SECONDS
            for line in stream.iter_lines():
                frame = json.loads(line) if line.strip() else {}
                for event in frame.get("Events") or []:
                    assert event["Index"] == frame["Index"]
                    seen.setdefault(event["Type"], event)
                if (
                    "JobRegistered" in seen
                    and "AllocationUpdated" in seen
                    or time.monotonic() > deadline
                ):
                    break
        job_event = seen["JobRegistered"]
        assert job_event["Topic"] == "Job" and job_event["Key"] == job_id
        assert job_event["Payload"]["Job"]["ID"] == job_id
        alloc_event = seen["AllocationUpdated"]
        assert (
            alloc_event["Topic"] == "Allocation"
            and alloc_event["Payload"]["Allocation"]["JobID"] == job_id
        )
        assert job_id in alloc_event["FilterKeys"]
        # Nomad leaves the job out of an allocation's event ("to help keep size of alloc event
        # down", nomad/state/events.go): a follower of thousands of starts reads no job twice.
        assert alloc_event["Payload"]["Allocation"]["Job"] is None

    # -- failures a real container produces ------------------------------------------------------

    def test_a_task_exit_code_fails_the_allocation_without_restart(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        api.register(
            sandbox_job(
                job_id, nomad_target.image, command="sh", args=["-c", "exit 3"], job_type="batch"
            )
        )
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task ended"
        )
        assert alloc["ClientStatus"] == "failed", event_types(alloc)
        state = alloc["TaskStates"]["main"]
        assert state["State"] == "dead" and state["Failed"] is True
        terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
        assert terminated and terminated[-1]["ExitCode"] == 3
        assert event_types(alloc)[-1] == "Not Restarting"
        assert (
            api.wait_job(job_id, lambda j: j["Status"] == "dead", "the job died")["Status"]
            == "dead"
        )

    def test_a_batch_task_that_exits_zero_completes(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        api.register(
            sandbox_job(
                job_id, nomad_target.image, command="sh", args=["-c", "exit 0"], job_type="batch"
            )
        )
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task ended"
        )
        assert alloc["ClientStatus"] == "complete", event_types(alloc)
        assert alloc["TaskStates"]["main"]["Failed"] is False

    def test_a_task_over_its_memory_is_oom_killed(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        hog = "b = bytearray(400 * 1024 * 1024); import time; time.sleep(60)"
        api.register(
            sandbox_job(job_id, nomad_target.image, command="python3", args=["-c", hog], memory=32)
        )
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task ended"
        )
        assert alloc["ClientStatus"] == "failed", event_types(alloc)
        terminated = [e for e in events(alloc) if e["Type"] == "Terminated"]
        assert terminated, event_types(alloc)
        assert terminated[-1]["ExitCode"] == 137
        said = (terminated[-1].get("Details") or {}).get("oom_killed") == "true"
        assert said or "OOM" in terminated[-1]["DisplayMessage"], terminated[-1]

    def test_an_image_that_cannot_be_pulled_is_a_driver_failure(self, api: NomadApi) -> None:
        job_id = new_job_id()
        image = f"rock-test/absent-{uuid.uuid4().hex[:8]}:0"
        api.register(sandbox_job(job_id, image))
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task failed"
        )
        assert alloc["ClientStatus"] == "failed"
        failure = [e for e in events(alloc) if e["Type"] == "Driver Failure"]
        assert failure, event_types(alloc)
        assert image in failure[-1]["DriverError"] and failure[-1]["FailsTask"] is True

    def test_an_artifact_with_the_wrong_checksum_fails_the_task(
        self, api: NomadApi, nomad_target: NomadTarget, artifacts: ArtifactServer
    ) -> None:
        url, _ = artifacts.add("tampered.bin", b"what was served")
        wrong = "sha256:" + hashlib.sha256(b"what was meant").hexdigest()
        job_id = new_job_id()
        api.register(
            sandbox_job(
                job_id,
                nomad_target.image,
                artifacts=[{"GetterSource": url, "GetterOptions": {"checksum": wrong}}],
            )
        )
        alloc = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task failed"
        )
        assert alloc["ClientStatus"] == "failed"
        failure = [e for e in events(alloc) if e["Type"] == "Failed Artifact Download"]
        assert failure, event_types(alloc)
        assert failure[-1]["DownloadError"] and failure[-1]["FailsTask"] is True
        assert "Started" not in event_types(alloc)

    # -- placement failures ------------------------------------------------------------------------

    def test_a_job_that_fits_nowhere_is_blocked_with_the_reason(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        out = api.register(sandbox_job(job_id, nomad_target.image, memory=64 * 1024 * 1024))
        ev = api.wait_eval(
            out["EvalID"], lambda e: e["Status"] == "complete", "the evaluation completed"
        )
        metric = ev["FailedTGAllocs"]["sandbox"]
        assert metric["NodesEvaluated"] > 0
        assert metric["NodesExhausted"] > 0
        assert (metric["DimensionExhausted"] or {}).get("memory", 0) > 0
        assert ev["BlockedEval"]
        blocked = api.ok("GET", f"/v1/evaluation/{ev['BlockedEval']}")
        assert blocked["Status"] == "blocked" and blocked["TriggeredBy"] == "queued-allocs"
        assert blocked["PreviousEval"] == ev["ID"]
        assert api.ok("GET", f"/v1/job/{job_id}")["Status"] == "pending"
        assert api.ok("GET", f"/v1/job/{job_id}/allocations") == []
        assert api.ok("GET", f"/v1/job/{job_id}/summary")["Summary"]["sandbox"]["Queued"] == 1

    def test_a_missing_driver_filters_every_node(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        out = api.register(sandbox_job(new_job_id(), nomad_target.image, driver="no-such-driver"))
        ev = api.wait_eval(
            out["EvalID"], lambda e: e["Status"] == "complete", "the evaluation completed"
        )
        metric = ev["FailedTGAllocs"]["sandbox"]
        assert (metric["ConstraintFiltered"] or {}).get("missing drivers", 0) > 0
        assert metric["NodesFiltered"] == metric["NodesEvaluated"] > 0
