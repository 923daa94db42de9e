"""Resource use of running containers, read from their cgroups on this host.

``docker stats`` asks the daemon, which reads the same files and, unless told ``one-shot``, waits
a second for a second sample: far too slow for hundreds of containers every few seconds. When the
engine runs on the Docker host (the usual case), :func:`read_stats` reads the cgroup files
itself: a few small reads per container, a few hundred microseconds. cgroup v1 (``cgroupfs`` or
``systemd`` driver) and v2 are both understood; a container whose cgroup is not found here (a
remote daemon) is measured through the API instead (:func:`stats_from_api`).

Memory in use is what ``docker stats`` shows: usage less the inactive file cache, which the
kernel reclaims before it would OOM-kill anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import docker
import docker.errors

from rock_core.models import UnitStats

__all__ = ["CgroupFinder", "read_stats", "sample_stats", "stats_from_api"]

_ROOT = Path("/sys/fs/cgroup")
# A limit this high is no limit (cgroup v1 writes PAGE_COUNTER_MAX rounded to pages).
_NO_LIMIT = 1 << 62


def _read(path: Path) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _keyed(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


class CgroupFinder:
    """Where a container's cgroup directories are on this host (cached per container).

    :param root: the cgroup file system's mount point.
    """

    def __init__(self, root: Path = _ROOT) -> None:
        self.root = root
        self.v2 = (root / "cgroup.controllers").exists()
        self._found: dict[str, dict[str, Path] | None] = {}

    def dirs(self, container_id: str) -> dict[str, Path] | None:
        """``{"cpu", "memory", "pids"}`` directories of the container, or ``None`` if not on this host."""
        if container_id not in self._found:
            self._found[container_id] = self._find(container_id)
        return self._found[container_id]

    def forget(self, keep: set[str]) -> None:
        """Drop cached paths of containers not in ``keep`` (gone)."""
        for container_id in [c for c in self._found if c not in keep]:
            del self._found[container_id]

    def _find(self, container_id: str) -> dict[str, Path] | None:
        names = (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope")
        if self.v2:
            for name in names:
                path = self.root / name
                if (path / "cgroup.procs").exists():
                    return {"cpu": path, "memory": path, "pids": path}
            return None
        for name in names:
            dirs = {
                "cpu": self.root / "cpuacct" / name,
                "memory": self.root / "memory" / name,
                "pids": self.root / "pids" / name,
            }
            if (dirs["memory"] / "memory.usage_in_bytes").exists():
                return dirs
        return None


def _network(pid: int | None) -> tuple[int | None, int | None]:
    """Bytes received and sent on every interface but loopback of ``pid``'s network namespace."""
    if pid is None:
        return None, None
    text = _read(Path(f"/proc/{pid}/net/dev"))
    if text is None:
        return None, None
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        fields = rest.split()
        if len(fields) >= 9:
            rx += int(fields[0])
            tx += int(fields[8])
    return rx, tx


def read_stats(finder: CgroupFinder, container_id: str) -> UnitStats | None:
    """One sample of the container's use from its cgroup files; ``None`` when they are not here."""
    dirs = finder.dirs(container_id)
    if dirs is None:
        return None
    memory, pids_dir = dirs["memory"], dirs["pids"]
    procs = (_read(pids_dir / "cgroup.procs") or "").split()
    pid = int(procs[0]) if procs else None
    rx, tx = _network(pid)
    if finder.v2:
        cpu = _keyed(dirs["cpu"] / "cpu.stat").get("usage_usec")
        usage = _int(memory / "memory.current")
        if cpu is None or usage is None:
            return None
        stat = _keyed(memory / "memory.stat")
        return UnitStats(
            cpu_seconds=cpu / 1e6,
            memory_bytes=max(0, usage - stat.get("inactive_file", 0)),
            memory_peak_bytes=_int(memory / "memory.peak"),
            memory_limit_bytes=_int(memory / "memory.max"),
            network_rx_bytes=rx,
            network_tx_bytes=tx,
            pids=_int(pids_dir / "pids.current"),
            oom_kills=_keyed(memory / "memory.events").get("oom_kill", 0),
        )
    cpu_ns = _int(dirs["cpu"] / "cpuacct.usage")
    usage = _int(memory / "memory.usage_in_bytes")
    if cpu_ns is None or usage is None:
        return None
    stat = _keyed(memory / "memory.stat")
    limit = _int(memory / "memory.limit_in_bytes")
    return UnitStats(
        cpu_seconds=cpu_ns / 1e9,
        memory_bytes=max(0, usage - stat.get("total_inactive_file", 0)),
        memory_peak_bytes=_int(memory / "memory.max_usage_in_bytes"),
        memory_limit_bytes=limit if limit is not None and limit < _NO_LIMIT else None,
        network_rx_bytes=rx,
        network_tx_bytes=tx,
        pids=_int(pids_dir / "pids.current"),
        oom_kills=_keyed(memory / "memory.oom_control").get("oom_kill", 0),
    )


def stats_from_api(doc: dict[str, Any]) -> UnitStats | None:
    """A sample from the Docker API's ``/containers/{id}/stats?stream=false&one-shot=true``."""
    cpu = ((doc.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    memory = doc.get("memory_stats") or {}
    usage = memory.get("usage")
    if cpu is None or usage is None:
        return None
    stat = memory.get("stats") or {}
    inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    networks = (doc.get("networks") or {}).values()
    rx = sum(n.get("rx_bytes", 0) for n in networks) if doc.get("networks") else None
    tx = sum(n.get("tx_bytes", 0) for n in networks) if doc.get("networks") else None
    limit = memory.get("limit")
    return UnitStats(
        cpu_seconds=cpu / 1e9,
        memory_bytes=max(0, usage - inactive),
        memory_peak_bytes=memory.get("max_usage"),
        memory_limit_bytes=limit if limit and limit < _NO_LIMIT else None,
        network_rx_bytes=rx,
        network_tx_bytes=tx,
        pids=(doc.get("pids_stats") or {}).get("current"),
        oom_kills=0,
    )


def on_this_host() -> bool:
    """Whether cgroup files can be read here at all."""
    return os.path.isdir(_ROOT)


def sample_stats(
    api: docker.APIClient, finder: CgroupFinder, labels: dict[str, list[str]]
) -> dict[str, UnitStats]:
    """A sample of every running container that ``docker ps`` lists with ``labels`` (its label
    filter), by container id: one ``docker ps`` call, then each container's cgroup files read
    on this host; a container whose cgroup is not here (a remote daemon) is asked through the
    API (``stats``, one-shot). Blocking."""
    rows = api.containers(all=False, filters={**labels, "status": ["running"]})
    found: dict[str, UnitStats] = {}
    for row in rows:
        measured = read_stats(finder, row["Id"])
        if measured is None:
            try:
                measured = stats_from_api(api.stats(row["Id"], stream=False, one_shot=True))
            except docker.errors.APIError:
                measured = None  # gone meanwhile
        if measured is not None:
            found[row["Id"]] = measured
    finder.forget({row["Id"] for row in rows})
    return found
