"""The Nomad API contract as python-nomad sees it: Nomad's API driven through a widely used client.

:class:`PythonNomadContract` is a test class to subclass with a ``nomad_target`` fixture that
returns a :class:`~rock_nomad.testing.contract.NomadTarget`, like
:class:`~rock_nomad.testing.contract.NomadApiContract`. Its tests call the target only through
python-nomad's synchronous client (``nomad.Nomad``, ``requests`` underneath): register a job
through both register routes, read and list it and its versions, follow its allocation with the blocking query
python-nomad leaves to ``request()``, read the allocation's status and its task's log, list
nodes and their allocations, follow the event stream on python-nomad's own thread, write, read,
list and delete Variables (with check-and-set), deregister and purge; and the errors, which
python-nomad turns into its own exception classes by status code (400
``BadRequestNomadException``, 403 ``URLNotAuthorizedNomadException``, 404
``URLNotFoundNomadException``, 409 ``VariableConflict``, anything else ``BaseNomadException``),
each carrying Nomad's plain-text answer in ``nomad_resp``.

A stand-in that passes both contracts answers python-nomad as Nomad does; rock-nomad runs both
against its stand-in and, when ``NOMAD_ADDR`` is set, against a real agent.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import nomad
import pytest
import requests
from nomad.api import exceptions as nomad_errors

from rock_nomad.testing.contract import GUARD_SECONDS, NomadTarget, new_job_id, sandbox_job

#: The environment python-nomad reads in ``Nomad()``, over what the test passes (``NOMAD_ADDR``
#: wins over ``host``/``port``, ``NOMAD_TOKEN`` fills a missing token): cleared for each test.
NOMAD_ENVIRONMENT = (
    "NOMAD_ADDR",
    "NOMAD_TOKEN",
    "NOMAD_NAMESPACE",
    "NOMAD_REGION",
    "NOMAD_CLIENT_CERT",
    "NOMAD_CLIENT_KEY",
)


class PythonNomadClients:
    """python-nomad clients of one target, and the jobs and Variables a test made (removed at close)."""

    def __init__(self, target: NomadTarget) -> None:
        self.target = target
        self.jobs: set[str] = set()
        self.variables: set[str] = set()
        self.main = self.client(target.token)

    def client(self, token: str | None, **settings: Any) -> nomad.Nomad:
        """A python-nomad client of the target holding ``token`` (none when ``None``)."""
        return nomad.Nomad(
            address=self.target.address, token=token, timeout=int(GUARD_SECONDS), **settings
        )

    def register(self, job: dict[str, Any], **body: Any) -> dict[str, Any]:
        """``jobs.register_job`` (``POST /v1/jobs``), the job purged at close."""
        self.jobs.add(job["ID"])
        answer: dict[str, Any] = self.main.jobs.register_job({"Job": job, **body})
        return answer

    def put_variable(self, path: str, items: dict[str, str], **kwargs: Any) -> dict[str, Any]:
        """``variable.create_variable`` (``PUT /v1/var/<path>``), the Variable deleted at close."""
        self.variables.add(path)
        answer: dict[str, Any] = self.main.variable.create_variable(
            path, {"Path": path, "Items": items}, **kwargs
        )
        return answer

    def wait_allocation(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """The newest allocation of ``job_id`` (``allocation.get_allocation``) once ``until`` holds.

        python-nomad has no blocking queries; ``request()`` with ``index``/``wait`` is its way to
        them (it returns the raw response, whose ``X-Nomad-Index`` the next query sends)."""
        index = 0
        deadline = time.monotonic() + GUARD_SECONDS
        last: Any = None
        while True:
            response = self.main.job.request(
                job_id, "allocations", method="get", params={"index": index, "wait": "5s"}
            )
            last = response.json()
            if last:
                newest = self.main.allocation.get_allocation(
                    max(last, key=lambda a: a["CreateIndex"])["ID"]
                )
                if until(newest):
                    answer: dict[str, Any] = newest
                    return answer
            index = int(response.headers["X-Nomad-Index"])
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what} ({job_id}) did not happen within {GUARD_SECONDS:g}s; last: {last!r}"
                )

    def wait_job(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """``job.get_job`` once ``until`` holds."""
        deadline = time.monotonic() + GUARD_SECONDS
        while True:
            job = self.main.job.get_job(job_id)
            if until(job):
                answer: dict[str, Any] = job
                return answer
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what} ({job_id}) did not happen within {GUARD_SECONDS:g}s; last: {job!r}"
                )
            time.sleep(0.2)

    def close(self) -> None:
        for job_id in self.jobs:
            try:
                self.main.job.deregister_job(job_id, purge=True)
            except nomad_errors.BaseNomadException:
                pass
        for path in self.variables:
            try:
                self.main.variable.delete_variable(path)
            except nomad_errors.BaseNomadException:
                pass


def nomads_answer(
    error: nomad_errors.BaseNomadException, status: int, text: str
) -> requests.Response:
    """The response a python-nomad exception carries, checked to be Nomad's plain-text answer."""
    response = error.nomad_resp
    assert isinstance(response, requests.Response), response
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers.get("content-type", "").startswith("text/plain"), response.headers
    assert text in response.text, response.text
    assert text in str(error)
    return response


def task_events(alloc: dict[str, Any], task: str = "main") -> list[str]:
    return [e["Type"] for e in alloc["TaskStates"][task]["Events"]]


class PythonNomadContract:
    """The contract tests through python-nomad; subclass with a ``nomad_target`` fixture."""

    @pytest.fixture
    def py_nomad(
        self, nomad_target: NomadTarget, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[PythonNomadClients]:
        for name in NOMAD_ENVIRONMENT:
            monkeypatch.delenv(name, raising=False)
        clients = PythonNomadClients(nomad_target)
        try:
            yield clients
        finally:
            clients.close()

    # -- status, agent, nodes --------------------------------------------------------------------

    def test_leader_agent_and_regions(self, py_nomad: PythonNomadClients) -> None:
        n = py_nomad.main
        leader = n.status.leader.get_leader()
        assert isinstance(leader, str) and ":" in leader
        agent = n.agent.get_agent()
        assert agent["config"]["Region"] == "global" and agent["config"]["Version"]["Version"]
        assert "global" in n.regions.get_regions()

    def test_nodes_are_listed_and_read(self, py_nomad: PythonNomadClients) -> None:
        n = py_nomad.main
        stubs = [s for s in n.nodes.get_nodes() if s["Status"] == "ready"]
        assert stubs
        assert all(s.get("NodeResources") is None for s in stubs)
        with_resources = {s["ID"]: s for s in n.nodes.get_nodes(resources=True)}  # sent as "True"
        for stub in stubs:
            assert (
                stub["Drivers"]["docker"]["Detected"]
                and stub["SchedulingEligibility"] == "eligible"
            )
            assert with_resources[stub["ID"]]["NodeResources"]["Memory"]["MemoryMB"] > 0
            node = n.node.get_node(stub["ID"])
            assert node["Name"] == stub["Name"] and node["Attributes"]["kernel.name"] == "linux"
            assert isinstance(n.node.get_allocations(stub["ID"]), list)
        assert (
            stubs[0]["ID"] in n.nodes and stubs[0]["Name"] in n.nodes
        )  # by ID or name, from the listing
        assert n.nodes.get_nodes(prefix=stubs[0]["ID"][:8])[0]["ID"] == stubs[0]["ID"]

    # -- a job's life ------------------------------------------------------------------------------

    def test_register_read_run_list_deregister_and_purge(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        n = py_nomad.main
        job_id = new_job_id("pynomad")
        job = sandbox_job(job_id, nomad_target.image, meta={"sandbox_id": job_id})
        registered = py_nomad.register(job)
        assert registered["EvalID"] and registered["JobModifyIndex"] > 0
        assert job_id in n.job and n.job[job_id]["ID"] == job_id
        stored = n.job.get_job(job_id)
        assert stored["Meta"] == {"sandbox_id": job_id} and stored["Version"] == 0
        assert stored["TaskGroups"][0]["RestartPolicy"]["Mode"] == "fail"
        listed = n.jobs.get_jobs(
            prefix=job_id, meta=True
        )  # meta sent as "True": Go's ParseBool takes it
        assert [j["ID"] for j in listed] == [job_id] and listed[0]["Meta"] == {"sandbox_id": job_id}
        assert job_id in n.jobs
        evaluation = n.evaluation.get_evaluation(registered["EvalID"])
        assert evaluation["JobID"] == job_id and evaluation["TriggeredBy"] == "job-register"

        alloc = py_nomad.wait_allocation(
            job_id, lambda a: a["ClientStatus"] != "pending", "the allocation started"
        )
        assert alloc["ClientStatus"] == "running", task_events(alloc)
        assert alloc["DesiredStatus"] == "run" and alloc["TaskStates"]["main"]["State"] == "running"
        assert alloc["Name"] == f"{job_id}.sandbox[0]" and alloc["NodeID"]
        assert alloc["ID"] in n.allocation and n.allocation[alloc["ID"]]["JobID"] == job_id
        assert [a["ID"] for a in n.job.get_allocations(job_id)] == [alloc["ID"]]
        assert [a["ID"] for a in n.allocations.get_allocations(prefix=alloc["ID"][:8])] == [
            alloc["ID"]
        ]
        assert alloc["ID"] in [a["ID"] for a in n.node.get_allocations(alloc["NodeID"])]
        assert registered["EvalID"] in [e["ID"] for e in n.job.get_evaluations(job_id)]
        assert (
            py_nomad.wait_job(job_id, lambda j: j["Status"] == "running", "the job ran")["Status"]
            == "running"
        )
        assert n.job.get_summary(job_id)["Summary"]["sandbox"]["Running"] == 1

        # Re-registered through the job's own route (POST /v1/job/<id>) with a change: a new version.
        job["Meta"]["owner"] = "python-nomad"
        assert n.job.register_job(job_id, {"Job": job})["EvalID"]
        assert n.job.get_job(job_id)["Version"] == 1

        stopped = n.job.deregister_job(job_id)
        assert stopped["EvalID"] and stopped["JobModifyIndex"] > 0
        dead = py_nomad.wait_job(job_id, lambda j: j["Status"] == "dead", "the job died")
        assert dead["Stop"] is True
        done = py_nomad.wait_allocation(
            job_id, lambda a: a["ClientStatus"] == "complete", "the allocation ended"
        )
        assert done["DesiredStatus"] == "stop" and done["TaskStates"]["main"]["State"] == "dead"
        assert (
            n.job.deregister_job(job_id, purge=True)["JobModifyIndex"] > 0
        )  # purge sent as "True"
        assert job_id not in n.job
        with pytest.raises(nomad_errors.URLNotFoundNomadException) as missing:
            n.job.get_job(job_id)
        nomads_answer(missing.value, 404, "job not found")

    def test_a_jobs_versions(self, py_nomad: PythonNomadClients, nomad_target: NomadTarget) -> None:
        n = py_nomad.main
        job_id = new_job_id("pynomad")
        job = sandbox_job(job_id, nomad_target.image, count=0, meta={"owner": "first"})
        py_nomad.register(job)
        first = n.job.get_versions(job_id)
        assert [v["Version"] for v in first["Versions"]] == [0] and first["Diffs"] is None
        assert first["Versions"][0]["ID"] == job_id and first["Versions"][0]["Meta"] == {
            "owner": "first"
        }
        job["Meta"]["owner"] = "second"
        py_nomad.register(job)
        py_nomad.register(job)  # unchanged: the same version again, not a new one
        versions = n.job.get_versions(job_id)["Versions"]
        assert [(v["Version"], v["Meta"]["owner"]) for v in versions] == [
            (1, "second"),
            (0, "first"),
        ]  # newest first
        n.job.deregister_job(job_id)  # a stopped job is a new version
        stopped = n.job.get_versions(job_id)["Versions"]
        assert [(v["Version"], v["Stop"]) for v in stopped] == [(2, True), (1, False), (0, False)]
        n.job.deregister_job(job_id, purge=True)
        with pytest.raises(nomad_errors.URLNotFoundNomadException) as purged:
            n.job.get_versions(job_id)
        nomads_answer(purged.value, 404, "job versions not found")

    def test_a_tasks_log_and_its_exit(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        n = py_nomad.main
        job_id = new_job_id("pynomad")
        word = uuid.uuid4().hex
        py_nomad.register(
            sandbox_job(
                job_id,
                nomad_target.image,
                command="sh",
                job_type="batch",
                args=["-c", f"echo {word}; echo to-stderr >&2; exit 3"],
            )
        )
        alloc = py_nomad.wait_allocation(
            job_id, lambda a: a["ClientStatus"] in ("failed", "complete"), "the task ended"
        )
        assert alloc["ClientStatus"] == "failed", task_events(alloc)
        terminated = [e for e in alloc["TaskStates"]["main"]["Events"] if e["Type"] == "Terminated"]
        assert terminated and terminated[-1]["ExitCode"] == 3
        stdout = n.client.stream_logs.stream(alloc["ID"], "main", "stdout", plain=True)
        assert stdout == f"{word}\n"
        assert (
            n.client.stream_logs.stream(alloc["ID"], "main", "stderr", plain=True) == "to-stderr\n"
        )

    def test_the_event_stream_on_python_nomads_thread(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        job_id = new_job_id("pynomad")
        thread, stop, frames = py_nomad.main.event.stream.get_stream(
            topic=[f"Job:{job_id}"], timeout=60
        )
        thread.daemon = True
        thread.start()
        try:
            py_nomad.register(sandbox_job(job_id, nomad_target.image, count=0))
            deadline = time.monotonic() + GUARD_SECONDS
            seen: list[dict[str, Any]] = []
            while not any(e["Type"] == "JobRegistered" for e in seen):
                assert thread.is_alive(), (
                    "python-nomad's stream thread died (an answer it could not parse?)"
                )
                try:
                    frame = frames.get(timeout=1)
                except queue.Empty:
                    assert time.monotonic() < deadline, (
                        f"no JobRegistered within {GUARD_SECONDS:g}s: {seen!r}"
                    )
                    continue
                assert frame["Index"] > 0
                seen.extend(frame["Events"])
            assert all(e["Topic"] == "Job" and e["Key"] == job_id for e in seen), seen
            registered = next(e for e in seen if e["Type"] == "JobRegistered")
            assert registered["Payload"]["Job"]["ID"] == job_id
        finally:
            stop.set()  # the thread ends after the next frame or heartbeat

    # -- variables -------------------------------------------------------------------------------

    def test_variables_write_read_list_check_and_set_and_delete(
        self, py_nomad: PythonNomadClients
    ) -> None:
        n = py_nomad.main
        path = f"nomad/jobs/{new_job_id('pynomad-var')}"
        created = py_nomad.put_variable(path, {"token": "first"}, cas=0)
        assert created["Path"] == path and created["Items"] == {"token": "first"}
        index = created["ModifyIndex"]
        assert n.variable.get_variable(path)["Items"] == {"token": "first"}
        assert path in n.variable and path in n.variables
        listed = n.variables.get_variables(prefix=path)
        assert [v["Path"] for v in listed] == [path] and not listed[0].get("Items")
        with pytest.raises(nomad_errors.VariableConflict) as conflict:
            py_nomad.put_variable(path, {"token": "second"}, cas=0)
        held = conflict.value.nomad_resp
        assert (
            held.status_code == 409 and held.json()["ModifyIndex"] == index
        )  # the variable as it is
        updated = py_nomad.put_variable(path, {"token": "second"}, cas=index)
        assert updated["ModifyIndex"] > index
        with pytest.raises(nomad_errors.VariableConflict):
            n.variable.delete_variable(path, cas=index)
        deleted = n.variable.delete_variable(path, cas=updated["ModifyIndex"])
        assert deleted.status_code == 204
        assert path not in n.variable
        with pytest.raises(nomad_errors.URLNotFoundNomadException) as missing:
            n.variable.get_variable(path)
        nomads_answer(missing.value, 404, "variable not found")
        assert n.variables.get_variables(prefix=path) == []

    def test_variable_errors_are_nomads(self, py_nomad: PythonNomadClients) -> None:
        n = py_nomad.main
        path = f"nomad/jobs/{new_job_id('pynomad-var')}"
        with pytest.raises(nomad_errors.BadRequestNomadException) as no_items:
            n.variable.create_variable(path, {"Path": path})
        nomads_answer(no_items.value, 400, "variable missing required Items object")
        with pytest.raises(nomad_errors.BaseNomadException) as reserved:
            n.variable.create_variable("nomad/elsewhere", {"Items": {"a": "b"}})
        assert type(reserved.value) is nomad_errors.BaseNomadException
        nomads_answer(reserved.value, 500, "nomad/jobs")

    # -- errors ----------------------------------------------------------------------------------

    def test_unknown_objects_raise_not_found_with_nomads_text(
        self, py_nomad: PythonNomadClients
    ) -> None:
        n = py_nomad.main
        unknown = str(uuid.uuid4())
        for read, text in [
            (n.allocation.get_allocation, "alloc not found"),
            (n.evaluation.get_evaluation, "eval not found"),
            (n.node.get_node, "node not found"),
            (n.job.get_job, "job not found"),
        ]:
            with pytest.raises(nomad_errors.URLNotFoundNomadException) as missing:
                read(unknown)
            nomads_answer(missing.value, 404, text)
        assert unknown not in n.job and unknown not in n.allocation and unknown not in n.node
        # Nomad answers these for a job it does not know without an error (python-nomad#114).
        assert n.job.deregister_job(unknown, purge=True)["EvalID"] == ""
        assert n.job.get_allocations(unknown) == [] and n.job.get_evaluations(unknown) == []

    def test_bad_registrations_raise_by_nomads_status(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        n = py_nomad.main
        job_id = new_job_id("pynomad")
        job = sandbox_job(job_id, nomad_target.image, count=0)
        with pytest.raises(nomad_errors.BadRequestNomadException) as unwrapped:
            n.jobs.register_job({"Meta": {}})
        nomads_answer(unwrapped.value, 400, "Job must be specified")
        with pytest.raises(nomad_errors.BadRequestNomadException) as mismatch:
            n.job.register_job(f"{job_id}-other", {"Job": job})
        nomads_answer(mismatch.value, 400, "Job ID does not match name")
        invalid = {
            **job,
            "TaskGroups": [
                {**job["TaskGroups"][0], "RestartPolicy": {"Attempts": 0, "Mode": "delay"}}
            ],
        }
        with pytest.raises(nomad_errors.BaseNomadException) as refused:
            n.jobs.register_job({"Job": invalid})
        assert (
            type(refused.value) is nomad_errors.BaseNomadException
        )  # a validation failure is a 500
        nomads_answer(refused.value, 500, "error occurred")
        assert job_id not in n.job
        py_nomad.register(job, EnforceIndex=True, JobModifyIndex=0)
        with pytest.raises(nomad_errors.BaseNomadException) as exists:
            py_nomad.register(job, EnforceIndex=True, JobModifyIndex=0)
        nomads_answer(exists.value, 500, "job already exists")

    def test_wrong_method_region_and_namespace(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        with pytest.raises(nomad_errors.BaseNomadException) as wrong:
            py_nomad.main.status.leader.request(method="delete")
        nomads_answer(wrong.value, 405, "Invalid method")
        elsewhere = py_nomad.client(nomad_target.token, region="nowhere")
        with pytest.raises(nomad_errors.BaseNomadException) as no_path:
            elsewhere.jobs.get_jobs()
        nomads_answer(no_path.value, 500, "No path to region")
        missing_namespace = py_nomad.client(
            nomad_target.token, namespace=f"ns-{uuid.uuid4().hex[:8]}"
        )
        job = sandbox_job(new_job_id("pynomad"), nomad_target.image, count=0)
        with pytest.raises(nomad_errors.BaseNomadException) as nonexistent:
            missing_namespace.jobs.register_job({"Job": job})
        nomads_answer(nonexistent.value, 500, "nonexistent namespace")

    # -- ACL --------------------------------------------------------------------------------------

    def test_acl_token_header(
        self, py_nomad: PythonNomadClients, nomad_target: NomadTarget
    ) -> None:
        if not nomad_target.acl:
            pytest.skip(
                f"{nomad_target.label} runs without ACLs (set NOMAD_TOKEN for an agent with ACLs on)"
            )
        me = py_nomad.main.acl.get_self_token()  # the token travels as X-Nomad-Token
        assert me["SecretID"] == nomad_target.token
        anonymous = py_nomad.client(None)
        with pytest.raises(nomad_errors.URLNotAuthorizedNomadException) as denied:
            anonymous.jobs.get_jobs()
        nomads_answer(denied.value, 403, "Permission denied")
        with pytest.raises(nomad_errors.URLNotAuthorizedNomadException) as no_var:
            anonymous.variable.create_variable(
                f"nomad/jobs/{new_job_id('pynomad-var')}", {"Items": {"a": "b"}}
            )
        nomads_answer(no_var.value, 403, "Permission denied")
        stranger = py_nomad.client(str(uuid.uuid4()))
        with pytest.raises(nomad_errors.URLNotAuthorizedNomadException) as unknown:
            stranger.jobs.get_jobs()
        nomads_answer(unknown.value, 403, "ACL token not found")
        assert ":" in anonymous.status.leader.get_leader()  # no token needed there
