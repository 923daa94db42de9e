"""The stand-in's cluster: :class:`Cluster`, the job table on top of the scheduler
(:mod:`~rock_nomad.testing._scheduler`, :mod:`~rock_nomad.testing._placement`) and the node
table (:mod:`~rock_nomad.testing._nodes`), all on the shared state
(:mod:`~rock_nomad.testing._state`): a job registered, deregistered or purged, its versions,
a forced evaluation, an allocation stopped, a job's summary."""

from __future__ import annotations

from typing import Any

from rock_nomad.testing._model import (
    NomadError,
    canonicalize_job,
    job_spec,
    multierror,
    validate_job,
)
from rock_nomad.testing._nodes import NodeTable
from rock_nomad.testing._scheduler import Scheduler
from rock_nomad.testing._state import (
    JOB_TRACKED_VERSIONS,
    STOPPED_DESCRIPTION,
    NodeSpec,
    now_ns,
)

__all__ = ["Cluster", "NodeSpec"]


class Cluster(Scheduler, NodeTable):
    """Nomad's server state and scheduler for the stand-in (see :mod:`~rock_nomad.testing._state`)."""

    # -- jobs -----------------------------------------------------------------------------------

    def register(
        self, body: dict[str, Any], *, namespace: str | None, path_id: str | None
    ) -> dict[str, Any]:
        job = body.get("Job")
        if not isinstance(job, dict):
            raise NomadError(400, "Job must be specified")
        if not job.get("ID"):
            raise NomadError(400, "Job ID hasn't been provided")
        if path_id is not None and job["ID"] != path_id:
            raise NomadError(400, "Job ID does not match name")
        if job.get("Region") and job["Region"] != self.region:
            raise NomadError(500, "No path to region")
        ns = namespace or body.get("Namespace") or job.get("Namespace") or "default"
        if ns not in self.namespaces:
            raise NomadError(500, f'job "{job["ID"]}" is in nonexistent namespace "{ns}"')
        try:
            # The body is this request's own, parsed from its JSON: filled in as it is.
            job = canonicalize_job(job, ns, copy=False)
            errors = validate_job(job)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # A field of the wrong JSON type: Nomad's decoder refuses the body.
            raise NomadError(
                400, f"json: cannot unmarshal the job: a field has the wrong type ({exc})"
            ) from None
        if errors:
            raise NomadError(500, multierror(errors))
        key = (ns, job["ID"])
        old = self.jobs.get(key)
        if body.get("EnforceIndex"):
            expected = int(body.get("JobModifyIndex") or 0)
            if expected == 0 and old is not None:
                raise NomadError(500, "Enforcing job modify index 0: job already exists")
            if expected != 0 and old is None:
                raise NomadError(500, f"Enforcing job modify index {expected}: job does not exist")
            if old is not None and expected != old["JobModifyIndex"]:
                raise NomadError(
                    500,
                    f"Enforcing job modify index {expected}: job exists with conflicting job modify index: {old['JobModifyIndex']}",
                )
        index = self.bump("jobs")
        changed = old is None or job_spec(old) != job_spec(job) or old["Stop"]
        job.update(
            {
                "Stop": False,
                "ParentID": job.get("ParentID") or "",
                "Dispatched": False,
                "Stable": False,
                "StatusDescription": "",
                "SubmitTime": now_ns(),
                "ModifyIndex": index,
            }
        )
        if old is None:
            job.update(
                {"Version": 0, "CreateIndex": index, "JobModifyIndex": index, "Status": "pending"}
            )
        else:
            job.update(
                {
                    "Version": old["Version"] + (1 if changed else 0),
                    "CreateIndex": old["CreateIndex"],
                    "JobModifyIndex": index if changed else old["JobModifyIndex"],
                    "Status": old["Status"],
                }
            )
        self.jobs[key] = job
        self._track_version(key, job)
        self.publish("Job", "JobRegistered", job, key=job["ID"], namespace=ns)
        eval_id, eval_index = "", 0
        if not job.get("Periodic") and not job.get("ParameterizedJob"):
            ev = self._create_eval(job, "job-register")
            eval_id, eval_index = ev["ID"], ev["CreateIndex"]
        self._refresh_job_status(*key)
        return {
            "EvalID": eval_id,
            "EvalCreateIndex": eval_index,
            "JobModifyIndex": job["JobModifyIndex"],
            "Warnings": "",
            "Index": self.index,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }

    def deregister(self, namespace: str, job_id: str, *, purge: bool) -> dict[str, Any]:
        key = (namespace, job_id)
        job = self.jobs.get(key)
        if job is None:
            return {
                "EvalID": "",
                "EvalCreateIndex": 0,
                "JobModifyIndex": 0,
                "VolumeEvalID": "",
                "VolumeEvalIndex": 0,
                "Index": 0,
                "LastContact": 0,
                "KnownLeader": True,
                "NextToken": "",
            }
        index = self.bump("jobs")
        if purge:
            del self.jobs[key]
            self.job_versions.pop(key, None)
            job_modify_index = index
        else:
            job.update(
                {
                    "Stop": True,
                    "ModifyIndex": index,
                    "JobModifyIndex": index,
                    "Version": job["Version"] + 1,
                }
            )
            self._track_version(key, job)
            job_modify_index = index
        self.publish("Job", "JobDeregistered", job, key=job_id, namespace=namespace)
        for ev in self._evals_of(namespace, job_id):
            if ev["Status"] == "blocked":
                self._update_eval(ev, Status="canceled", StatusDescription="job deregistered")
        eval_id, eval_index = "", 0
        if not job.get("Periodic") and not job.get("ParameterizedJob"):
            ev = self._create_eval(job, "job-deregister", job_modify_index=job_modify_index)
            eval_id, eval_index = ev["ID"], ev["CreateIndex"]
        self._refresh_job_status(*key)
        return {
            "EvalID": eval_id,
            "EvalCreateIndex": eval_index,
            "JobModifyIndex": job_modify_index,
            "VolumeEvalID": "",
            "VolumeEvalIndex": 0,
            "Index": self.index,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }

    def _track_version(self, key: tuple[str, str], job: dict[str, Any]) -> None:
        """Keep ``job`` as its version: an unchanged re-registration replaces the version it
        repeats, a change or a stop adds one; the newest 6 are kept (Nomad's JobTrackedVersions).

        The version is a copy of the job's top level only: once registered, a job is changed
        only there (its status, indexes, ``Stop``, ``Version``), never inside its groups and
        tasks (a new registration is a new object), so the version shares those with it. A deep
        copy of each job had been a twelfth of the stand-in's CPU in a burst of starts."""
        kept = [v for v in self.job_versions.get(key, []) if v["Version"] != job["Version"]]
        versions = sorted([dict(job), *kept], key=lambda v: v["Version"], reverse=True)
        self.job_versions[key] = versions[:JOB_TRACKED_VERSIONS]

    def versions(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        """The job's kept versions, newest first (the current one as it is now); ``[]`` for a
        job that is unknown or purged."""
        current = self.jobs.get((namespace, job_id))
        return [
            current if current is not None and v["Version"] == current["Version"] else v
            for v in self.job_versions.get((namespace, job_id), [])
        ]

    def evaluate(self, namespace: str, job_id: str) -> dict[str, Any]:
        job = self.jobs.get((namespace, job_id))
        if job is None:
            raise NomadError(404, "job not found")
        ev = self._create_eval(job, "job-register")
        return {
            "EvalID": ev["ID"],
            "EvalCreateIndex": ev["CreateIndex"],
            "JobModifyIndex": job["JobModifyIndex"],
            "Warnings": "",
            "Index": self.index,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }

    def stop_alloc(self, alloc_id: str) -> dict[str, Any]:
        """``POST /v1/allocation/:id/stop``: stop this alloc, and place a replacement."""
        alloc = self.allocs.get(alloc_id)
        if alloc is None:
            raise NomadError(404, "alloc not found")
        self._update_alloc(
            alloc,
            DesiredStatus="stop",
            DesiredDescription=STOPPED_DESCRIPTION,
            DesiredTransition={
                "Migrate": None,
                "Reschedule": True,
                "ForceReschedule": None,
                "NoShutdownDelay": None,
            },
        )
        if self.client is not None:
            self.client.kill(alloc_id)
        job = self.jobs.get((alloc["Namespace"], alloc["JobID"]))
        if job is None:
            return {"EvalID": "", "Index": self.index}
        ev = self._create_eval(job, "alloc-stop")
        return {"EvalID": ev["ID"], "Index": self.index}

    def summary(self, namespace: str, job_id: str) -> dict[str, Any]:
        job = self.jobs.get((namespace, job_id))
        if job is None:
            raise NomadError(404, "job not found")
        summary = {}
        queued = {}
        for ev in self._evals_of(namespace, job_id):
            if ev["Status"] == "blocked":
                for tg, n in (ev.get("QueuedAllocations") or {}).items():
                    queued[tg] = n
        for group in job["TaskGroups"]:
            counts = {
                "Queued": queued.get(group["Name"], 0),
                "Complete": 0,
                "Failed": 0,
                "Running": 0,
                "Starting": 0,
                "Lost": 0,
                "Unknown": 0,
            }
            for alloc in self.allocs_of(namespace, job_id):
                if alloc["TaskGroup"] != group["Name"]:
                    continue
                key = {
                    "pending": "Starting",
                    "running": "Running",
                    "complete": "Complete",
                    "failed": "Failed",
                    "lost": "Lost",
                    "unknown": "Unknown",
                }[alloc["ClientStatus"]]
                counts[key] += 1
            summary[group["Name"]] = counts
        return {
            "JobID": job_id,
            "Namespace": namespace,
            "Summary": summary,
            "Children": {"Pending": 0, "Running": 0, "Dead": 0},
            "CreateIndex": job["CreateIndex"],
            "ModifyIndex": job["ModifyIndex"],
        }
