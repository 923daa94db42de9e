"""ROCK's ``/get_statistics`` from ``/proc`` and the cgroup files, best effort, without psutil.

``cpu`` is the sandbox's CPU use in percent of the CPUs it may use, over the time since the
previous call (the first call samples 100 ms); ``mem`` is memory in use in percent of the
cgroup limit (of the machine's memory when unlimited); ``disk`` is the root filesystem's use in
percent; ``net`` is bytes received plus sent on every interface but loopback. ROCK's optional
``disk_log_percent`` (``ROCK_LOGGING_PATH`` or ``/data/logs``) is included when that directory
exists. Raw figures are added under their own names (``mem_bytes``, ``mem_limit_bytes``,
``cpu_limit``, ``disk_used_bytes``, ``disk_total_bytes``). A figure that cannot be read is ``None``.
"""

from __future__ import annotations

import os
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

__all__ = ["Statistics"]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _cgroup_v2() -> bool:
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


def _cpu_usage_seconds() -> float | None:
    """CPU seconds used by this cgroup (or the whole machine when no cgroup file is readable)."""
    if _cgroup_v2():
        text = _read("/sys/fs/cgroup/cpu.stat")
        if text:
            for line in text.splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
    for path in (
        "/sys/fs/cgroup/cpuacct/cpuacct.usage",
        "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage",
    ):
        value = _int(_read(path))
        if value is not None:
            return value / 1e9
    text = _read("/proc/stat")
    if text:
        fields = text.splitlines()[0].split()[1:]
        busy = sum(int(x) for x in fields[:3]) + sum(int(x) for x in fields[5:8])
        return busy / float(os.sysconf("SC_CLK_TCK"))
    return None


def _cpu_limit() -> float:
    """How many CPUs the sandbox may use (cgroup quota, else the machine's count)."""
    count = float(os.cpu_count() or 1)
    if _cgroup_v2():
        text = _read("/sys/fs/cgroup/cpu.max")
        if text and not text.startswith("max"):
            quota, period = text.split()[:2]
            return min(count, int(quota) / float(period))
        return count
    quota_us = _int(_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
    period_us = _int(_read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    if quota_us and period_us and quota_us > 0:
        return min(count, quota_us / float(period_us))
    return count


def _memory() -> tuple[int | None, int | None]:
    """(bytes in use, limit in bytes) of the cgroup, falling back to the machine's figures."""
    used = limit = None
    if _cgroup_v2():
        used = _int(_read("/sys/fs/cgroup/memory.current"))
        limit = _int(_read("/sys/fs/cgroup/memory.max"))
        stat_text = _read("/sys/fs/cgroup/memory.stat")
        inactive_key = "inactive_file "
    else:
        used = _int(_read("/sys/fs/cgroup/memory/memory.usage_in_bytes"))
        limit = _int(_read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        stat_text = _read("/sys/fs/cgroup/memory/memory.stat")
        inactive_key = "total_inactive_file "
    if used is not None and stat_text:
        # Like `docker stats`: page cache that can be dropped does not count as used.
        for line in stat_text.splitlines():
            if line.startswith(inactive_key):
                used = max(0, used - int(line.split()[1]))
                break
    total = None
    meminfo = _read("/proc/meminfo")
    available = None
    if meminfo:
        for line in meminfo.splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    if limit is None or (total is not None and limit > total):
        limit = total
    if used is None and total is not None and available is not None:
        used = total - available
    return used, limit


def _disk(path: str) -> tuple[float | None, int | None, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None, None
    total = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    # Percent of what non-root users may use, as `df` and psutil report it.
    usable = used + st.f_bavail * st.f_frsize
    percent = round(100.0 * used / usable, 1) if usable else 0.0
    return percent, used, total


def _net_bytes() -> int | None:
    text = _read("/proc/net/dev")
    if not text:
        return None
    total = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        fields = rest.split()
        if len(fields) >= 9:
            total += int(fields[0]) + int(fields[8])
    return total


class Statistics:
    """Computes ``/get_statistics`` answers; keeps the last CPU sample between calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None

    def _cpu_percent(self) -> float | None:
        with self._lock:
            now = time.monotonic()
            usage = _cpu_usage_seconds()
            if usage is None:
                return None
            last = self._last
            if last is None or now - last[0] < 0.05:
                time.sleep(0.1)
                last = (now, usage)
                now = time.monotonic()
                usage = _cpu_usage_seconds() or usage
            self._last = (now, usage)
            elapsed = now - last[0]
            if elapsed <= 0:
                return 0.0
            return round(max(0.0, 100.0 * (usage - last[1]) / elapsed / _cpu_limit()), 1)

    def collect(self) -> dict[str, Any]:
        """The statistics answer."""
        used, limit = _memory()
        disk, disk_used, disk_total = _disk("/")
        result: dict[str, Any] = {
            "cpu": self._cpu_percent(),
            "mem": round(100.0 * used / limit, 1) if used is not None and limit else None,
            "disk": disk,
            "net": _net_bytes(),
            "cpu_limit": _cpu_limit(),
            "mem_bytes": used,
            "mem_limit_bytes": limit,
            "disk_used_bytes": disk_used,
            "disk_total_bytes": disk_total,
        }
        log_dir = os.environ.get("ROCK_LOGGING_PATH") or "/data/logs"
        if os.path.isdir(log_dir):
            result["disk_log_percent"] = _disk(log_dir)[0]
        if os.environ.get("ROCK_KATA_RUNTIME", "").lower() == "true" and os.path.isdir(
            "/var/lib/docker"
        ):
            result["disk_dind_percent"] = _disk("/var/lib/docker")[0]
        return result
