"""The Nomad API contract: what a rock runtime relies on in Nomad's HTTP API, as pytest tests.

:class:`NomadApiContract` is a test class to subclass with a ``nomad_target`` fixture that
returns a :class:`NomadTarget`. rock-nomad runs it against its stand-in server and, when
``NOMAD_ADDR`` is set, against a real Nomad agent; a client that passes it against the
stand-in may expect the same answers from Nomad. The tests speak plain HTTP (httpx), so they
pin Nomad's wire behaviour and no client library's.

Covered: status and agent endpoints; nodes and their resources; Nomad's plain-text errors and
their codes (400, 403, 404, 405, 500); register, read, deregister and purge; evaluations and
placement failures (``FailedTGAllocs``, blocked evaluations); an allocation's lifecycle with a
real container, its artifact downloaded and checksummed, its port reachable at
``HostIP:Value``; task failures a real container produces (exit code, OOM kill, image pull
failure, checksum mismatch); blocking queries; the event stream; ACL tokens; Nomad Variables
(write, read, list, check-and-set, delete, their errors) and a task's template reading its own
job's Variable (``nomadVar``), waiting for it when it is not there yet.

The target's nodes must have the Docker driver and ``target.image`` (with ``python3`` and
``sh``) present; the test process serves the artifacts on ``target.artifact_host``, which the
nodes must reach (``127.0.0.1`` for a local ``nomad agent -dev``).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

#: How long a contract test waits for one state before it fails. Not a performance bound: a
#: guard so that a broken target fails the test instead of hanging it.
GUARD_SECONDS = 90.0


@dataclass
class NomadTarget:
    """A Nomad API to check: its address, token and what its nodes can run."""

    address: str
    token: str | None = None
    image: str = "rock-test/python:3.11"
    namespace: str = "default"
    artifact_host: str = "127.0.0.1"
    acl: bool = False
    label: str = "nomad"
    extra: dict[str, Any] = field(default_factory=dict)


class NomadApi:
    """A thin HTTP client for the contract: requests, blocking waits, and job cleanup."""

    def __init__(self, target: NomadTarget) -> None:
        self.target = target
        headers = {"X-Nomad-Token": target.token} if target.token else {}
        self.http = httpx.Client(
            base_url=target.address, headers=headers, timeout=GUARD_SECONDS + 30
        )
        self.jobs: set[str] = set()
        self.variables: set[str] = set()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        assert response.status_code == 200, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        return response.json()

    def register(self, job: dict[str, Any], **body: Any) -> dict[str, Any]:
        self.jobs.add(job["ID"])
        answer: dict[str, Any] = self.ok("POST", "/v1/jobs", json={"Job": job, **body})
        return answer

    def purge(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/job/{job_id}", params={"purge": "true"})

    def put_variable(self, path: str, items: dict[str, str], **params: Any) -> httpx.Response:
        """``PUT /v1/var/<path>`` (deleted again when the test ends)."""
        self.variables.add(path)
        return self.request(
            "PUT", f"/v1/var/{path}", params=params, json={"Path": path, "Items": items}
        )

    def close(self) -> None:
        for job_id in self.jobs:
            try:
                self.purge(job_id)
            except httpx.HTTPError:
                pass
        for path in self.variables:
            try:
                self.request("DELETE", f"/v1/var/{path}")
            except httpx.HTTPError:
                pass
        self.http.close()

    def wait(
        self,
        path: str,
        until: Callable[[Any], bool],
        what: str,
        *,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """Blocking queries on ``path`` until ``until(body)`` holds; the body."""
        index = 0
        deadline = time.monotonic() + GUARD_SECONDS
        last: Any = None
        while True:
            response = self.get(path, params={**(params or {}), "index": index, "wait": "5s"})
            if response.status_code == 200:
                last = response.json()
                if until(last):
                    return last
                index = int(response.headers["X-Nomad-Index"])
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what} did not happen within {GUARD_SECONDS:g}s; last answer: {last!r}"
                )
            if response.status_code != 200:
                time.sleep(0.2)

    def wait_alloc(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """The newest allocation of ``job_id`` once ``until`` holds for it (full object)."""

        def newest_ok(allocs: list[dict[str, Any]]) -> bool:
            return bool(allocs) and until(max(allocs, key=lambda a: a["CreateIndex"]))

        allocs = self.wait(f"/v1/job/{job_id}/allocations", newest_ok, f"{what} ({job_id})")
        newest = max(allocs, key=lambda a: a["CreateIndex"])
        answer: dict[str, Any] = self.ok("GET", f"/v1/allocation/{newest['ID']}")
        return answer

    def wait_eval(
        self, eval_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self.wait(f"/v1/evaluation/{eval_id}", until, what)
        return answer

    def wait_job(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self.wait(f"/v1/job/{job_id}", until, what)
        return answer


def new_job_id(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sandbox_job(
    job_id: str,
    image: str,
    *,
    command: str = "sleep",
    args: list[str] | None = None,
    job_type: str = "service",
    memory: int = 64,
    cpu: int = 100,
    ports: list[str] | None = None,
    artifacts: list[dict[str, Any]] | None = None,
    meta: dict[str, str] | None = None,
    driver: str = "docker",
    count: int = 1,
) -> dict[str, Any]:
    """A job shaped as a rock sandbox's: one group of ``count``, one docker task, no restarts,
    no rescheduling, a short kill timeout."""
    config: dict[str, Any] = {
        "image": image,
        "command": command,
        "args": args if args is not None else ["3600"],
    }
    group: dict[str, Any] = {
        "Name": "sandbox",
        "Count": count,
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "EphemeralDisk": {"SizeMB": 10},
        "Tasks": [
            {
                "Name": "main",
                "Driver": driver,
                "Config": config,
                "KillTimeout": 1_000_000_000,
                "Resources": {"CPU": cpu, "MemoryMB": memory},
                "Artifacts": artifacts,
            }
        ],
    }
    if ports:
        config["ports"] = ports
        group["Networks"] = [{"Mode": "host", "DynamicPorts": [{"Label": p} for p in ports]}]
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Meta": meta, "TaskGroups": [group]}


def events(alloc: dict[str, Any], task: str = "main") -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = alloc["TaskStates"][task]["Events"]
    return answer


def event_types(alloc: dict[str, Any], task: str = "main") -> list[str]:
    return [e["Type"] for e in events(alloc, task)]


def is_plain_text(response: httpx.Response) -> bool:
    answer: bool = response.headers.get("content-type", "").startswith("text/plain")
    return answer


class ArtifactServer:
    """Files served over HTTP from a temporary directory, for tasks' ``artifact`` blocks."""

    def __init__(self, root: Path, host: str) -> None:
        self.root = root
        handler = lambda *a, **k: _QuietHandler(*a, directory=str(root), **k)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer((host, 0), handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, name: str, data: bytes) -> tuple[str, str]:
        """Serve ``data`` as ``name``; its URL and ``sha256:<hex>`` checksum."""
        (self.root / name).write_bytes(data)
        return f"{self.url}/{name}", "sha256:" + hashlib.sha256(data).hexdigest()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class NomadApiContract:
    """The contract tests; subclass with a ``nomad_target`` fixture (see the module docstring)."""

    @pytest.fixture
    def api(self, nomad_target: NomadTarget) -> Iterator[NomadApi]:
        client = NomadApi(nomad_target)
        try:
            yield client
        finally:
            client.close()

    @pytest.fixture
    def artifacts(self, nomad_target: NomadTarget, tmp_path: Path) -> Iterator[ArtifactServer]:
        server = ArtifactServer(tmp_path, nomad_target.artifact_host)
        try:
            yield server
        finally:
            server.close()

    # -- status, agent, nodes --------------------------------------------------------------------

    def test_leader_is_a_json_string_and_agent_self_names_the_region(self, api: NomadApi) -> None:
        leader = api.ok("GET", "/v1/status/leader")
        assert isinstance(leader, str) and ":" in leader
        agent = api.ok("GET", "/v1/agent/self")
        assert agent["config"]["Region"] == "global"
        assert agent["config"]["Version"]["Version"]

    def test_nodes_are_ready_with_docker_and_their_resources(self, api: NomadApi) -> None:
        response = api.get("/v1/nodes", params={"resources": "true"})
        assert response.status_code == 200
        assert int(response.headers["X-Nomad-Index"]) > 0
        nodes = [n for n in response.json() if n["Status"] == "ready"]
        assert nodes, response.json()
        for stub in nodes:
            assert stub["SchedulingEligibility"] == "eligible"
            assert stub["Drivers"]["docker"]["Detected"] and stub["Drivers"]["docker"]["Healthy"]
            assert stub["NodeResources"]["Memory"]["MemoryMB"] > 0
            node = api.ok("GET", f"/v1/node/{stub['ID']}")
            assert node["Name"] == stub["Name"]
            assert node["NodeResources"]["Cpu"]["CpuShares"] > 0
            assert node["Attributes"]["kernel.name"] == "linux"
            assert node["Attributes"]["unique.network.ip-address"]
        plain = api.ok("GET", "/v1/nodes")
        assert all(n.get("NodeResources") is None for n in plain)  # only with resources=true

    # -- errors ----------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("path", "text"),
        [
            ("/v1/job/{missing}", "job not found"),
            ("/v1/allocation/{uuid}", "alloc not found"),
            ("/v1/evaluation/{uuid}", "eval not found"),
            ("/v1/node/{uuid}", "node not found"),
        ],
    )
    def test_unknown_objects_are_404_in_plain_text(
        self, api: NomadApi, path: str, text: str
    ) -> None:
        response = api.get(path.format(missing=new_job_id("missing"), uuid=uuid.uuid4()))
        assert response.status_code == 404
        assert is_plain_text(response)
        assert text in response.text

    def test_unknown_path_is_404_and_wrong_method_is_405(self, api: NomadApi) -> None:
        response = api.get("/v1/no-such-endpoint")
        assert response.status_code == 404
        assert api.request("DELETE", "/v1/jobs").status_code == 405
        wrong = api.request("DELETE", "/v1/status/leader")
        assert wrong.status_code == 405
        assert "Invalid method" in wrong.text

    def test_malformed_registrations_are_400_with_nomads_reason(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        job = sandbox_job(job_id, nomad_target.image)
        cases = [
            (api.request("POST", "/v1/jobs", json={"Meta": {}}), "Job must be specified"),
            (
                api.request("POST", "/v1/jobs", json={"Job": {**job, "ID": ""}}),
                "Job ID hasn't been provided",
            ),
            (
                api.request("POST", f"/v1/job/{job_id}-other", json={"Job": job}),
                "Job ID does not match name",
            ),
            (api.request("POST", "/v1/jobs", content=b""), "Request body is empty"),
        ]
        for response, text in cases:
            assert response.status_code == 400, response.text
            assert is_plain_text(response)
            assert text in response.text
        assert api.get(f"/v1/job/{job_id}").status_code == 404

    def test_a_job_that_fails_validation_is_500_with_the_reasons(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job = sandbox_job(new_job_id(), nomad_target.image)
        job["TaskGroups"][0]["RestartPolicy"] = {"Attempts": 0, "Mode": "delay"}
        response = api.request("POST", "/v1/jobs", json={"Job": job})
        assert response.status_code == 500
        assert is_plain_text(response)
        assert "error occurred" in response.text or "errors occurred" in response.text

    def test_bad_blocking_parameters_are_400(self, api: NomadApi) -> None:
        bad_index = api.get("/v1/jobs", params={"index": "x"})
        assert bad_index.status_code == 400 and "Invalid index" in bad_index.text
        bad_wait = api.get("/v1/jobs", params={"index": "1", "wait": "soon"})
        assert bad_wait.status_code == 400 and "Invalid wait time" in bad_wait.text

    def test_an_unknown_region_has_no_path(self, api: NomadApi) -> None:
        response = api.get("/v1/jobs", params={"region": "nowhere"})
        assert response.status_code == 500
        assert "No path to region" in response.text

    def test_registering_into_an_unknown_namespace_is_500(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job = sandbox_job(new_job_id(), nomad_target.image)
        response = api.request(
            "POST",
            "/v1/jobs",
            params={"namespace": f"ns-{uuid.uuid4().hex[:8]}"},
            json={"Job": job},
        )
        assert response.status_code == 500
        assert "nonexistent namespace" in response.text

    def test_unknown_jobs_deregister_fine_and_have_no_allocations(self, api: NomadApi) -> None:
        job_id = new_job_id("missing")
        out = api.ok("DELETE", f"/v1/job/{job_id}", params={"purge": "true"})
        assert out["EvalID"] == ""
        assert api.ok("GET", f"/v1/job/{job_id}/allocations") == []
        assert api.ok("GET", f"/v1/job/{job_id}/evaluations") == []

    # -- register, versions, list ----------------------------------------------------------------

    def test_register_canonicalizes_and_reregister_keeps_the_version(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        job = sandbox_job(
            job_id, nomad_target.image, count=0, meta={"sandbox_id": job_id, "owner": "contract"}
        )
        first = api.register(job)
        assert (
            first["EvalID"]
            and first["JobModifyIndex"] > 0
            and first["Index"] >= first["EvalCreateIndex"]
        )
        stored = api.ok("GET", f"/v1/job/{job_id}")
        assert stored["Namespace"] == nomad_target.namespace and stored["Region"] == "global"
        assert stored["Priority"] == 50 and stored["Version"] == 0 and stored["Stop"] is False
        group = stored["TaskGroups"][0]
        assert group["RestartPolicy"]["Attempts"] == 0 and group["RestartPolicy"]["Mode"] == "fail"
        assert (
            group["ReschedulePolicy"]["Attempts"] == 0
            and group["ReschedulePolicy"]["Unlimited"] is False
        )
        assert stored["Meta"] == {"sandbox_id": job_id, "owner": "contract"}
        again = api.register(job)
        assert again["EvalID"] and again["EvalID"] != first["EvalID"]
        assert api.ok("GET", f"/v1/job/{job_id}")["Version"] == 0
        job["Meta"]["owner"] = "someone-else"
        api.register(job)
        assert api.ok("GET", f"/v1/job/{job_id}")["Version"] == 1

    def test_enforce_index_zero_registers_only_once(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job = sandbox_job(new_job_id(), nomad_target.image, count=0)
        api.register(job, EnforceIndex=True, JobModifyIndex=0)
        again = api.request(
            "POST", "/v1/jobs", json={"Job": job, "EnforceIndex": True, "JobModifyIndex": 0}
        )
        assert again.status_code == 500
        assert "job already exists" in again.text

    def test_jobs_list_by_prefix_with_meta(self, api: NomadApi, nomad_target: NomadTarget) -> None:
        prefix = new_job_id("listing")
        for n in range(2):
            api.register(
                sandbox_job(f"{prefix}-{n}", nomad_target.image, count=0, meta={"n": str(n)})
            )
        listed = api.ok("GET", "/v1/jobs", params={"prefix": prefix, "meta": "true"})
        assert sorted(j["ID"] for j in listed) == [f"{prefix}-0", f"{prefix}-1"]
        assert sorted(j["Meta"]["n"] for j in listed) == ["0", "1"]
        assert all("JobSummary" in j and j["Type"] == "service" for j in listed)

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
        served = _fetch_when_listening(f"http://{port['HostIP']}:{port['Value']}/payload.bin")
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

    # -- variables --------------------------------------------------------------------------------

    def test_a_variable_is_written_read_listed_and_deleted(self, api: NomadApi) -> None:
        path = f"nomad/jobs/{new_job_id('var')}"
        written = api.put_variable(path, {"token": "s3cret", "user": "rock"})
        assert written.status_code == 200, written.text
        var = written.json()
        assert var["Path"] == path and var["Namespace"] == api.target.namespace
        assert var["Items"] == {"token": "s3cret", "user": "rock"}  # the writer reads its own write
        assert var["CreateIndex"] == var["ModifyIndex"] > 0 and var["CreateTime"] > 0
        assert int(written.headers["X-Nomad-Index"]) >= var["ModifyIndex"]
        read = api.get(f"/v1/var/{path}")
        assert read.status_code == 200 and read.json()["Items"] == var["Items"]
        assert int(read.headers["X-Nomad-Index"]) == var["ModifyIndex"]
        listed = api.ok("GET", "/v1/vars", params={"prefix": path})
        assert [v["Path"] for v in listed] == [path]
        assert (
            "Items" not in listed[0] or listed[0]["Items"] is None
        )  # a listing never shows the items
        assert listed[0]["ModifyIndex"] == var["ModifyIndex"]
        again = api.put_variable(path, {"token": "other"}).json()
        assert (
            again["ModifyIndex"] > var["ModifyIndex"] and again["CreateIndex"] == var["CreateIndex"]
        )
        assert api.ok("GET", f"/v1/var/{path}")["Items"] == {
            "token": "other"
        }  # items are replaced, not merged
        deleted = api.request("DELETE", f"/v1/var/{path}")
        assert deleted.status_code == 204 and not deleted.content
        missing = api.get(f"/v1/var/{path}")
        assert (
            missing.status_code == 404
            and is_plain_text(missing)
            and "variable not found" in missing.text
        )
        assert api.request("DELETE", f"/v1/var/{path}").status_code == 204  # gone already is fine
        assert api.ok("GET", "/v1/vars", params={"prefix": path}) == []

    def test_variable_writes_check_and_set(self, api: NomadApi) -> None:
        path = f"nomad/jobs/{new_job_id('var')}"
        created = api.put_variable(path, {"token": "first"}, cas=0)  # 0: only if absent
        assert created.status_code == 200, created.text
        index = created.json()["ModifyIndex"]
        refused = api.put_variable(path, {"token": "second"}, cas=0)
        assert refused.status_code == 409
        assert (
            refused.json()["ModifyIndex"] == index and refused.json()["Path"] == path
        )  # the variable as it is
        stale = api.put_variable(path, {"token": "second"}, cas=index + 1000)
        assert stale.status_code == 409
        assert api.ok("GET", f"/v1/var/{path}")["Items"] == {"token": "first"}
        updated = api.put_variable(path, {"token": "second"}, cas=index)
        assert updated.status_code == 200 and updated.json()["ModifyIndex"] > index
        not_deleted = api.request("DELETE", f"/v1/var/{path}", params={"cas": index})
        assert not_deleted.status_code == 409
        assert (
            api.request(
                "DELETE", f"/v1/var/{path}", params={"cas": updated.json()["ModifyIndex"]}
            ).status_code
            == 204
        )
        assert api.get(f"/v1/var/{path}").status_code == 404

    def test_variable_errors_are_nomads(self, api: NomadApi) -> None:
        path = f"nomad/jobs/{new_job_id('var')}"
        no_items = api.request("PUT", f"/v1/var/{path}", json={"Path": path})
        assert no_items.status_code == 400 and is_plain_text(no_items)
        assert "variable missing required Items object" in no_items.text
        empty = api.request("PUT", f"/v1/var/{path}", content=b"")
        assert empty.status_code == 400
        bad_cas = api.request(
            "PUT", f"/v1/var/{path}", params={"cas": "soon"}, json={"Items": {"a": "b"}}
        )
        assert bad_cas.status_code == 400 and "can not parse cas" in bad_cas.text
        reserved = api.request("PUT", "/v1/var/nomad/elsewhere", json={"Items": {"a": "b"}})
        assert (
            reserved.status_code == 500
            and is_plain_text(reserved)
            and "nomad/jobs" in reserved.text
        )
        bad_path = api.request("PUT", "/v1/var/has.a.dot", json={"Items": {"a": "b"}})
        assert bad_path.status_code == 500 and 'invalid path "has.a.dot"' in bad_path.text
        wrong_method = api.request("PATCH", f"/v1/var/{path}")
        assert wrong_method.status_code == 400 and "Invalid method" in wrong_method.text
        assert api.request("PUT", "/v1/vars").status_code == 405
        assert api.get(f"/v1/var/{path}").status_code == 404

    def test_a_template_reads_its_jobs_own_variable_and_waits_for_it(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id()
        path = f"nomad/jobs/{job_id}"
        secret = uuid.uuid4().hex
        digest = hashlib.sha256(f"{secret}\n".encode()).hexdigest()  # the job holds only its digest
        job = sandbox_job(
            job_id,
            nomad_target.image,
            command="sh",
            job_type="batch",
            args=["-c", f'echo "$SANDBOX_SECRET" | sha256sum | grep -q {digest} || exit 3'],
        )
        task = job["TaskGroups"][0]["Tasks"][0]
        task["Templates"] = [
            {
                "EmbeddedTmpl": f'SANDBOX_SECRET={{{{ with nomadVar "{path}" }}}}{{{{ .token }}}}{{{{ end }}}}\n',
                "DestPath": "secrets/sandbox.env",
                "Envvars": True,
                "ChangeMode": "noop",
            }
        ]
        api.register(job)
        # Its Variable does not exist yet: the template holds the task back.
        pending = api.wait_alloc(job_id, lambda a: True, "the allocation was placed")
        time.sleep(1.0)
        held = api.ok("GET", f"/v1/allocation/{pending['ID']}")
        assert held["ClientStatus"] == "pending", event_types(held)
        assert "Started" not in event_types(held)
        api.put_variable(path, {"token": secret})
        done = api.wait_alloc(
            job_id, lambda a: a["ClientStatus"] in ("complete", "failed"), "the task ended"
        )
        assert done["ClientStatus"] == "complete", event_types(
            done
        )  # exit 3 had it not read the item
        assert secret not in api.get(f"/v1/job/{job_id}").text
        assert secret not in api.get(f"/v1/allocation/{done['ID']}").text

    def test_variables_need_a_token_with_acls_on(self, nomad_target: NomadTarget) -> None:
        if not nomad_target.acl:
            pytest.skip(
                f"{nomad_target.label} runs without ACLs (set NOMAD_TOKEN for an agent with ACLs on)"
            )
        path = f"nomad/jobs/{new_job_id('var')}"
        anonymous = httpx.put(f"{nomad_target.address}/v1/var/{path}", json={"Items": {"a": "b"}})
        assert anonymous.status_code == 403 and "Permission denied" in anonymous.text
        unknown = httpx.get(
            f"{nomad_target.address}/v1/vars", headers={"X-Nomad-Token": str(uuid.uuid4())}
        )
        assert unknown.status_code == 403 and "ACL token not found" in unknown.text

    # -- ACL --------------------------------------------------------------------------------------

    def test_acl_tokens_are_required_and_checked(
        self, api: NomadApi, nomad_target: NomadTarget
    ) -> None:
        if not nomad_target.acl:
            pytest.skip(
                f"{nomad_target.label} runs without ACLs (set NOMAD_TOKEN for an agent with ACLs on)"
            )
        anonymous = httpx.get(f"{nomad_target.address}/v1/jobs")
        assert anonymous.status_code == 403 and "Permission denied" in anonymous.text
        wrong = httpx.get(
            f"{nomad_target.address}/v1/jobs", headers={"X-Nomad-Token": str(uuid.uuid4())}
        )
        assert wrong.status_code == 403 and "ACL token not found" in wrong.text
        bearer = httpx.get(
            f"{nomad_target.address}/v1/jobs",
            headers={"Authorization": f"Bearer {nomad_target.token}"},
        )
        assert bearer.status_code == 200
        me = api.ok("GET", "/v1/acl/token/self")
        assert me["SecretID"] == nomad_target.token
        leader = httpx.get(f"{nomad_target.address}/v1/status/leader")
        assert leader.status_code == 200


def _fetch_when_listening(url: str) -> bytes:
    """GET ``url`` once something listens there (the task's server starts after its container)."""
    deadline = time.monotonic() + GUARD_SECONDS
    while True:
        try:
            response = httpx.get(url, timeout=10)
            if response.status_code == 200:
                return response.content
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing answered at {url} within {GUARD_SECONDS:g}s")
        time.sleep(0.1)
