"""The stand-in's client nodes: registering one (its resources, attributes, drivers and
Docker networks), and a node going down, coming back or changing its eligibility (which
reschedules or wakes the evaluations that wait for capacity)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from rock_nomad.testing._model import (
    NomadError,
)
from rock_nomad.testing._state import (
    LOST_DESCRIPTION,
    TERMINAL_CLIENT,
    ClusterState,
    NodeSpec,
    rfc3339,
)

__all__ = ["NodeTable"]


class NodeTable(ClusterState):
    """The cluster's nodes."""

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
