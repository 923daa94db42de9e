"""The stand-in's cluster state: its tables (jobs, evaluations, allocations, nodes, Variables),
the index every write raises, the event stream's record, and the writes every part shares
(evaluations made and updated, allocations updated, a job's status).

Everything here runs on the stand-in's one event loop, so the state needs no locks. Each write
raises one Raft-like index and the index of the tables it touched; blocking queries wait on
:attr:`ClusterState.changed`. Objects are kept as the JSON Nomad would answer (PascalCase
dicts), so the HTTP layer serves them as they are.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rock_nomad.testing._model import (
    SECOND,
    compact_json,
    json_copy,
)
from rock_nomad.testing._variables import VariableStore

if TYPE_CHECKING:
    from rock_nomad.testing._client import DockerClientSim
    from rock_nomad.testing._simulated import SimulatedClient

__all__ = [
    "ClusterState",
    "NodeSpec",
    "json_copy",
    "now_ns",
    "rfc3339",
    "server_terminal",
    "task_event",
]

log = logging.getLogger("rock_nomad.testing")

ZERO_TIME = "0001-01-01T00:00:00Z"
TERMINAL_CLIENT = ("complete", "failed", "lost")
LOST_DESCRIPTION = "alloc is lost since its node is down"
NOT_NEEDED_DESCRIPTION = "alloc not needed due to job update"
RESCHEDULED_DESCRIPTION = "alloc was rescheduled because it failed"
STOPPED_DESCRIPTION = "alloc was stopped by the client's request"  # POST /v1/allocation/:id/stop
#: An allocation's fields set at its placement and never changed (its events encode them once).
ALLOC_FIXED = frozenset(
    {"Resources", "SharedResources", "TaskResources", "AllocatedResources", "Metrics"}
)


_dumps = compact_json

#: An allocation's private fields (the stand-in's own, never answered): the JSON of its
#: :data:`ALLOC_FIXED` fields and when its tasks finished. No other field of an allocation
#: starts with ``_`` (the stand-in makes every one; a caller's job is under ``Job``).
ALLOC_PRIVATE = ("_fixed_json", "_finished_ns")
#: What an allocation's event leaves out of its object (its job is sent as ``null``).
_ALLOC_EVENT_LEFT_OUT = (*sorted(ALLOC_FIXED), *ALLOC_PRIVATE)


#: An allocation's fields that placement's count of a node's use reads.
_USAGE_FIELDS = frozenset({"NodeID", "Resources", "AllocatedResources"})
#: How many versions of a job Nomad keeps (its ``JobTrackedVersions``, the server's default).
JOB_TRACKED_VERSIONS = 6


def now_ns() -> int:
    return time.time_ns()


def rfc3339(ns: int | None = None) -> str:
    ns = time.time_ns() if ns is None else ns
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def _time_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def server_terminal(alloc: dict[str, Any]) -> bool:
    """Nomad's "terminal" for an alloc: the server wants it stopped or the client finished it."""
    return alloc["DesiredStatus"] in ("stop", "evict") or alloc["ClientStatus"] in TERMINAL_CLIENT


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


class ClusterState:
    """Nomad's server state for the stand-in (see the module docstring); the scheduler, the
    node table and the job table build on it (:class:`~rock_nomad.testing._cluster.Cluster`)."""

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
        #: (namespace, job ID) → that job's evaluations, oldest first; the blocked ones by ID
        #: (in the order they were made): a job's status and a freed node's retries read
        #: these, not every evaluation ever made.
        self.job_evals: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.blocked_evals: dict[str, dict[str, Any]] = {}
        self.allocs: dict[str, dict[str, Any]] = {}
        #: (namespace, job ID) → that job ID's allocations, oldest first (every version's)
        self.job_allocs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        #: Each node's allocations, and what they hold (placement's ``_used``, dropped when one
        #: of them is placed or changes).
        self.node_allocs: dict[str, list[dict[str, Any]]] = {}
        self.node_usage: dict[str, tuple[int, int, int, frozenset[int]]] = {}
        #: Placement's feasible nodes for each kind of ask, while the node table is as it was
        #: at ``_feasibility_index``.
        self._feasibility: dict[tuple[Any, ...], tuple[dict[str, Any], list[Any]]] = {}
        self._feasibility_index = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        #: Nomad Variables by (namespace, path)
        self.variables = VariableStore(lambda: self.bump("vars"))
        self.node_specs: dict[str, NodeSpec] = {}
        self._changed: asyncio.Event | None = None
        self._change_waiters: list[asyncio.Future[bool]] = []
        self.client: DockerClientSim | SimulatedClient | None = None
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

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next write (a new event after each; made when first asked for: most
        writes of a burst have nobody waiting on it)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def bump(self, *tables: str) -> int:
        self.index += 1
        for table in tables:
            self.tables[table] = self.index
        old, self._changed = self._changed, None
        if old is not None:
            old.set()
        waiters, self._change_waiters = self._change_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)
        return self.index

    async def next_change(self, timeout: float) -> bool:
        """Wait for the next write, at most ``timeout`` seconds; whether one came. One future
        and one timer (the event stream waits here after each batch of frames it sends; a task
        per wait, as ``asyncio.wait_for`` makes, cost more than the frames)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._change_waiters.append(waiter)
        timer = loop.call_later(timeout, _time_up, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()

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
        """Record an event for ``/v1/event/stream`` (the object as it is now; an allocation
        without its job, as Nomad sends it: "remove job info to help keep size of alloc event
        down", nomad/state/events.go)."""
        event: dict[str, Any] = {
            "Topic": topic,
            "Type": kind,
            "Key": key,
            "Namespace": namespace,
            "FilterKeys": filter_keys,
            "Index": self.index,
        }
        if topic == "Allocation":
            # What an allocation is given at placement (its resources and the placement's
            # metrics, half its JSON) is encoded once; each event encodes the rest.
            fixed = obj.get("_fixed_json")
            if fixed is None:
                fixed = obj["_fixed_json"] = _dumps({k: obj[k] for k in ALLOC_FIXED if k in obj})
            payload = obj.copy()  # in its order, less what is left out (a copy and 7 pops:
            for left_out in _ALLOC_EVENT_LEFT_OUT:  # a tenth of a filter of its 40 keys)
                payload.pop(left_out, None)
            payload["Job"] = None
            rest = _dumps(payload)
            text = '%s,"Payload":{"Allocation":%s%s%s}}' % (
                _dumps(event)[:-1],
                fixed[:-1],
                "," if len(fixed) > 2 and len(rest) > 2 else "",
                rest[1:],
            )
        elif topic == "Evaluation":  # the stand-in's own, with no private fields
            event["Payload"] = {topic: obj}
            text = _dumps(event)
        else:
            event["Payload"] = {topic: {k: v for k, v in obj.items() if not k.startswith("_")}}
            text = _dumps(event)
        self.events.append((self.index, topic, key, namespace, filter_keys or [], text))

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

    def as_registered(self, job: dict[str, Any]) -> dict[str, Any]:
        """The job as its current version was kept (not to be changed), while nothing changed
        it since (an allocation's copy of its job: most placements of a burst share it);
        else a copy of it as it is now."""
        for version in self.job_versions.get((job["Namespace"], job["ID"]), ()):
            if (
                version["Version"] == job["Version"]
                and version["ModifyIndex"] == job["ModifyIndex"]
            ):
                return version
        return json_copy(job)

    def _evals_of(self, namespace: str, job_id: str) -> list[dict[str, Any]]:
        return list(self.job_evals.get((namespace, job_id), ()))

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
        self.job_evals.setdefault((ev["Namespace"], ev["JobID"]), []).append(ev)
        if status == "blocked":
            self.blocked_evals[ev["ID"]] = ev
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
        if ev["Status"] == "blocked":
            self.blocked_evals[ev["ID"]] = ev
        else:
            self.blocked_evals.pop(ev["ID"], None)
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
        for eval_id in list(self.blocked_evals):
            self._enqueue(eval_id)

    # -- allocation updates ---------------------------------------------------------------------

    def _update_alloc(self, alloc: dict[str, Any], **fields: Any) -> None:
        was_terminal = server_terminal(alloc)
        was_done = alloc["ClientStatus"] in TERMINAL_CLIENT
        alloc.update(fields)
        if (
            was_terminal != server_terminal(alloc)
            or was_done != (alloc["ClientStatus"] in TERMINAL_CLIENT)
            or not _USAGE_FIELDS.isdisjoint(fields)
        ):
            # What the node's allocations hold changed (placement's ``_used``): a task's
            # progress (pending, running) leaves it as it is.
            self.node_usage.pop(alloc["NodeID"], None)
        if not ALLOC_FIXED.isdisjoint(fields):
            alloc.pop("_fixed_json", None)
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
