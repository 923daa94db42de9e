"""What every part of a stand-in task runner stands on: its allocation, node and task, the
task events it reports (Nomad's), the faults a test injects, and the blocking Docker calls it
makes in worker threads."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors

from rock_nomad.testing._alloc_tasks import AllocTask
from rock_nomad.testing._state import NodeSpec, rfc3339

if TYPE_CHECKING:
    from rock_nomad.testing._client import DockerClientSim

log = logging.getLogger("rock_nomad.testing")

__all__ = [
    "CHECKSUMS",
    "DEFAULT_NETWORK",
    "Faults",
    "INTERPOLATION",
    "KNOWN_CONFIG",
    "LABEL_OWNER",
    "LABEL_SERVER",
    "LOG_KEEP",
    "TaskBase",
    "TaskFailed",
    "create_container",
    "docker_text",
    "image_present",
    "one_map",
    "oom_killed",
    "remove_dir",
]

#: Label keys of every container the stand-in makes (never ``rock.*``: rock's own reapers
#: look for those, and must leave the stand-in's containers alone).
LABEL_SERVER = "nomad-stand-in.server"
LABEL_OWNER = "nomad-stand-in.owner"
#: Docker's built-in network, which every node has: what ``network_mode`` unset, ``bridge`` or
#: ``default`` means. Made with Docker's default options (containers may connect to each other).
DEFAULT_NETWORK = "bridge"

#: The docker driver ``Config`` keys the stand-in understands. Any other key fails the task with
#: "Failed Validation", as an unknown key fails Nomad's own config decoding.
KNOWN_CONFIG = {
    "image",
    "command",
    "args",
    "entrypoint",
    "work_dir",
    "ports",
    "labels",
    "network_mode",
    "hostname",
    "volumes",
    "mount",
    "mounts",
    "cap_add",
    "cap_drop",
    "init",
    "tty",
    "interactive",
    "shm_size",
    "pids_limit",
    "security_opt",
    "sysctl",
    "ulimit",
    "readonly_rootfs",
    "dns_servers",
    "extra_hosts",
    "runtime",
    "oom_score_adj",
    "force_pull",
    "image_pull_timeout",
    "cpu_hard_limit",
    "cpu_cfs_period",
    "memory_hard_limit",
    "privileged",
    "auth_soft_fail",
    "logging",
    "healthchecks",
    "group_add",
    "ipc_mode",
    "pid_mode",
    "uts_mode",
    "userns_mode",
}
CHECKSUMS = {
    "md5": hashlib.md5,
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}
INTERPOLATION = re.compile(r"\$\{([^}]+)\}")
LOG_KEEP = 256 * 1024


class TaskFailed(Exception):
    """A task setup step failed: the event to report (it fails the task)."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event["DisplayMessage"])
        self.event = event


@dataclass
class Faults:
    """Faults the stand-in injects (see :class:`~rock_nomad.testing.StandInNomad`'s hooks)."""

    #: image pattern (fnmatch) → error text for pulls that must fail
    image_pull_failures: dict[str, str] = field(default_factory=dict)
    #: seconds a client waits before it sets up a new allocation (a slow node)
    start_delay: float = 0.0


class TaskBase(AllocTask["DockerClientSim"]):
    """One task of one allocation on one node (see :class:`~rock_nomad.testing._client.TaskRunner`)."""

    def __init__(
        self,
        sim: DockerClientSim,
        alloc: dict[str, Any],
        task: dict[str, Any],
        node: dict[str, Any],
        spec: NodeSpec,
    ) -> None:
        super().__init__(sim, alloc, task, node)
        self.spec = spec
        self.container_id: str | None = None
        self.exited: asyncio.Future[int] | None = None
        self.injected: tuple[str, int] | None = None
        self.oom_seen = False
        self.logs = {"stdout": b"", "stderr": b""}
        self.job_type = alloc["Job"]["Type"]
        self.group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])

    # -- reporting -----------------------------------------------------------------------------

    def fail(self, event: dict[str, Any]) -> None:
        self.sim.cluster.client_update(
            self.alloc_id,
            task=self.name,
            event=event,
            State="dead",
            Failed=True,
            FinishedAt=rfc3339(),
        )


def create_container(client: docker.DockerClient, image: str, kwargs: dict[str, Any]) -> str:
    """``containers.create(image, **kwargs)`` without the inspect that docker's SDK makes of the
    new container to return a model object: its id is all the stand-in keeps (one API call less
    per task, which counted when 100 tasks start at once)."""
    from rock_nomad.testing._docker_private import create_container_args

    return str(client.api.create_container(**create_container_args(client, image, kwargs))["Id"])


def image_present(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def oom_killed(client: docker.DockerClient, container_id: str | None) -> bool:
    if container_id is None:
        return False
    try:
        return bool(client.api.inspect_container(container_id)["State"].get("OOMKilled"))
    except docker.errors.DockerException:
        return False


def docker_text(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


def one_map(value: Any) -> dict[str, Any]:
    """Nomad's JSON form of a map block is a list of maps; accept both."""
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            out.update(item or {})
        return out
    return dict(value)


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
