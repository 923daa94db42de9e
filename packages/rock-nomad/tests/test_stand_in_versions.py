"""The stand-in's job versions (``GET /v1/job/:id/versions``) beyond the contract: how many it
keeps, and ``diffs=true``, which it refuses rather than answer without the diffs.

(The contract, rock_nomad.testing.python_nomad_contract, checks the versions themselves through
python-nomad's ``job.get_versions``, against the stand-in and a real agent.)
"""

from __future__ import annotations

import httpx
import pytest

from rock_nomad.testing import StandInNomad
from rock_nomad.testing.contract import new_job_id, sandbox_job
from rock_nomad.testing.fixtures import stand_in_nomad, stand_in_nomad_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker


def test_the_newest_six_versions_are_kept(stand_in_nomad: StandInNomad) -> None:
    job_id = new_job_id("versions")
    with httpx.Client(base_url=stand_in_nomad.address) as http:
        for n in range(8):
            job = sandbox_job(job_id, "rock-test/python:3.11", count=0, meta={"n": str(n)})
            assert http.post("/v1/jobs", json={"Job": job}).status_code == 200
        response = http.get(f"/v1/job/{job_id}/versions")
        assert response.status_code == 200
        versions = response.json()["Versions"]
        assert [(v["Version"], v["Meta"]["n"]) for v in versions] == [
            (7 - k, str(7 - k)) for k in range(6)
        ]
        assert int(response.headers["X-Nomad-Index"]) > 0


def test_diffs_are_refused_not_left_out(stand_in_nomad: StandInNomad) -> None:
    job_id = new_job_id("versions")
    with httpx.Client(base_url=stand_in_nomad.address) as http:
        http.post("/v1/jobs", json={"Job": sandbox_job(job_id, "rock-test/python:3.11", count=0)})
        refused = http.get(f"/v1/job/{job_id}/versions", params={"diffs": "true"})
        assert refused.status_code == 400 and "diffs" in refused.text
        bad = http.get(f"/v1/job/{job_id}/versions", params={"diffs": "maybe"})
        assert bad.status_code == 500 and 'Failed to parse value of "diffs"' in bad.text
        assert http.get(f"/v1/job/{job_id}/versions", params={"diffs": "false"}).status_code == 200


def test_a_kept_version_stays_as_it_was_when_the_job_is_stopped(
    stand_in_nomad: StandInNomad,
) -> None:
    """A stop changes the job in place (``Stop``, its indexes, a new ``Version``): the version
    kept before it is not changed with it, though it shares the job's groups and tasks."""
    job_id = new_job_id("versions")
    with httpx.Client(base_url=stand_in_nomad.address) as http:
        job = sandbox_job(job_id, "rock-test/python:3.11", count=0)
        assert http.post("/v1/jobs", json={"Job": job}).status_code == 200
        registered = http.get(f"/v1/job/{job_id}").json()
        assert http.delete(f"/v1/job/{job_id}").status_code == 200
        versions = http.get(f"/v1/job/{job_id}/versions").json()["Versions"]
        assert [(v["Version"], v["Stop"]) for v in versions] == [(1, True), (0, False)]
        first = versions[1]
        assert first["JobModifyIndex"] == registered["JobModifyIndex"]
        assert first["TaskGroups"] == registered["TaskGroups"]
