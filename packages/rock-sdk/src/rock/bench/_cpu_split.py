"""Where the machine's CPU went while a bench's containers started: split by process group.

``rock bench scale`` takes a :func:`cpu_snapshot` when a phase's starts begin and another when
the last one runs (rock's starts, and each Docker floor's), and :func:`cpu_split` turns the two
into milliseconds of CPU per start for each group of :data:`GROUPS`:

- ``dockerd``, ``containerd``: the two daemons (and whatever short-lived children they reaped
  meanwhile: each ``containerd-shim ... start`` that spawns a shim and exits counts in
  ``containerd``);
- ``shim_runc``: the ``containerd-shim*`` processes and ``runc`` (a ``runc`` that ended within the
  window counts through the shim that reaped it);
- ``containers``: the containers' own processes, from the cgroup ``cpuacct`` total of Docker's
  parent cgroup (every container's, kept after a container is gone; other containers on the
  host count too);
- ``admin``: the engine's process (the admin server's pid, or the bench's own when embedded,
  where ``client`` is then 0: it is the same process); ``client``: the bench's process
  (the trainer's SDK);
- ``kernel_threads``: kernel threads (``kworker``, ``ksoftirqd``, ...);
- ``other``: every other process outside the containers (other work on the host);
- ``unattributed``: the machine's busy CPU (``/proc/stat``, steal excluded) that no group above
  accounts for: interrupts, and processes that ended unreaped by a counted parent.

A process's CPU is its own user and system time plus that of the children it reaped
(``/proc/<pid>/stat`` fields 14-17), counted from the first snapshot to the second (all of it for
a process that began in between; for a child that ended in between, what it had used before the
first snapshot is taken off its parent's group). Reading ``/proc`` costs the bench a few ms per snapshot.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from rock.bench._host import machine_busy_seconds

__all__ = ["CPU_SPLIT_ROWS", "GROUPS", "CpuSnapshot", "cpu_snapshot", "cpu_split", "split_line"]

#: The groups, in the order they are printed.
GROUPS = (
    "dockerd",
    "containerd",
    "shim_runc",
    "containers",
    "admin",
    "client",
    "kernel_threads",
    "other",
    "unattributed",
)
# Docker's parent cgroup of every container (cgroup v1 cgroupfs, v1 systemd, v2 cgroupfs).
_CONTAINER_CGROUPS = (
    ("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage", 1e-9),
    ("/sys/fs/cgroup/cpuacct/system.slice/cpuacct.usage", 1e-9),
    ("/sys/fs/cgroup/docker/cpu.stat", 1e-6),
)
_TICK = os.sysconf("SC_CLK_TCK")

#: ``(process key, group)`` -> CPU seconds, with the containers' total and the machine's busy time.
CpuSnapshot = dict[str, Any]


def _containers_seconds() -> float | None:
    for path, unit in _CONTAINER_CGROUPS:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read()
        except OSError:
            continue
        if path.endswith("cpu.stat"):  # v2: "usage_usec N" first
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * unit
            continue
        return int(text) * unit
    return None


def _in_container(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return "/docker/" in text or "/docker-" in text


def _group(pid: int, ppid: int, comm: str, admin: int | None, client: int) -> str:
    if pid == admin:
        return "admin"
    if pid == client:
        return "client"
    if comm == "dockerd":
        return "dockerd"
    if comm == "containerd":
        return "containerd"
    if comm.startswith("containerd-shim") or comm == "runc":
        return "shim_runc"
    if pid == 2 or ppid == 2:
        return "kernel_threads"
    return "other"


def cpu_snapshot(admin_pid: int | None, client_pid: int | None = None) -> CpuSnapshot:
    """Every process's CPU so far (outside the containers), by group, and the containers' and
    the machine's totals (blocking; a few ms)."""
    client = os.getpid() if client_pid is None else client_pid
    processes: dict[tuple[int, int], tuple[str, float, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.find("(") + 1 : text.rfind(")")]
        fields = text[text.rfind(")") + 2 :].split()
        with contextlib.suppress(ValueError, IndexError):
            pid, ppid = int(name), int(fields[1])
            group = _group(pid, ppid, comm, admin_pid, client)
            if group == "other" and _in_container(name):
                continue
            seconds = sum(int(v) for v in fields[11:15]) / _TICK
            processes[(pid, int(fields[19]))] = (group, seconds, ppid)
    return {
        "processes": processes,
        "containers": _containers_seconds(),
        "machine": machine_busy_seconds(),
    }


def cpu_split(
    before: CpuSnapshot, after: CpuSnapshot, starts: int, *, embedded: bool = False
) -> dict[str, float]:
    """Milliseconds of CPU per start of each group of :data:`GROUPS` between two snapshots
    (``{}`` when nothing started or the machine's time is unreadable); ``embedded``: the engine
    runs in the bench's process, counted as ``admin`` and ``client`` is 0."""
    if starts <= 0 or before.get("machine") is None or after.get("machine") is None:
        return {}
    seconds = dict.fromkeys(GROUPS, 0.0)
    old, new = before["processes"], after["processes"]
    for key, (group, total, _) in new.items():
        was = old.get(key)
        seconds[group] += max(0.0, total - (was[1] if was is not None else 0.0))
    # A process that ended meanwhile brought all its CPU into its parent's count of reaped
    # children, the part before the first snapshot too: that part is taken off the parent's group
    # (not for kernel threads, whose parent counts none of theirs).
    groups = {pid: group for (pid, _), (group, _, _) in old.items()}
    alive = {pid for pid, _ in new}
    for key, (_, total, ppid) in old.items():
        if key not in new and ppid != 2 and ppid in alive and ppid in groups:
            seconds[groups[ppid]] -= total
    if embedded:
        seconds["admin"] += seconds["client"]
        seconds["client"] = 0.0
    if before["containers"] is not None and after["containers"] is not None:
        seconds["containers"] = after["containers"] - before["containers"]
    machine = after["machine"] - before["machine"]
    seconds["unattributed"] = machine - sum(v for k, v in seconds.items() if k != "unattributed")
    return {k: round(1000 * v / starts, 1) for k, v in seconds.items()}


def split_line(split: dict[str, float]) -> str:
    """``dockerd 95.1, containerd 12.0, ...`` (ms per start) for what a bench says."""
    return ", ".join(f"{k} {v:g}" for k, v in split.items())


def _rows() -> tuple[tuple[str, str], ...]:
    rows: list[tuple[str, str]] = []
    for group in GROUPS:
        rows.append((f"cpu_ms_per_start_{group}", f"CPU per start: {group} (ms)"))
        rows.append(
            (f"floor_cpu_ms_per_start_{group}", f"docker floor: CPU per start: {group} (ms)")
        )
    return tuple(rows)


#: The table rows of the split (``rock bench scale``): rock's and the floors' mean, per group.
CPU_SPLIT_ROWS = _rows()


def flat(prefix: str, split: dict[str, float]) -> dict[str, float]:
    """``split`` as flat figures: ``{prefix}{group}``."""
    return {f"{prefix}{k}": v for k, v in split.items()}


def floor_split_mean(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The mean split of the floor runs that have one, as ``floor_cpu_ms_per_start_*``."""
    splits = [run["cpu_split"] for run in runs if run.get("cpu_split")]
    if not splits:
        return {}
    return {
        f"floor_cpu_ms_per_start_{k}": round(sum(s.get(k, 0.0) for s in splits) / len(splits), 1)
        for k in GROUPS
    }


def measured(
    admin_pid: int | None, starts: Callable[[], int], embedded: bool = False
) -> Callable[[], dict[str, float]]:
    """Take a snapshot now; the returned function takes the second and gives the split for the
    number of starts ``starts()`` says then."""
    before = cpu_snapshot(admin_pid)
    return lambda: cpu_split(before, cpu_snapshot(admin_pid), starts(), embedded=embedded)
