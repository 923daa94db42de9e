"""The stand-in's cluster state and scheduler: jobs, evaluations, allocations and nodes.

Everything here runs on the stand-in's one event loop, so the state needs no locks. Each write
raises one Raft-like index and the index of the tables it touched; blocking queries wait on
:attr:`Cluster.changed`. Objects are kept as the JSON Nomad would answer (PascalCase dicts), so
the HTTP layer serves them as they are.
"""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import json
import logging
import random
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rock_nomad.testing._model import (
    SECOND,
    NomadError,
    canonicalize_job,
    job_spec,
    multierror,
    validate_job,
)
from rock_nomad.testing._variables import VariableStore

if TYPE_CHECKING:
    from rock_nomad.testing._client import DockerClientSim

log = logging.getLogger("rock_nomad.testing")

ZERO_TIME = "0001-01-01T00:00:00Z"
TERMINAL_CLIENT = ("complete", "failed", "lost")
LOST_DESCRIPTION = "alloc is lost since its node is down"
NOT_NEEDED_DESCRIPTION = "alloc not needed due to job update"
RESCHEDULED_DESCRIPTION = "alloc was rescheduled because it failed"
STOPPED_DESCRIPTION = "alloc was stopped by the client's request"  # POST /v1/allocation/:id/stop
#: How many versions of a job Nomad keeps (its ``JobTrackedVersions``, the server's default).
JOB_TRACKED_VERSIONS = 6


def now_ns() -> int:
    return time.time_ns()


def rfc3339(ns: int | None = None) -> str:
    ns = time.time_ns() if ns is None else ns
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def server_terminal(alloc: dict[str, Any]) -> bool:
    """Nomad's "terminal" for an alloc: the server wants it stopped or the client finished it."""
    return alloc["DesiredStatus"] in ("stop", "evict") or alloc["ClientStatus"] in TERMINAL_CLIENT


@dataclass
class NodeSpec:
    """One simulated client node: its name, loopback address and what it can allocate."""

    name: str
    address: str
    cpu_mhz: int = 4000
    cores: int = 4
    memory_mb: int = 4096
    disk_mb: int = 100_000
    datacenter: str = "dc1"
    node_class: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    min_dynamic_port: int = 20000
    max_dynamic_port: int = 32000
    #: The Docker networks the node's operator made, besides Docker's own ``bridge`` (name →
    #: driver options, e.g. ``{"com.docker.network.bridge.enable_icc": "false"}``): what a
    #: task's ``network_mode`` may name on this node.
    docker_networks: dict[str, dict[str, str]] = field(default_factory=dict)


class Cluster:
    """Nomad's server state for the stand-in (see the module docstring)."""

    def __init__(
        self,
        *,
        region: str = "global",
        namespaces: tuple[str, ...] = ("default",),
        algorithm: str = "binpack",
        scheduler_delay: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if algorithm not in ("binpack", "spread"):
            raise ValueError(f"algorithm must be 'binpack' or 'spread', not {algorithm!r}")
        self.region = region
        self.namespaces = {
            ns: {
                "Name": ns,
                "Description": "",
                "Quota": "",
                "Meta": None,
                "CreateIndex": 1,
                "ModifyIndex": 1,
            }
            for ns in namespaces
        }
        self.algorithm = algorithm
        self.scheduler_delay = scheduler_delay
        self.index = 1
        self.tables = {"jobs": 1, "evals": 1, "allocs": 1, "nodes": 1, "vars": 1}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        #: (namespace, job ID) → its versions as registered, newest first (Nomad keeps 6)
        self.job_versions: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.evals: dict[str, dict[str, Any]] = {}
        self.allocs: dict[str, dict[str, Any]] = {}
        #: (namespace, job ID) → that job ID's allocations, oldest first (every version's)
        self.job_allocs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        #: Nomad Variables by (namespace, path)
        self.variables = VariableStore(lambda: self.bump("vars"))
        self.node_specs: dict[str, NodeSpec] = {}
        self.changed = asyncio.Event()
        self.client: DockerClientSim | None = None
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._worker: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._random = random.Random(seed)
        self.closing = False
        #: the event stream's events, oldest first, the newest 4,096 kept: (index, topic, key,
        #: namespace, filter keys, the event as JSON)
        self.events: deque[tuple[int, str, str, str, list[str], str]] = deque(maxlen=4096)

    # -- indexes and notification ---------------------------------------------------------

    def bump(self, *tables: str) -> int:
        self.index += 1
        for table in tables:
            self.tables[table] = self.index
        old, self.changed = self.changed, asyncio.Event()
        old.set()
        return self.index

    def publish(
        self,
        topic: str,
        kind: str,
        obj: dict[str, Any],
        *,
        key: str,
        namespace: str = "",
        filter_keys: list[str] | None = None,
    ) -> None:
        """Record an event for ``/v1/event/stream`` (the object as it is now)."""
        payload = {k: v for k, v in obj.items() if not k.startswith("_")}
        event = {
            "Topic": topic,
            "Type": kind,
            "Key": key,
            "Namespace": namespace,
            "FilterKeys": filter_keys,
            "Index": self.index,
            "Payload": {topic: payload},
        }
        self.events.append(
            (
                self.index,
                topic,
                key,
                namespace,
                filter_keys or [],
                json.dumps(event, separators=(",", ":")),
            )
        )

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(
            self._run_scheduler(), name="stand-in scheduler"
        )

    async def close(self) -> None:
        self.closing = True
        for timer in self._timers:
            timer.cancel()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self.bump()  # wakes blocking queries, which end when closing

    # -- nodes --------------------------------------------------------------------------------

    def add_node(self, spec: NodeSpec) -> dict[str, Any]:
        node_id = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        index = self.bump("nodes")
        node = {
            "ID": node_id,
            "SecretID": "",
            "Datacenter": spec.datacenter,
            "Name": spec.name,
            "HTTPAddr": f"{spec.address}:4646",
            "TLSEnabled": False,
            "Address": spec.address,
            "Attributes": {
                "kernel.name": "linux",
                "os.name": "linux",
                "arch": "amd64",
                "cpu.arch": "amd64",
                "cpu.numcores": str(spec.cores),
                "cpu.totalcompute": str(spec.cpu_mhz),
                "cpu.frequency": str(spec.cpu_mhz // max(1, spec.cores)),
                "memory.totalbytes": str(spec.memory_mb * 1024 * 1024),
                "unique.hostname": spec.name,
                "unique.network.ip-address": spec.address,
                "driver.docker": "1",
                "nomad.version": "1.10.5",
            },
            "NodeResources": {
                "Cpu": {
                    "CpuShares": spec.cpu_mhz,
                    "TotalCpuCores": spec.cores,
                    "ReservableCpuCores": list(range(spec.cores)),
                },
                "Memory": {"MemoryMB": spec.memory_mb},
                "Disk": {"DiskMB": spec.disk_mb},
                "Networks": [
                    {
                        "Mode": "host",
                        "Device": "lo",
                        "CIDR": f"{spec.address}/32",
                        "IP": spec.address,
                        "MBits": 1000,
                    }
                ],
                "NodeNetworks": [
                    {
                        "Mode": "host",
                        "Device": "lo",
                        "Addresses": [
                            {
                                "Family": "ipv4",
                                "Alias": "default",
                                "Address": spec.address,
                                "ReservedPorts": "",
                                "Gateway": "",
                            }
                        ],
                    }
                ],
                "Devices": None,
                "MinDynamicPort": spec.min_dynamic_port,
                "MaxDynamicPort": spec.max_dynamic_port,
            },
            "ReservedResources": {
                "Cpu": {"CpuShares": 0},
                "Memory": {"MemoryMB": 0},
                "Disk": {"DiskMB": 0},
                "Networks": {"ReservedHostPorts": ""},
            },
            "Links": None,
            "Meta": dict(spec.meta) or None,
            "NodeClass": spec.node_class,
            "NodePool": "default",
            "ComputedClass": "",
            "DrainStrategy": None,
            "Drain": False,
            "SchedulingEligibility": "eligible",
            "Status": "ready",
            "StatusDescription": "",
            "StatusUpdatedAt": int(time.time()),
            "Events": [
                {
                    "Message": "Node registered",
                    "Subsystem": "Cluster",
                    "Details": None,
                    "Timestamp": rfc3339(),
                    "CreateIndex": 0,
                }
            ],
            "Drivers": {
                "docker": {
                    "Attributes": {"driver.docker": "true"},
                    "Detected": True,
                    "Healthy": True,
                    "HealthDescription": "Healthy",
                    "UpdateTime": rfc3339(),
                }
            },
            "HostVolumes": None,
            "HostNetworks": None,
            "LastDrain": None,
            "CreateIndex": index,
            "ModifyIndex": index,
        }
        self.nodes[node_id] = node
        self.publish("Node", "NodeRegistration", node, key=node_id)
        self.node_specs[node_id] = spec
        self._capacity_changed()
        return node

    def find_node(self, name_or_id: str) -> dict[str, Any]:
        for node in self.nodes.values():
            if name_or_id in (node["ID"], node["Name"], node["Address"]):
                return node
        raise KeyError(f"no node {name_or_id!r}")

    def node_stub(
        self, node: dict[str, Any], *, resources: bool = False, os: bool = False
    ) -> dict[str, Any]:
        stub = {
            k: node[k]
            for k in (
                "Address",
                "ID",
                "Datacenter",
                "Name",
                "NodeClass",
                "NodePool",
                "Drain",
                "SchedulingEligibility",
                "Status",
                "StatusDescription",
                "Drivers",
                "HostVolumes",
                "LastDrain",
                "CreateIndex",
                "ModifyIndex",
            )
        }
        stub["Version"] = node["Attributes"]["nomad.version"]
        stub["Attributes"] = {"os.name": "linux"} if os else None
        stub["NodeResources"] = node["NodeResources"] if resources else None
        stub["ReservedResources"] = node["ReservedResources"] if resources else None
        return stub

    def set_node_down(self, node_id: str) -> list[str]:
        """The node stops heartbeating: it turns ``down`` and its live allocs ``lost``."""
        node = self.nodes[node_id]
        node["Status"] = "down"
        node["StatusUpdatedAt"] = int(time.time())
        index = self.bump("nodes")
        node["ModifyIndex"] = index
        self.publish("Node", "NodeEvent", node, key=node_id)
        lost = []
        jobs = set()
        for alloc in list(self.allocs.values()):
            if alloc["NodeID"] != node_id or alloc["ClientStatus"] in TERMINAL_CLIENT:
                continue
            lost.append(alloc["ID"])
            jobs.add((alloc["Namespace"], alloc["JobID"]))
            self._update_alloc(
                alloc,
                DesiredStatus="stop",
                DesiredDescription=LOST_DESCRIPTION,
                ClientStatus="lost",
                ClientDescription="",
            )
            if self.client is not None:
                self.client.forget(alloc["ID"])
        for ns, job_id in jobs:
            job = self.jobs.get((ns, job_id))
            if job is not None and not job["Stop"]:
                self._create_eval(job, "node-update", node_id=node_id)
            self._refresh_job_status(ns, job_id)
        return lost

    def set_node_eligibility(self, node_id: str, eligibility: str) -> int:
        """``eligible`` or ``ineligible`` for new placements (running allocations stay)."""
        if eligibility not in ("eligible", "ineligible"):
            raise NomadError(400, f'invalid scheduling eligibility "{eligibility}"')
        node = self.nodes[node_id]
        node["SchedulingEligibility"] = eligibility
        node["ModifyIndex"] = index = self.bump("nodes")
        self.publish("Node", "NodeEligibility", node, key=node_id)
        if eligibility == "eligible":
            self._capacity_changed()
        return index

    def set_node_ready(self, node_id: str) -> None:
        node = self.nodes[node_id]
        node["Status"] = "ready"
        node["StatusUpdatedAt"] = int(time.time())
        node["ModifyIndex"] = self.bump("nodes")
        self.publish("Node", "NodeEvent", node, key=node_id)
        self._capacity_changed()

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
            job = canonicalize_job(job, ns)
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
        for ev in self.evals.values():
            if ev["JobID"] == job_id and ev["Namespace"] == namespace and ev["Status"] == "blocked":
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
        repeats, a change or a stop adds one; the newest 6 are kept (Nomad's JobTrackedVersions)."""
        kept = [v for v in self.job_versions.get(key, []) if v["Version"] != job["Version"]]
        versions = sorted([copy.deepcopy(job), *kept], key=lambda v: v["Version"], reverse=True)
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

    def job_status(self, namespace: str, job_id: str) -> str:
        job = self.jobs[(namespace, job_id)]
        allocs = [
            a
            for a in self.job_allocs.get((namespace, job_id), ())
            if a["Job"]["CreateIndex"] == job["CreateIndex"]
        ]
        if any(not server_terminal(a) for a in allocs):
            return "running"
        if job["Stop"]:
            return "dead"
        if any(e["Status"] in ("pending", "blocked") for e in self._evals_of(namespace, job_id)):
            return "pending"
        if job.get("Periodic") or job.get("ParameterizedJob"):
            return "running"
        return "dead"

    def _refresh_job_status(self, namespace: str, job_id: str) -> None:
        job = self.jobs.get((namespace, job_id))
        if job is None:
            return
        status = self.job_status(namespace, job_id)
        if status != job["Status"]:
            job["Status"] = status
            job["ModifyIndex"] = self.bump("jobs")

    def _evals_of(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        return [
            e for e in self.evals.values() if e["JobID"] == job_id and e["Namespace"] == namespace
        ]

    def allocs_of(
        self, namespace: str, job_id: str, *, all_versions: bool = False
    ) -> list[dict[str, Any]]:
        job = self.jobs.get((namespace, job_id))
        if job is None and not all_versions:
            return []
        if namespace == "*":
            found = [
                a for (ns, jid), allocs in self.job_allocs.items() if jid == job_id for a in allocs
            ]
        else:
            found = list(self.job_allocs.get((namespace, job_id), ()))
        return [
            a
            for a in found
            if all_versions or (job is not None and a["Job"]["CreateIndex"] == job["CreateIndex"])
        ]

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

    # -- evaluations -----------------------------------------------------------------------------

    def _create_eval(
        self,
        job: dict[str, Any],
        triggered_by: str,
        *,
        status: str = "pending",
        node_id: str = "",
        wait_until_ns: int = 0,
        previous: str = "",
        job_modify_index: int | None = None,
    ) -> dict[str, Any]:
        index = self.bump("evals")
        created = now_ns()
        ev = {
            "ID": str(uuid.uuid4()),
            "Namespace": job["Namespace"],
            "Priority": job["Priority"],
            "Type": job["Type"],
            "TriggeredBy": triggered_by,
            "JobID": job["ID"],
            "JobModifyIndex": job["JobModifyIndex"]
            if job_modify_index is None
            else job_modify_index,
            "NodeID": node_id,
            "NodeModifyIndex": 0,
            "DeploymentID": "",
            "Status": status,
            "StatusDescription": "",
            "Wait": 0,
            "WaitUntil": rfc3339(wait_until_ns) if wait_until_ns else ZERO_TIME,
            "NextEval": "",
            "PreviousEval": previous,
            "BlockedEval": "",
            "RelatedEvals": None,
            "FailedTGAllocs": None,
            "ClassEligibility": None,
            "QuotaLimitReached": "",
            "EscapedComputedClass": False,
            "AnnotatePlan": False,
            "QueuedAllocations": None,
            "LeaderACL": "",
            "SnapshotIndex": 0,
            "CreateIndex": index,
            "ModifyIndex": index,
            "CreateTime": created,
            "ModifyTime": created,
        }
        self.evals[ev["ID"]] = ev
        self.publish(
            "Evaluation",
            "EvaluationUpdated",
            ev,
            key=ev["ID"],
            namespace=ev["Namespace"],
            filter_keys=[ev["JobID"], ""],
        )
        if status == "pending":
            delay = max(0.0, (wait_until_ns - created) / SECOND) if wait_until_ns else 0.0
            if delay > 0:
                timer = asyncio.get_running_loop().call_later(delay, self._enqueue, ev["ID"])
                self._timers.add(timer)
            else:
                self._enqueue(ev["ID"])
        return ev

    def _update_eval(self, ev: dict[str, Any], **fields: Any) -> None:
        ev.update(fields)
        ev["ModifyIndex"] = self.bump("evals")
        ev["ModifyTime"] = now_ns()
        self.publish(
            "Evaluation",
            "EvaluationUpdated",
            ev,
            key=ev["ID"],
            namespace=ev["Namespace"],
            filter_keys=[ev["JobID"], ""],
        )

    def _enqueue(self, eval_id: str) -> None:
        if eval_id not in self._queued and not self.closing:
            self._queued.add(eval_id)
            self._queue.put_nowait(eval_id)

    def _capacity_changed(self) -> None:
        """Room was freed or added: blocked evaluations try again."""
        for ev in self.evals.values():
            if ev["Status"] == "blocked":
                self._enqueue(ev["ID"])

    async def _run_scheduler(self) -> None:
        while True:
            eval_id = await self._queue.get()
            self._queued.discard(eval_id)
            if self.scheduler_delay > 0:
                await asyncio.sleep(self.scheduler_delay)
            ev = self.evals.get(eval_id)
            if ev is None or ev["Status"] not in ("pending", "blocked"):
                continue
            try:
                self._process(ev)
            except Exception:  # noqa: BLE001 - one bad eval must not stop the scheduler
                log.exception("stand-in scheduler failed on eval %s", eval_id)
                self._update_eval(ev, Status="failed", StatusDescription="stand-in scheduler error")

    def _process(self, ev: dict[str, Any]) -> None:
        ns, job_id = ev["Namespace"], ev["JobID"]
        job = self.jobs.get((ns, job_id))
        live = list(self.job_allocs.get((ns, job_id), ()))
        if job is None or job["Stop"]:
            for alloc in live:
                if not server_terminal(alloc):
                    self._stop(alloc, NOT_NEEDED_DESCRIPTION)
            self._update_eval(ev, Status="complete")
            self._refresh_job_status(ns, job_id)
            self._capacity_changed()
            return
        live = [a for a in live if a["Job"]["CreateIndex"] == job["CreateIndex"]]
        failed_tg: dict[str, Any] = {}
        queued: dict[str, int] = {}
        freed = False
        groups = {g["Name"] for g in job["TaskGroups"]}
        for alloc in live:
            if alloc["TaskGroup"] not in groups and not server_terminal(alloc):
                self._stop(alloc, NOT_NEEDED_DESCRIPTION)  # its group left the job
                freed = True
        now = now_ns()
        for group in job["TaskGroups"]:
            name = group["Name"]
            current: dict[int, dict[str, Any]] = {}
            for alloc in live:
                if alloc["TaskGroup"] != name or alloc["NextAllocation"]:
                    continue
                slot = _slot(alloc["Name"])
                if slot >= group["Count"]:
                    if not server_terminal(alloc):
                        self._stop(alloc, NOT_NEEDED_DESCRIPTION)
                        freed = True
                    continue
                prev = current.get(slot)
                if prev is None or alloc["CreateIndex"] > prev["CreateIndex"]:
                    current[slot] = alloc
            to_place: list[tuple[int, dict[str, Any] | None]] = []
            for slot in range(group["Count"]):
                alloc = current.get(slot)
                if alloc is None:
                    to_place.append((slot, None))
                elif alloc["ClientStatus"] == "lost":
                    if not group.get("PreventRescheduleOnLost"):
                        to_place.append((slot, alloc))
                elif alloc["ClientStatus"] == "failed":
                    if alloc["DesiredStatus"] == "run" and self._reschedule_due(group, alloc, now):
                        to_place.append((slot, alloc))
                elif alloc["DesiredStatus"] != "run":
                    if alloc["DesiredTransition"].get("Reschedule"):  # POST /v1/allocation/:id/stop
                        to_place.append((slot, alloc))
                    elif alloc["DesiredDescription"] == NOT_NEEDED_DESCRIPTION:
                        to_place.append((slot, None))
                elif alloc["ClientStatus"] == "complete":
                    pass
                elif alloc["Job"]["Version"] != job["Version"]:
                    if _destructive(alloc["Job"], job, name):
                        self._stop(alloc, NOT_NEEDED_DESCRIPTION)
                        freed = True
                        to_place.append((slot, None))
                    else:  # an in-place update: the alloc carries the new job version
                        self._update_alloc(alloc, Job=copy.deepcopy(job))
            metrics = None
            placed = 0
            for slot, previous in to_place:
                started = time.perf_counter_ns()
                node, metric = self._select_node(job, group)
                metric["AllocationTime"] = time.perf_counter_ns() - started
                if node is None:
                    if metrics is None:
                        metrics = metric
                    else:
                        metrics["CoalescedFailures"] += 1
                    continue
                self._place(job, group, slot, node, ev, metric, previous)
                placed += 1
            missing = len(to_place) - placed
            queued[name] = missing
            if missing:
                failed_tg[name] = metrics
        if failed_tg:
            blocked = next(
                (e for e in self._evals_of(ns, job_id) if e["Status"] == "blocked"), None
            )
            if blocked is ev:
                self._update_eval(ev, QueuedAllocations=queued, FailedTGAllocs=failed_tg)
            else:
                if blocked is not None:
                    self._update_eval(
                        blocked,
                        Status="canceled",
                        StatusDescription="superseded by a newer evaluation",
                    )
                new = self._create_eval(job, "queued-allocs", status="blocked", previous=ev["ID"])
                new["StatusDescription"] = "created to place remaining allocations"
                new["QueuedAllocations"] = dict(queued)
                new["FailedTGAllocs"] = failed_tg
                self._update_eval(
                    ev,
                    Status="complete",
                    FailedTGAllocs=failed_tg,
                    BlockedEval=new["ID"],
                    QueuedAllocations=queued,
                )
        else:
            self._update_eval(ev, Status="complete", QueuedAllocations=queued)
            for other in self._evals_of(ns, job_id):
                if other["Status"] == "blocked" and other is not ev:
                    self._update_eval(
                        other, Status="canceled", StatusDescription="job's allocations were placed"
                    )
        self._refresh_job_status(ns, job_id)
        if freed:
            self._capacity_changed()

    def _reschedule_due(self, group: dict[str, Any], alloc: dict[str, Any], now: int) -> bool:
        eligible, wait_until = self._reschedule_eligible(group, alloc, now)
        return (
            eligible and wait_until <= now + 100_000_000
        )  # the follow-up eval's timer may fire a hair early

    def _reschedule_eligible(
        self, group: dict[str, Any], alloc: dict[str, Any], now: int
    ) -> tuple[bool, int]:
        policy = group["ReschedulePolicy"]
        events = (alloc.get("RescheduleTracker") or {}).get("Events") or []
        if not policy.get("Unlimited"):
            attempts = int(policy.get("Attempts") or 0)
            interval = int(policy.get("Interval") or 0)
            recent = [e for e in events if now - e["RescheduleTime"] <= interval]
            if len(recent) >= attempts:
                return False, 0
        delay = int(policy.get("Delay") or 0)
        n = len(events)
        if policy.get("DelayFunction") == "exponential":
            delay = delay * (2**n)
        elif policy.get("DelayFunction") == "fibonacci":
            a, b = delay, delay
            for _ in range(n):
                a, b = b, a + b
            delay = a
        if policy.get("MaxDelay"):
            delay = min(delay, int(policy["MaxDelay"]))
        finished = alloc.get("_finished_ns") or now
        return True, finished + delay

    # -- placement ----------------------------------------------------------------------------

    def _used(self, node_id: str) -> tuple[int, int, int, set[int]]:
        cpu = mem = disk = 0
        ports: set[int] = set()
        for alloc in self.allocs.values():
            if alloc["NodeID"] != node_id:
                continue
            if not server_terminal(alloc):
                cpu += alloc["Resources"]["CPU"]
                mem += alloc["Resources"]["MemoryMB"]
                disk += alloc["Resources"]["DiskMB"]
            if not server_terminal(alloc) or alloc["ClientStatus"] not in TERMINAL_CLIENT:
                ports.update(
                    p["Value"] for p in alloc["AllocatedResources"]["Shared"]["Ports"] or []
                )
        return cpu, mem, disk, ports

    @staticmethod
    def _group_ask(group: dict[str, Any], spec: NodeSpec) -> tuple[int, int, int]:
        cpu = mem = 0
        for task in group["Tasks"]:
            res = task["Resources"]
            if res.get("Cores"):
                cpu += int(res["Cores"]) * (spec.cpu_mhz // max(1, spec.cores))
            else:
                cpu += int(res["CPU"])
            mem += int(res["MemoryMB"])
        return cpu, mem, int(group["EphemeralDisk"]["SizeMB"])

    def _select_node(
        self, job: dict[str, Any], group: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        metric: dict[str, Any] = {
            "NodesEvaluated": 0,
            "NodesFiltered": 0,
            "NodesInPool": 0,
            "NodesAvailable": {},
            "ClassFiltered": None,
            "ConstraintFiltered": None,
            "NodesExhausted": 0,
            "ClassExhausted": None,
            "DimensionExhausted": None,
            "QuotaExhausted": None,
            "ResourcesExhausted": None,
            "Scores": None,
            "ScoreMetaData": None,
            "AllocationTime": 0,
            "CoalescedFailures": 0,
        }
        drivers = {t["Driver"] for t in group["Tasks"]}
        constraints = (job.get("Constraints") or []) + (group.get("Constraints") or [])
        for task in group["Tasks"]:
            constraints += task.get("Constraints") or []
        candidates = []
        for node in self.nodes.values():
            if node["NodePool"] != job.get("NodePool", "default") and job.get("NodePool") not in (
                "all",
                None,
            ):
                continue
            metric["NodesInPool"] += 1
            if node["Status"] != "ready" or node["SchedulingEligibility"] != "eligible":
                continue
            if not any(fnmatch.fnmatchcase(node["Datacenter"], dc) for dc in job["Datacenters"]):
                continue
            metric["NodesAvailable"][node["Datacenter"]] = (
                metric["NodesAvailable"].get(node["Datacenter"], 0) + 1
            )
            metric["NodesEvaluated"] += 1
            missing = [d for d in drivers if d not in node["Drivers"]]
            if missing:
                _count(metric, "ConstraintFiltered", "missing drivers")
                metric["NodesFiltered"] += 1
                continue
            failed = next((c for c in constraints if not _constraint_holds(c, node)), None)
            if failed is not None:
                _count(
                    metric,
                    "ConstraintFiltered",
                    f"{failed.get('LTarget', '')} {failed.get('Operand', '=')} "
                    f"{failed.get('RTarget', '')}".strip(),
                )
                metric["NodesFiltered"] += 1
                continue
            spec = self.node_specs[node["ID"]]
            used_cpu, used_mem, used_disk, used_ports = self._used(node["ID"])
            ask_cpu, ask_mem, ask_disk = self._group_ask(group, spec)
            exhausted = None
            if used_cpu + ask_cpu > spec.cpu_mhz:
                exhausted = "cpu"
            elif used_mem + ask_mem > spec.memory_mb:
                exhausted = "memory"
            elif used_disk + ask_disk > spec.disk_mb:
                exhausted = "disk"
            else:
                for net in group.get("Networks") or []:
                    if any(p["Value"] in used_ports for p in net.get("ReservedPorts") or []):
                        exhausted = "network: reserved port collision"
            if exhausted:
                metric["NodesExhausted"] += 1
                _count(metric, "DimensionExhausted", exhausted)
                continue
            util = ((used_cpu + ask_cpu) / spec.cpu_mhz + (used_mem + ask_mem) / spec.memory_mb) / 2
            candidates.append((util, node))
        if not candidates:
            return None, metric
        if self.algorithm == "binpack":
            util, node = max(candidates, key=lambda c: c[0])
        else:
            util, node = min(candidates, key=lambda c: c[0])
        score = util if self.algorithm == "binpack" else 1 - util
        metric["ScoreMetaData"] = [
            {"NodeID": node["ID"], "Scores": {self.algorithm: score}, "NormScore": score}
        ]
        return node, metric

    def _pick_port(self, node: dict[str, Any], used: set[int]) -> int:
        spec = self.node_specs[node["ID"]]
        for _ in range(200):
            port = self._random.randint(spec.min_dynamic_port, spec.max_dynamic_port)
            if port in used:
                continue
            if _port_free(spec.address, port):
                used.add(port)
                return port
        raise NomadError(500, f"no free dynamic port on node {node['Name']}")

    def _place(
        self,
        job: dict[str, Any],
        group: dict[str, Any],
        slot: int,
        node: dict[str, Any],
        ev: dict[str, Any],
        metric: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> dict[str, Any]:
        spec = self.node_specs[node["ID"]]
        _, _, _, used_ports = self._used(node["ID"])
        shared_networks = []
        ports = []
        for net in group.get("Networks") or []:
            net = copy.deepcopy(net)
            net["IP"] = spec.address
            for port in net.get("ReservedPorts") or []:
                ports.append(
                    {
                        "Label": port["Label"],
                        "Value": port["Value"],
                        "To": port["To"],
                        "HostIP": spec.address,
                    }
                )
            for port in net.get("DynamicPorts") or []:
                port["Value"] = self._pick_port(node, used_ports)
                if net["Mode"] == "bridge" and not port["To"]:
                    port["To"] = -1
                ports.append(
                    {
                        "Label": port["Label"],
                        "Value": port["Value"],
                        "To": port["To"],
                        "HostIP": spec.address,
                    }
                )
            shared_networks.append(net)
        tasks_res = {}
        task_legacy = {}
        total_cpu = total_mem = 0
        for task in group["Tasks"]:
            res = task["Resources"]
            cpu = (
                int(res["Cores"]) * (spec.cpu_mhz // max(1, spec.cores))
                if res.get("Cores")
                else int(res["CPU"])
            )
            total_cpu += cpu
            total_mem += int(res["MemoryMB"])
            tasks_res[task["Name"]] = {
                "Cpu": {
                    "CpuShares": cpu,
                    "ReservedCores": list(range(int(res["Cores"]))) if res.get("Cores") else None,
                },
                "Memory": {
                    "MemoryMB": int(res["MemoryMB"]),
                    "MemoryMaxMB": int(res.get("MemoryMaxMB") or 0),
                },
                "Networks": None,
                "Devices": None,
            }
            task_legacy[task["Name"]] = {
                "CPU": cpu,
                "Cores": int(res.get("Cores") or 0),
                "MemoryMB": int(res["MemoryMB"]),
                "MemoryMaxMB": int(res.get("MemoryMaxMB") or 0),
                "DiskMB": 0,
                "Networks": None,
            }
        disk = int(group["EphemeralDisk"]["SizeMB"])
        index = self.bump("allocs")
        created = now_ns()
        alloc_id = str(uuid.uuid4())
        tracker = None
        if previous is not None and previous["ClientStatus"] == "failed":
            events = list((previous.get("RescheduleTracker") or {}).get("Events") or [])
            events.append(
                {
                    "PrevAllocID": previous["ID"],
                    "PrevNodeID": previous["NodeID"],
                    "RescheduleTime": created,
                    "Delay": 0,
                }
            )
            tracker = {"Events": events}
        alloc = {
            "ID": alloc_id,
            "Namespace": job["Namespace"],
            "EvalID": ev["ID"],
            "Name": f"{job['ID']}.{group['Name']}[{slot}]",
            "NodeID": node["ID"],
            "NodeName": node["Name"],
            "JobID": job["ID"],
            "Job": copy.deepcopy(job),
            "TaskGroup": group["Name"],
            "Resources": {
                "CPU": total_cpu,
                "Cores": 0,
                "MemoryMB": total_mem,
                "MemoryMaxMB": 0,
                "DiskMB": disk,
                "Networks": shared_networks or None,
                "Devices": None,
            },
            "SharedResources": {
                "CPU": 0,
                "MemoryMB": 0,
                "DiskMB": disk,
                "Networks": shared_networks or None,
            },
            "TaskResources": task_legacy,
            "AllocatedResources": {
                "Tasks": tasks_res,
                "TaskLifecycles": {t["Name"]: None for t in group["Tasks"]},
                "Shared": {
                    "DiskMB": disk,
                    "Networks": shared_networks or None,
                    "Ports": ports or None,
                },
            },
            "Metrics": metric,
            "DesiredStatus": "run",
            "DesiredDescription": "",
            "DesiredTransition": {
                "Migrate": None,
                "Reschedule": None,
                "ForceReschedule": None,
                "NoShutdownDelay": None,
            },
            "ClientStatus": "pending",
            "ClientDescription": "No tasks have started",
            "TaskStates": {
                t["Name"]: {
                    "State": "pending",
                    "Failed": False,
                    "Restarts": 0,
                    "LastRestart": ZERO_TIME,
                    "StartedAt": ZERO_TIME,
                    "FinishedAt": ZERO_TIME,
                    "Paused": None,
                    "Events": [task_event("Received", "Task received by client")],
                }
                for t in group["Tasks"]
            },
            "DeploymentID": "",
            "DeploymentStatus": None,
            "FollowupEvalID": "",
            "PreviousAllocation": previous["ID"] if previous else "",
            "NextAllocation": "",
            "RescheduleTracker": tracker,
            "NetworkStatus": None,
            "PreemptedAllocations": None,
            "PreemptedByAllocation": "",
            "CreateIndex": index,
            "ModifyIndex": index,
            "AllocModifyIndex": index,
            "CreateTime": created,
            "ModifyTime": created,
        }
        self.allocs[alloc_id] = alloc
        self.job_allocs.setdefault((job["Namespace"], job["ID"]), []).append(alloc)
        self.publish(
            "Allocation",
            "AllocationCreated",
            alloc,
            key=alloc_id,
            namespace=job["Namespace"],
            filter_keys=[job["ID"], ""],
        )
        if previous is not None:
            fields: dict[str, Any] = {"NextAllocation": alloc_id}
            if previous["ClientStatus"] == "failed":
                fields.update(DesiredStatus="stop", DesiredDescription=RESCHEDULED_DESCRIPTION)
            self._update_alloc(previous, **fields)
        if self.client is not None:
            self.client.run(alloc, node, spec)
        return alloc

    # -- allocation updates ---------------------------------------------------------------------

    def _update_alloc(self, alloc: dict[str, Any], **fields: Any) -> None:
        was_terminal = server_terminal(alloc)
        alloc.update(fields)
        index = self.bump("allocs")
        alloc["ModifyIndex"] = index
        if "DesiredStatus" in fields:
            alloc["AllocModifyIndex"] = index
        alloc["ModifyTime"] = now_ns()
        kind = "AllocationUpdateDesiredStatus" if "DesiredStatus" in fields else "AllocationUpdated"
        self.publish(
            "Allocation",
            kind,
            alloc,
            key=alloc["ID"],
            namespace=alloc["Namespace"],
            filter_keys=[alloc["JobID"], ""],
        )
        if not was_terminal and server_terminal(alloc):
            self._capacity_changed()

    def _stop(self, alloc: dict[str, Any], description: str) -> None:
        self._update_alloc(alloc, DesiredStatus="stop", DesiredDescription=description)
        if self.client is not None:
            self.client.kill(alloc["ID"])

    def client_update(
        self,
        alloc_id: str,
        *,
        task: str | None = None,
        event: dict[str, Any] | None = None,
        **task_fields: Any,
    ) -> None:
        """The simulated client reports: a task event and task state fields; the alloc's client
        status follows from its tasks' states."""
        alloc = self.allocs.get(alloc_id)
        if alloc is None or alloc["ClientStatus"] == "lost":
            return
        if task is not None:
            state = alloc["TaskStates"][task]
            if event is not None:
                state["Events"] = (state["Events"] + [event])[-10:]
            state.update(task_fields)
        states = alloc["TaskStates"].values()
        if any(s["State"] == "dead" and s["Failed"] for s in states):
            status, description = "failed", "Failed tasks"
        elif all(s["State"] == "dead" for s in states):
            status, description = "complete", "All tasks have completed"
        elif any(s["State"] == "running" for s in states):
            status, description = "running", "Tasks are running"
        else:
            status, description = "pending", "No tasks have started"
        became_failed = status == "failed" and alloc["ClientStatus"] != "failed"
        if status in TERMINAL_CLIENT and alloc["ClientStatus"] not in TERMINAL_CLIENT:
            alloc["_finished_ns"] = now_ns()
        self._update_alloc(alloc, ClientStatus=status, ClientDescription=description)
        if became_failed and alloc["DesiredStatus"] == "run":
            self._after_failure(alloc)
        if status in TERMINAL_CLIENT:
            self._capacity_changed()
        self._refresh_job_status(alloc["Namespace"], alloc["JobID"])

    def _after_failure(self, alloc: dict[str, Any]) -> None:
        job = self.jobs.get((alloc["Namespace"], alloc["JobID"]))
        if job is None or job["Stop"] or job["CreateIndex"] != alloc["Job"]["CreateIndex"]:
            return
        group = next((g for g in job["TaskGroups"] if g["Name"] == alloc["TaskGroup"]), None)
        if group is None:
            return
        now = now_ns()
        eligible, wait_until = self._reschedule_eligible(group, alloc, now)
        if not eligible:
            return
        if wait_until > now:
            ev = self._create_eval(job, "alloc-failure", wait_until_ns=wait_until)
            self._update_alloc(alloc, FollowupEvalID=ev["ID"])
        else:
            self._create_eval(job, "alloc-failure")


def task_event(kind: str, message: str, **details: Any) -> dict[str, Any]:
    """A TaskEvent as Nomad reports it (Time in Unix nanoseconds)."""
    event = {
        "Type": kind,
        "Time": now_ns(),
        "Message": "",
        "DisplayMessage": message,
        "Details": {},
        "FailsTask": False,
        "RestartReason": "",
        "SetupError": "",
        "DriverError": "",
        "DriverMessage": "",
        "ExitCode": 0,
        "Signal": 0,
        "KillReason": "",
        "KillTimeout": 0,
        "KillError": "",
        "StartDelay": 0,
        "DownloadError": "",
        "ValidationError": "",
        "DiskLimit": 0,
        "FailedSibling": "",
        "VaultError": "",
        "TaskSignalReason": "",
        "TaskSignal": "",
        "GenericSource": "",
    }
    event.update(details)
    return event


def _destructive(old: dict[str, Any], new: dict[str, Any], group: str) -> bool:
    """Whether a job update replaces a group's allocations (its tasks change, or the metadata
    its tasks see) or updates them in place."""
    if old.get("Meta") != new.get("Meta"):
        return True
    before = next((g for g in old["TaskGroups"] if g["Name"] == group), None)
    after = next((g for g in new["TaskGroups"] if g["Name"] == group), None)
    if before is None or after is None:
        return True
    return {k: v for k, v in before.items() if k != "Count"} != {
        k: v for k, v in after.items() if k != "Count"
    }


def _slot(name: str) -> int:
    try:
        return int(name.rsplit("[", 1)[1].rstrip("]"))
    except (IndexError, ValueError):
        return 0


def _count(metric: dict[str, Any], key: str, what: str) -> None:
    table = metric[key] or {}
    table[what] = table.get(what, 0) + 1
    metric[key] = table


def _node_value(target: str, node: dict[str, Any]) -> str | None:
    if not (target.startswith("${") and target.endswith("}")):
        return target
    name = target[2:-1]
    if name.startswith("attr."):
        return node["Attributes"].get(name[5:])
    if name.startswith("meta."):
        return (node.get("Meta") or {}).get(name[5:])
    return {
        "node.unique.id": node["ID"],
        "node.unique.name": node["Name"],
        "node.datacenter": node["Datacenter"],
        "node.class": node["NodeClass"],
        "node.pool": node["NodePool"],
    }.get(name)


def _constraint_holds(constraint: dict[str, Any], node: dict[str, Any]) -> bool:
    left = _node_value(constraint.get("LTarget") or "", node)
    right = _node_value(constraint.get("RTarget") or "", node)
    op = constraint.get("Operand") or "="
    if op in ("=", "==", "is"):
        return left is not None and left == right
    if op in ("!=", "not"):
        return left != right
    if op == "is_set":
        return left is not None
    if op == "is_not_set":
        return left is None
    if op == "set_contains":
        have = {s.strip() for s in (left or "").split(",")}
        return all(s.strip() in have for s in (right or "").split(","))
    if op == "regexp":
        import re

        return left is not None and re.search(right or "", left) is not None
    return (
        False  # an operand the stand-in does not know filters the node out, never silently passes
    )


def _port_free(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True
