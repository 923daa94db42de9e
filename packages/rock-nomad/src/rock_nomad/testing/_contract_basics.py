"""The Nomad API contract, part 1: status, agent and nodes; Nomad's errors and their codes;
register, versions and the jobs list (see :mod:`rock_nomad.testing.contract`)."""

from __future__ import annotations

import uuid

import pytest

from rock_nomad.testing._contract_support import (
    ContractFixtures,
    NomadApi,
    NomadTarget,
    is_plain_text,
    new_job_id,
    sandbox_job,
)

__all__ = ["BasicsContract"]


class BasicsContract(ContractFixtures):
    """Status, errors, registration (mixed into :class:`~rock_nomad.testing.contract.NomadApiContract`)."""

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
