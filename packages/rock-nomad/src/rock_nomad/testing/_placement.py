"""The stand-in scheduler's placement: which node fits a task group (binpack or spread, with
Nomad's constraints, resources and ``FailedTGAllocs`` metrics when none does), its ports, and
the allocation placed there."""

from __future__ import annotations

import fnmatch
import socket
import uuid
from typing import Any

from rock_nomad.testing._model import (
    NomadError,
)
from rock_nomad.testing._state import (
    RESCHEDULED_DESCRIPTION,
    TERMINAL_CLIENT,
    ZERO_TIME,
    ClusterState,
    NodeSpec,
    json_copy,
    now_ns,
    server_terminal,
    task_event,
)

__all__ = ["Placement", "slot_of"]


class Placement(ClusterState):
    """Placing allocations on the cluster's nodes."""

    # -- placement ----------------------------------------------------------------------------

    def _used(self, node_id: str) -> tuple[int, int, int, frozenset[int]]:
        """What the node's allocations hold: CPU, memory, disk and ports. Kept per node until
        an allocation of the node is placed or changes (every change goes through
        ``_update_alloc``): a placement reads every node's, which was a walk over every
        allocation ever made per node and placement, quadratic in a burst of thousands. The
        ports are the cache's own (a placement that picks more copies them)."""
        cached = self.node_usage.get(node_id)
        if cached is None:
            cpu = mem = disk = 0
            ports: set[int] = set()
            for alloc in self.node_allocs.get(node_id, ()):
                if not server_terminal(alloc):
                    cpu += alloc["Resources"]["CPU"]
                    mem += alloc["Resources"]["MemoryMB"]
                    disk += alloc["Resources"]["DiskMB"]
                if not server_terminal(alloc) or alloc["ClientStatus"] not in TERMINAL_CLIENT:
                    ports.update(
                        p["Value"] for p in alloc["AllocatedResources"]["Shared"]["Ports"] or []
                    )
            cached = self.node_usage[node_id] = (cpu, mem, disk, frozenset(ports))
        return cached

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
        counts, feasible = self._feasible(job, group)
        metric["NodesInPool"] = counts["NodesInPool"]
        metric["NodesAvailable"] = dict(counts["NodesAvailable"])
        metric["NodesEvaluated"] = counts["NodesEvaluated"]
        metric["NodesFiltered"] = counts["NodesFiltered"]
        if counts["ConstraintFiltered"] is not None:
            metric["ConstraintFiltered"] = dict(counts["ConstraintFiltered"])
        same_ask = None
        if not any(task["Resources"].get("Cores") for task in group["Tasks"]):
            same_ask = self._group_ask(group, NodeSpec("", ""))  # no node's cores needed
        reserved = {
            p["Value"]
            for net in group.get("Networks") or []
            for p in net.get("ReservedPorts") or []
        }
        # The best node so far (the first of the best, as ``max``/``min`` of a list of them
        # would pick): a placement reads every feasible node, 50 of them in a bench.
        best: dict[str, Any] | None = None
        best_util = 0.0
        binpack = self.algorithm == "binpack"
        usage = self.node_usage
        specs = self.node_specs
        for node in feasible:
            node_id = node["ID"]
            spec = specs[node_id]
            used = usage.get(node_id)
            if used is None:
                used = self._used(node_id)
            used_cpu, used_mem, used_disk, used_ports = used
            ask_cpu, ask_mem, ask_disk = same_ask or self._group_ask(group, spec)
            exhausted = None
            if used_cpu + ask_cpu > spec.cpu_mhz:
                exhausted = "cpu"
            elif used_mem + ask_mem > spec.memory_mb:
                exhausted = "memory"
            elif used_disk + ask_disk > spec.disk_mb:
                exhausted = "disk"
            elif reserved and not reserved.isdisjoint(used_ports):
                exhausted = "network: reserved port collision"
            if exhausted:
                metric["NodesExhausted"] += 1
                _count(metric, "DimensionExhausted", exhausted)
                continue
            util = ((used_cpu + ask_cpu) / spec.cpu_mhz + (used_mem + ask_mem) / spec.memory_mb) / 2
            if best is None or (util > best_util if binpack else util < best_util):
                best, best_util = node, util
        if best is None:
            return None, metric
        node, util = best, best_util
        score = util if binpack else 1 - util
        metric["ScoreMetaData"] = [
            {"NodeID": node["ID"], "Scores": {self.algorithm: score}, "NormScore": score}
        ]
        return node, metric

    def _feasible(
        self, job: dict[str, Any], group: dict[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The nodes a group may run on (its job's pool and datacenters, ready and eligible,
        with its drivers, meeting its constraints), in node order, and the metric's counts of
        that filtering. Kept until the node table changes, for each pool, datacenters, drivers
        and constraints asked (Nomad's scheduler likewise remembers which node classes a job
        is eligible on, instead of checking every node for each placement)."""
        drivers = sorted({t["Driver"] for t in group["Tasks"]})
        constraints = (job.get("Constraints") or []) + (group.get("Constraints") or [])
        for task in group["Tasks"]:
            constraints += task.get("Constraints") or []
        pool = job.get("NodePool")
        key = (pool, tuple(job["Datacenters"]), tuple(drivers), repr(constraints))
        if self._feasibility_index != self.tables["nodes"]:
            self._feasibility.clear()
            self._feasibility_index = self.tables["nodes"]
        known = self._feasibility.get(key)
        if known is not None:
            return known
        counts: dict[str, Any] = {
            "NodesInPool": 0,
            "NodesAvailable": {},
            "NodesEvaluated": 0,
            "NodesFiltered": 0,
            "ConstraintFiltered": None,
        }
        feasible = []
        for node in self.nodes.values():
            if pool not in ("all", None) and node["NodePool"] != pool:
                continue
            counts["NodesInPool"] += 1
            if node["Status"] != "ready" or node["SchedulingEligibility"] != "eligible":
                continue
            if not any(fnmatch.fnmatchcase(node["Datacenter"], dc) for dc in job["Datacenters"]):
                continue
            counts["NodesAvailable"][node["Datacenter"]] = (
                counts["NodesAvailable"].get(node["Datacenter"], 0) + 1
            )
            counts["NodesEvaluated"] += 1
            missing = [d for d in drivers if d not in node["Drivers"]]
            if missing:
                _count(counts, "ConstraintFiltered", "missing drivers")
                counts["NodesFiltered"] += 1
                continue
            failed = next((c for c in constraints if not _constraint_holds(c, node)), None)
            if failed is not None:
                _count(
                    counts,
                    "ConstraintFiltered",
                    f"{failed.get('LTarget', '')} {failed.get('Operand', '=')} "
                    f"{failed.get('RTarget', '')}".strip(),
                )
                counts["NodesFiltered"] += 1
                continue
            feasible.append(node)
        self._feasibility[key] = (counts, feasible)
        return counts, feasible

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
        used_ports = set(self._used(node["ID"])[3])
        shared_networks = []
        ports = []
        for net in group.get("Networks") or []:
            net = json_copy(net)
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
            "Job": self.as_registered(job),
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
        self.node_allocs.setdefault(node["ID"], []).append(alloc)
        held = self.node_usage.get(node["ID"])
        if held is not None:  # what ``_used`` would count again, walking the node's allocations
            self.node_usage[node["ID"]] = (
                held[0] + total_cpu,
                held[1] + total_mem,
                held[2] + disk,
                held[3].union(p["Value"] for p in ports),
            )
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


def slot_of(name: str) -> int:
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
    table: dict[str, str] | None = None
    if name.startswith("attr."):
        table = node["Attributes"]
    elif name.startswith("meta."):
        table = node.get("Meta") or {}
    if table is not None:
        return table.get(name[5:])
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
