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
import time
import uuid

import httpx
import pytest

from rock_nomad.testing._contract_allocations import AllocationsContract
from rock_nomad.testing._contract_basics import BasicsContract
from rock_nomad.testing._contract_support import (
    GUARD_SECONDS,
    ArtifactServer,
    NomadApi,
    NomadTarget,
    event_types,
    events,
    is_plain_text,
    new_job_id,
    sandbox_job,
)

__all__ = [
    "GUARD_SECONDS",
    "ArtifactServer",
    "NomadApi",
    "NomadApiContract",
    "NomadTarget",
    "event_types",
    "events",
    "is_plain_text",
    "new_job_id",
    "sandbox_job",
]


class NomadApiContract(BasicsContract, AllocationsContract):
    """The contract tests; subclass with a ``nomad_target`` fixture (see the module docstring).

    Its parts: :class:`~rock_nomad.testing._contract_basics.BasicsContract` (status, errors,
    registration), :class:`~rock_nomad.testing._contract_allocations.AllocationsContract`
    (allocations, failures, placement), and here Nomad Variables and ACL tokens.
    """

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
