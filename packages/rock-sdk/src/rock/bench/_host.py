"""What the host says about a bench's processes and containers: ``/proc``, the containers'
cgroups and ``docker ps``/``docker inspect`` (the Docker CLI, as a person would check), and the
wait until a run's containers are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from rock.bench.admin import proc_kib_bytes, rss_bytes

__all__ = [
    "cgroup_procs_file",
    "containers",
    "cpu_seconds",
    "docker",
    "host_memory",
    "machine_busy_seconds",
    "machine_steal_seconds",
    "mb",
    "steal_percent",
    "wait_gone",
    "with_processes",
]

# The rocklet's port inside the container (published on the host, one docker-proxy each, only
# with the docker runtime's publish_ports=True: by default the engine forwards it itself).
_ROCKLET_PORT = "22555/tcp"


def cpu_seconds(pid: int, *, main_thread: bool = False) -> float | None:
    """User plus system CPU seconds process ``pid`` has used (``None`` if unreadable);
    ``main_thread``: its main thread's only (an admin's event loop, without its other threads)."""
    path = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_times() -> list[int] | None:
    """``/proc/stat``'s first line: user, nice, system, idle, iowait, irq, softirq, steal."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return values if len(values) == 8 else None


def machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (every core, every process and
    the kernel; ``/proc/stat``'s first line less idle, iowait and steal), ``None`` if unreadable.

    Steal is time a virtual machine's cores were ready but the hypervisor ran something else:
    no process here used it, so it is not counted (see :func:`machine_steal_seconds`)."""
    values = _machine_times()
    if values is None:
        return None
    return (sum(values) - values[3] - values[4] - values[7]) / os.sysconf("SC_CLK_TCK")


def machine_steal_seconds() -> float | None:
    """CPU seconds since boot the hypervisor took from this virtual machine's cores (``steal``;
    0 on bare metal), ``None`` if unreadable. A bench prints the share stolen while it measured
    (:func:`steal_percent`): where it is high, every figure of the run is slower than the code."""
    values = _machine_times()
    return None if values is None else values[7] / os.sysconf("SC_CLK_TCK")


def steal_percent(before: float | None, after: float | None, wall_seconds: float) -> float | None:
    """The share (percent) of all cores' time over ``wall_seconds`` that was stolen between two
    :func:`machine_steal_seconds` readings; ``None`` if either is missing."""
    if before is None or after is None or wall_seconds <= 0:
        return None
    return round(100 * (after - before) / (wall_seconds * (os.cpu_count() or 1)), 1)


def docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def containers(prefix: str, timeout: float = 120) -> list[str]:
    """Ids of every container (any state) of this point: rock's label and the point's names."""
    out = docker(
        "ps",
        "-a",
        "-q",
        "--no-trunc",
        "--filter",
        "label=rock.sandbox_id",
        "--filter",
        f"name=^{prefix}",
        timeout=timeout,
    )
    return out.split()


def _cgroup_memory(container_id: str) -> tuple[int, int] | None:
    """``(usage, working set)`` bytes of a container's memory cgroup (v1 or v2, cgroupfs or systemd)."""
    for base, usage_file, inactive_key in (
        (
            f"/sys/fs/cgroup/memory/docker/{container_id}",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
        (
            f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
        (f"/sys/fs/cgroup/docker/{container_id}", "memory.current", "inactive_file"),
        (
            f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
            "memory.current",
            "inactive_file",
        ),
    ):
        try:
            with open(f"{base}/{usage_file}", encoding="ascii") as f:
                usage = int(f.read())
            inactive = 0
            with open(f"{base}/memory.stat", encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == inactive_key:
                        inactive = int(value)
            return usage, max(0, usage - inactive)
        except (OSError, ValueError):
            continue
    return None


def _helper_processes_memory(container_ids: set[str], ports: set[str]) -> tuple[int, int]:
    """``(VmRSS, Pss)`` summed over the docker-proxy processes publishing ``ports`` and the shims
    of ``container_ids``. RSS counts the pages every shim shares (the binary, libraries) once per
    shim; PSS divides them among their users, which is what the host really spends."""
    total = pss = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        name = os.path.basename(argv[0])
        ours = (name == "docker-proxy" and _flag(argv, "-host-port") in ports) or (
            name.startswith("containerd-shim") and _flag(argv, "-id") in container_ids
        )
        if ours:
            total += rss_bytes(int(pid)) or 0
            pss += proc_kib_bytes(f"/proc/{pid}/smaps_rollup", "Pss") or 0
    return total, pss


def _flag(argv: list[str], name: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(name) + 1]
    return None


def host_memory(container_ids: list[str]) -> dict[str, Any]:
    """Memory the host spends on these containers, per container (MB)."""
    if not container_ids:
        return {}
    inspected = json.loads(docker("inspect", *container_ids))
    ports = {
        binding["HostPort"]
        for c in inspected
        for binding in ((c.get("NetworkSettings") or {}).get("Ports") or {}).get(_ROCKLET_PORT)
        or []
    }
    cgroups = [m for m in (_cgroup_memory(c["Id"]) for c in inspected) if m is not None]
    helpers, helpers_pss = _helper_processes_memory({c["Id"] for c in inspected}, ports)
    n = len(inspected)
    container = sum(u for u, _ in cgroups) / len(cgroups) if cgroups else None
    return {
        "container_memory_per_sandbox_mb": mb(container),
        "container_working_set_per_sandbox_mb": mb(sum(w for _, w in cgroups) / len(cgroups))
        if cgroups
        else None,
        "proxy_shim_rss_per_sandbox_mb": mb(helpers / n),
        "proxy_shim_pss_per_sandbox_mb": mb(helpers_pss / n),
        # The container's own memory plus its share of the processes that serve it.
        "host_memory_per_sandbox_mb": mb(container + helpers_pss / n)
        if container is not None
        else None,
    }


def mb(value: float | None) -> float | None:
    return None if value is None else round(value / 2**20, 2)


def cgroup_procs_file(container_id: str) -> str | None:
    """The ``cgroup.procs`` file of a container's processes (v1 pids controller or v2, cgroupfs
    or systemd); ``None`` when none is readable here (another host's Docker, another layout)."""
    for path in (
        f"/sys/fs/cgroup/pids/docker/{container_id}/cgroup.procs",
        f"/sys/fs/cgroup/pids/system.slice/docker-{container_id}.scope/cgroup.procs",
        f"/sys/fs/cgroup/docker/{container_id}/cgroup.procs",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cgroup.procs",
    ):
        if os.path.exists(path):
            return path
    return None


# Processes of a sandbox that are rock's, not the sandbox's: Docker's init and rock's agent,
# which stay until the container is removed (a stop ends every other process at once).
_OURS = (b"docker-init", b"rocklet.pyz")


def _sandbox_processes(pid: str) -> bool:
    """Whether host process ``pid`` is a program of the sandbox (not init, not rock's agent)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read(4096)
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z" and not any(mark in command for mark in _OURS)


def with_processes(procs_files: list[str]) -> int:
    """How many of the containers whose ``cgroup.procs`` files are given still run a program
    of the sandbox (a file gone with its cgroup counts as none)."""
    alive = 0
    for path in procs_files:
        try:
            with open(path, encoding="ascii") as f:
                pids = f.read().split()
        except OSError:
            continue
        alive += any(_sandbox_processes(pid) for pid in pids)
    return alive


async def wait_gone(
    prefix: str,
    t0: float,
    timeout: float,
    say: Callable[[str], None],
    procs_files: list[str] | None = None,
    expected: int = 0,
) -> tuple[float, int, float | None]:
    """Poll ``docker ps -a`` until no container of the point is left, and the containers'
    cgroups until none has a process; ``(seconds until gone, leftovers, seconds until no
    process ran)``, the last ``None`` when the cgroups could not be read. When Docker stops
    answering, the last count is reported as left (``expected`` before the first count)."""
    deadline = time.perf_counter() + timeout
    last_said = t0
    ended: float | None = None
    left = expected
    while True:
        if procs_files and ended is None and with_processes(procs_files) == 0:
            ended = time.perf_counter() - t0
        try:
            left = len(await asyncio.to_thread(containers, prefix, 60))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            # A wedged dockerd (see the README): report what was measured, the last count left.
            say(
                f"teardown: Docker does not answer ({str(exc).splitlines()[0][:200]}); {left} counted as left"
            )
            return time.perf_counter() - t0, left, ended
        now = time.perf_counter()
        if left == 0 or now > deadline:
            if procs_files and ended is None and with_processes(procs_files) == 0:
                ended = now - t0
            return now - t0, left, ended
        if now - last_said >= 2:
            running = f", processes in {with_processes(procs_files)}" if procs_files else ""
            say(f"teardown: {left} containers left{running} after {now - t0:.1f}s")
            last_said = now
        await asyncio.sleep(0.25)
