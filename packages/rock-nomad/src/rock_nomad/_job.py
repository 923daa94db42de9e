"""A sandbox as a Nomad job, and a Nomad allocation as a rock unit status.

The job (one per sandbox; its ID is the unit id):

- ``Type: batch``: no deployments; a task that ends stays ended;
- one group, ``Count: 1``, restart ``{Attempts: 0, Mode: fail}``, reschedule
  ``{Attempts: 0, Unlimited: false}`` and ``PreventRescheduleOnLost: true``: a sandbox that dies,
  or whose node is lost, is never started again elsewhere (its files would be gone anyway);
- one ``docker`` task, ``rocklet``, running the sandbox's image with the rocklet as its command
  (:func:`rock_core.rocklet_delivery.launch_command`), the rocklet fetched as an ``artifact``
  with its SHA-256 and mounted read-only at ``/rock``; the sandbox's secret is not in the job:
  a template reads it from the job's own Nomad Variable (:func:`secret_path`, which the runtime
  writes before it registers the job) into ``/secrets`` and the task's environment;
- the container on the node's Docker network :data:`SANDBOX_NETWORK` (``network_mode``; made by
  the node's operator with inter-container traffic disabled, deploy/nomad/client-setup.sh), so
  no sandbox connects to another, and a constraint that places the job only on nodes whose
  ``meta`` says they have it (:data:`NETWORK_META`): a node nobody prepared gets no sandbox;
- one dynamic port in host mode, ``rocklet`` (to 22555 in the container), published on the
  node's address: the rocklet refuses every caller without the sandbox's secret. Port 8080 is
  not published: the engine forwards it (and 22555) from its own 127.0.0.1 through the rocklet
  (:attr:`~rock_core.models.RuntimeStatus.forwarded_ports`), as on the Docker runtime;
- ``Meta``: the unit's labels (``rock.sandbox_id``, ``rock.owner``, ...), so that a restarted
  admin finds its sandboxes again from one job listing.

Resources (documented in the README): ``CPU`` (MHz) = ``cpus`` × ``mhz_per_cpu``; memory a hard
limit of ``memory`` (``MemoryMB``, no ``MemoryMaxMB``); without ``limit_cpus`` the CPU is a hard
limit too (``cpu_hard_limit``), with it the sandbox gets shares by ``cpus`` and may use idle CPU
of its node (Nomad has no ceiling apart from the reservation; the handle says so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from rock_core.models import ROCKLET_PORT, Port, PullPolicy, RuntimeStatus, SandboxSpec, UnitState
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.rocklet_delivery import (
    NO_PYTHON_EXIT_CODE,
    NO_PYTHON_LOG_LINE,
    ROCKLET_PYZ,
    RockletDelivery,
    launch_command,
)
from rock_core.sizes import MiB, format_size

__all__ = [
    "APP_PORT",
    "GROUP",
    "KEPT_CAPABILITIES",
    "NETWORK_META",
    "SANDBOX_NETWORK",
    "TASK",
    "describe_placement_failure",
    "job_for",
    "job_path",
    "latest_alloc",
    "secret_path",
    "status_of",
]

GROUP = "sandbox"
TASK = "rocklet"
APP_PORT = 8080
#: The capabilities a sandbox keeps (as on the Docker runtime); all are in the Docker driver's
#: default ``allow_caps``, so a Nomad client needs no configuration for them.
KEPT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETPCAP",
    "SETUID",
)
_SECOND = 1_000_000_000
#: Where the artifact puts the rocklet (relative to the task directory) and where the sandbox sees it.
ROCKLET_DIR = "local/rock"
ROCKLET_MOUNT = "/rock"
#: Where the sandbox's secret is rendered, relative to the task directory (``/secrets`` inside).
SECRET_FILE = "secrets/rocklet.env"
#: The item of the job's Variable that holds the secret.
SECRET_ITEM = "token"
#: The Docker network a sandbox's container joins on its node (``plugins.nomad.sandbox_network``):
#: made by the node's operator with inter-container traffic disabled (deploy/nomad/client-setup.sh).
SANDBOX_NETWORK = "rock-sandboxes"
#: The node ``meta`` key that says which network that is on a node prepared for rock; a sandbox's
#: job is only placed on nodes whose value names its network.
NETWORK_META = "rock_sandbox_network"


def job_path(job_id: str) -> str:
    """The API path of job ``job_id`` (``job/<id>``, the id quoted)."""
    return f"job/{quote(job_id, safe='')}"


def secret_path(job_id: str) -> str:
    """The Nomad Variable that holds a sandbox's secret: its job's own path, which the job's
    tasks may read through their workload identity and nobody needs ``read-job`` for."""
    return f"nomad/jobs/{job_id}"


def job_for(
    spec: SandboxSpec,
    *,
    job_id: str,
    labels: Mapping[str, str],
    rocklet: RockletDelivery,
    rocklet_url: str,
    datacenters: Sequence[str],
    node_pool: str | None,
    priority: int,
    mhz_per_cpu: int,
    kill_timeout: float,
    ephemeral_disk_mb: int,
    nofile_limit: int | None,
    sandbox_network: str = SANDBOX_NETWORK,
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """``(job, notes, security)`` for ``spec``: the job to register, what it cannot honour, and
    the hardening it applies.

    :param sandbox_network: the Docker network of every node that the sandbox's container joins.
    """
    notes: list[str] = []
    cpu_mhz = max(1, round(spec.cpus * mhz_per_cpu))
    memory_mb = max(10, math.ceil(spec.memory / MiB))
    capabilities = [*KEPT_CAPABILITIES, *(c for c in spec.cap_add if c not in KEPT_CAPABILITIES)]
    config: dict[str, Any] = {
        "image": spec.image,
        "command": "/bin/sh",
        "args": launch_command(f"{ROCKLET_MOUNT}/{ROCKLET_PYZ}", host="0.0.0.0", port=ROCKLET_PORT)[
            1:
        ],
        # The rocklet's folder of the task directory, read-only at /rock as on the Docker runtime
        # (a path relative to the task directory needs no docker.volumes on the client).
        "volumes": [f"{ROCKLET_DIR}:{ROCKLET_MOUNT}:ro"],
        "network_mode": sandbox_network,
        "ports": ["rocklet"],
        "cpu_hard_limit": spec.limit_cpus is None,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "cap_add": capabilities,
        "init": True,
    }
    if spec.pull is PullPolicy.ALWAYS:
        config["force_pull"] = True
    elif spec.pull is PullPolicy.NEVER:
        notes.append(
            "pull policy 'never' not honoured: a Nomad node pulls an image it does not have"
        )
    if spec.pids_limit is not None:
        config["pids_limit"] = spec.pids_limit
    if nofile_limit is not None:
        config["ulimit"] = {"nofile": f"{nofile_limit}:{nofile_limit}"}
    if spec.registry_username or spec.registry_password:
        config["auth"] = {
            "username": spec.registry_username or "",
            "password": spec.registry_password or "",
        }
    if spec.limit_cpus is not None:
        notes.append(
            f"limit_cpus {spec.limit_cpus:g} not enforced as a ceiling: on Nomad the sandbox reserves "
            f"{spec.cpus:g} CPUs ({cpu_mhz} MHz) and may use its node's idle CPU beyond them"
        )
    if spec.disk is not None:
        notes.append(
            f"disk limit {format_size(spec.disk)} not enforced: the Nomad docker driver does not limit a "
            f"container's writable layer (the group reserves {ephemeral_disk_mb} MB of ephemeral disk)"
        )
    if spec.num_gpus:
        notes.append(
            f"{spec.num_gpus} GPU(s) requested but the nomad runtime does not ask Nomad for devices"
        )
    task: dict[str, Any] = {
        "Name": TASK,
        "Driver": "docker",
        "Config": config,
        "Env": dict(spec.env) or None,
        "Resources": {"CPU": cpu_mhz, "MemoryMB": memory_mb},
        "Artifacts": [
            {
                "GetterSource": rocklet_url,
                "GetterOptions": {"checksum": rocklet.checksum},
                "GetterMode": "file",
                "RelativeDest": f"{ROCKLET_DIR}/{ROCKLET_PYZ}",
            }
        ],
        # The secret is nowhere in the job (not in Env, Meta or the template's text): the
        # template reads it from the job's Variable when the task starts (see the README).
        "Templates": [
            {
                "EmbeddedTmpl": f'{TOKEN_ENV}={{{{ with nomadVar "{secret_path(job_id)}" }}}}{{{{ .{SECRET_ITEM} }}}}{{{{ end }}}}\n',
                "DestPath": SECRET_FILE,
                "Envvars": True,
                "Perms": "0600",
                "ChangeMode": "noop",
            }
        ],
        "KillTimeout": int(kill_timeout * _SECOND),
        "LogConfig": {"MaxFiles": 2, "MaxFileSizeMB": 10},
    }
    group: dict[str, Any] = {
        "Name": GROUP,
        "Count": 1,
        "RestartPolicy": {
            "Attempts": 0,
            "Mode": "fail",
            "Interval": 60 * _SECOND,
            "Delay": 15 * _SECOND,
        },
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "PreventRescheduleOnLost": True,
        "EphemeralDisk": {"SizeMB": ephemeral_disk_mb},
        "Networks": [{"Mode": "host", "DynamicPorts": [{"Label": "rocklet", "To": ROCKLET_PORT}]}],
        "Tasks": [task],
    }
    job: dict[str, Any] = {
        "ID": job_id,
        "Name": spec.sandbox_id or job_id,
        "Type": "batch",
        "Priority": priority,
        "Datacenters": list(datacenters),
        "Meta": dict(labels),
        "TaskGroups": [group],
    }
    if node_pool:
        job["NodePool"] = node_pool
    constraints = [
        {"LTarget": f"${{meta.{NETWORK_META}}}", "RTarget": sandbox_network, "Operand": "="}
    ]
    if spec.image_os and spec.image_os != "linux":
        constraints.append(
            {"LTarget": "${attr.kernel.name}", "RTarget": spec.image_os, "Operand": "="}
        )
    job["Constraints"] = constraints
    security = {
        "network": f"docker network {sandbox_network} of its Nomad node (no traffic between sandboxes); "
        "only the rocklet published on the node",
        "pids_limit": spec.pids_limit,
        "nofile_limit": nofile_limit,
        "no_new_privileges": True,
        "capabilities": capabilities,
        "rocklet_auth": True,
    }
    return job, notes, security


def describe_placement_failure(failed: Mapping[str, Any]) -> str:
    """Nomad's reason a group could not be placed, from an evaluation's ``FailedTGAllocs``,
    in the words of ``nomad job status`` ("Resources exhausted on 3 nodes", ...)."""
    parts: list[str] = []
    for metric in failed.values():
        metric = metric or {}
        evaluated = metric.get("NodesEvaluated") or 0
        available = metric.get("NodesAvailable") or {}
        if evaluated == 0 and not any(available.values()):
            dcs = ", ".join(sorted(available)) or "the job's datacenters"
            parts.append(f"no node is ready in {dcs} (nodes evaluated: 0)")
            continue
        parts.append(f"{evaluated} node(s) evaluated")
        for key, count in sorted((metric.get("ClassFiltered") or {}).items()):
            parts.append(f"class {key!r} filtered {count} node(s)")
        for key, count in sorted((metric.get("ConstraintFiltered") or {}).items()):
            parts.append(f"constraint {key!r} filtered {count} node(s)")
            if f"meta.{NETWORK_META}" in key:
                parts.append(
                    f"a node takes rock's sandboxes once its operator made their isolated Docker network and set "
                    f"its meta {NETWORK_META} to that network's name (deploy/nomad/client-setup.sh; the name is "
                    "plugins.nomad.sandbox_network)"
                )
        if metric.get("NodesExhausted"):
            parts.append(f"resources exhausted on {metric['NodesExhausted']} node(s)")
        for key, count in sorted((metric.get("DimensionExhausted") or {}).items()):
            parts.append(f"dimension {key!r} exhausted on {count} node(s)")
        if metric.get("QuotaExhausted"):
            parts.append(f"quota exhausted: {', '.join(metric['QuotaExhausted'])}")
    return "Nomad could not place the sandbox: " + "; ".join(parts or ["no reason given"])


def latest_alloc(allocs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The job's newest allocation (a job of count 1 that is never rescheduled has one)."""
    if not allocs:
        return None
    return max(allocs, key=lambda a: (a.get("CreateIndex") or 0, a.get("CreateTime") or 0))


def _events(alloc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    state = (alloc.get("TaskStates") or {}).get(TASK) or {}
    return list(state.get("Events") or [])


def _time(text: Any) -> datetime | None:
    if not text or str(text).startswith("0001-01-01"):
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def failure_of(alloc: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``(reason, image_pull_failed)`` from an ended allocation's task events."""
    image_failed = False
    reason: str | None = None
    for event in _events(alloc):
        kind = event.get("Type")
        if kind == "Driver Failure":
            reason = str(
                event.get("DriverError") or event.get("DisplayMessage") or "driver failure"
            )
            image_failed = (
                image_failed
                or "failed to pull" in reason.lower()
                or "pull" in reason.lower()
                and "image" in reason.lower()
            )
        elif kind == "Failed Artifact Download":
            reason = f"the node could not fetch the rocklet: {event.get('DownloadError') or event.get('DisplayMessage')}"
        elif kind in ("Setup Failure", "Failed Validation"):
            reason = str(
                event.get("SetupError")
                or event.get("ValidationError")
                or event.get("DisplayMessage")
                or kind
            )
    return reason, image_failed


def _exit(alloc: Mapping[str, Any]) -> tuple[int | None, bool]:
    code: int | None = None
    oom = False
    for event in _events(alloc):
        if event.get("Type") == "Terminated":
            code = event.get("ExitCode")
            details = event.get("Details") or {}
            oom = (
                str(details.get("oom_killed", "")).lower() == "true"
                or event.get("Message") == "OOM Killed"
            )
    return code, oom


def status_of(
    alloc: Mapping[str, Any], *, ports: Sequence[Mapping[str, Any]] | None, stopped_by_us: bool
) -> RuntimeStatus:
    """The unit status an allocation stands for.

    :param ports: the allocation's ``AllocatedResources.Shared.Ports`` (a running one's address).
    :param stopped_by_us: the job was deregistered by the runtime (``Stop``): an ending
        allocation is exited, without an error.
    """
    client = alloc.get("ClientStatus")
    desired = alloc.get("DesiredStatus")
    state = (alloc.get("TaskStates") or {}).get(TASK) or {}
    node_name = alloc.get("NodeName") or None
    by_label = {p.get("Label"): p for p in ports or ()}
    node_address = next((p.get("HostIP") for p in by_label.values() if p.get("HostIP")), None)
    common: dict[str, Any] = {
        "node_name": node_name,
        "node_address": node_address,
        "started_at": _time(state.get("StartedAt")),
        "finished_at": _time(state.get("FinishedAt")),
    }
    if client == "running" and desired == "run" and not stopped_by_us:
        # Only the rocklet is published on the node; the engine forwards 22555 and 8080 from
        # its own host through it (``forwarded_ports``), as it does for Docker's sandboxes.
        rocklet = by_label.get("rocklet")
        return RuntimeStatus(
            state=UnitState.RUNNING,
            rocklet_host=rocklet.get("HostIP") if rocklet else None,
            rocklet_port=Port(int(rocklet["Value"])) if rocklet and rocklet.get("Value") else None,
            forwarded_ports=(Port(ROCKLET_PORT), Port(APP_PORT)),
            **common,
        )
    if client == "pending" and desired == "run" and not stopped_by_us:
        return RuntimeStatus(state=UnitState.CREATED, **common)
    code, oom = _exit(alloc)
    error: str | None = None
    if client == "lost":
        error = f"node lost: {node_name or 'its node'} is down ({alloc.get('DesiredDescription') or 'alloc is lost'})"
    elif oom:
        error = "OOM killed"
    elif not stopped_by_us:
        reason, _ = failure_of(alloc)
        if code == NO_PYTHON_EXIT_CODE and reason is None:
            error = NO_PYTHON_LOG_LINE
        elif reason is not None:
            error = reason
        elif desired in ("stop", "evict") and alloc.get("DesiredDescription"):
            error = f"stopped by Nomad: {alloc['DesiredDescription']}"
    return RuntimeStatus(
        state=UnitState.EXITED, exit_code=code, oom_killed=oom, error=error, **common
    )
