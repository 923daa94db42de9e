"""What a stand-in leaves behind, and how a later one finds it: every container, network and
work folder carries the owning process (``<host>:<pid>:<process start>``), and a stand-in that
starts removes those whose owner is gone (one that crashed)."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path

import docker
import docker.errors

from rock_nomad.testing._client import LABEL_OWNER, remove_dir

__all__ = ["WORK_DIR_PREFIX", "owner_alive", "owner_tag", "remove_leftovers", "remove_network"]

log = logging.getLogger("rock_nomad.testing")

#: The name of each stand-in's work folder begins so (in the system's temporary folder).
WORK_DIR_PREFIX = "nomad-stand-in-"


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """``<host>:<pid>:<process start>``: names this process so that leftovers can be judged later."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_process_start(pid) or '?'}"


def owner_alive(owner: str) -> bool:
    """Whether the process an :func:`owner_tag` names still runs (an owner of another host counts
    as alive: the stand-in never touches what it cannot judge)."""
    try:
        host, pid, start = owner.rsplit(":", 2)
        pid_n = int(pid)
    except ValueError:
        return True
    if host != socket.gethostname():
        return True
    return _process_start(pid_n) == start if start != "?" else os.path.exists(f"/proc/{pid_n}")


def remove_leftovers(client: docker.DockerClient, work_root: Path | None = None) -> list[str]:
    """Remove containers (and work directories) of stand-ins whose process is gone; return the
    container ids removed."""
    removed = []
    for container in client.containers.list(
        all=True, filters={"label": LABEL_OWNER}, ignore_removed=True
    ):
        owner = container.labels.get(LABEL_OWNER, "")
        if owner and not owner_alive(owner):
            try:
                container.remove(force=True, v=True)
                removed.append(container.id)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                log.warning(
                    "stand-in: could not remove leftover container %s: %s", container.id, exc
                )
    for network in client.api.networks(filters={"label": LABEL_OWNER}):
        owner = (network.get("Labels") or {}).get(LABEL_OWNER, "")
        if owner and not owner_alive(owner):
            remove_network(client, network["Id"])
    root = work_root or Path(tempfile.gettempdir())
    for path in root.glob(f"{WORK_DIR_PREFIX}*"):
        owner_file = path / "owner"
        try:
            owner = owner_file.read_text().strip()
        except OSError:
            continue
        if not owner_alive(owner):
            remove_dir(path)
    return removed


def remove_network(client: docker.DockerClient, network_id: str) -> bool:
    """Remove a network of a stand-in; ``False`` when Docker refused (still in use)."""
    try:
        client.api.remove_network(network_id)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        log.debug("stand-in: removing network %s: %s", network_id, exc)
        return False
    return True
