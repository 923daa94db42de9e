"""Whether a container's files are still those of a snapshot made of it (capability
``snapshot_reuse``): a fork of a sandbox unchanged since its last snapshot starts from that
snapshot, with no new ``docker commit``.

The commit marks the image (:data:`LABEL_MARK`): the container's id, and the host's clock read
while the container is frozen for the copy, before it (the coarse wall clock the kernel stamps
inodes with, and the time since boot). Every change to a container's files, its data or its
metadata, a file made, deleted (a whiteout) or renamed, stamps the ctime of an inode of its
writable layer (overlay2's upper directory) with that clock; no process can set a ctime back.
So the files are unchanged since the mark when no inode under the upper directory has a ctime
at or after it, rounded down to the second on a filesystem whose stamps are whole seconds,
else to the millisecond.

What the check cannot see, it answers "changed" for (and the fork commits as before):

- a process of the container holding a file mapped shared and writable when it was frozen (its
  writes to pages already dirty stamp no ctime): no mark is made then;
- the host's clock stepped since the mark (the wall clock and the time since boot disagree),
  or a reboot;
- a container of another id (a reset sandbox's new unit), another storage driver than overlay2,
  an upper directory this process cannot read (a remote Docker engine, no root).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import docker

__all__ = ["LABEL_MARK", "freeze_mark", "mark_time", "unchanged_since"]

#: The image label holding the mark: ``"<container id> <wall ns> <boot ns>"``.
LABEL_MARK = "rock.snapshot.mark"
# Linux's CLOCK_REALTIME_COARSE: the clock inodes' times are stamped with.
_REALTIME_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)
_STEP_NS = 1_000_000_000  # wall clock and boot time drifting apart by more: a step
_SECOND, _MILLI = 1_000_000_000, 1_000_000


def _shared_writable_maps(api: docker.APIClient, unit_id: str) -> bool | None:
    """Whether a process of the (frozen) container maps a file shared and writable; ``None``
    when the host's ``/proc`` cannot tell (a remote engine)."""
    try:
        top = api.top(unit_id, ps_args="-eo pid")
        titles = top.get("Titles") or []
        column = titles.index("PID")
        pids = [row[column] for row in top.get("Processes") or []]
    except (docker.errors.APIError, ValueError, IndexError):
        return None
    for pid in pids:
        try:
            with open(f"/proc/{int(pid)}/cgroup", encoding="utf-8") as cgroup:
                if unit_id not in cgroup.read():
                    return None  # another process of that number: this /proc is not the host's
            with open(f"/proc/{int(pid)}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) < 6 or fields[1][1] != "w" or fields[1][3] != "s":
                        continue
                    path = fields[5].strip()
                    if not path.endswith(" (deleted)") and path != "/dev/zero":
                        return True
        except (OSError, ValueError):  # a frozen process does not exit: not this host's /proc
            return None
    return False


def freeze_mark(api: docker.APIClient, unit_id: str, *, running: bool) -> str | None:
    """The mark of a commit about to copy the container, frozen (``running``) or stopped;
    ``None`` when a later change might stamp no ctime. Blocking."""
    if running and _shared_writable_maps(api, unit_id) is not False:
        return None
    wall = time.clock_gettime_ns(_REALTIME_COARSE)
    boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return f"{unit_id} {wall} {boot}"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Deeper than this the walk stops and answers "changed": it holds one descriptor per level.
_MAX_DEPTH = 128


def _changed_at_or_after(upper: str, floor_ns: int) -> bool:
    """Whether an inode under ``upper`` has a ctime at or after ``floor_ns`` (rounded down to
    the filesystem's stamps); raises :class:`OSError` when it cannot read it all.

    The sandbox writes this tree while it is walked, so no path is followed: each directory is
    opened relative to its parent's descriptor with ``O_NOFOLLOW`` (a directory swapped for a
    symlink fails the open, and the answer is "changed"), and past :data:`_MAX_DEPTH` levels
    the answer is "changed" as well."""
    fine_floor = floor_ns - floor_ns % _MILLI
    seen = {"fine": False, "latest": os.lstat(upper).st_ctime_ns}

    def changed(fd: int, depth: int) -> bool:
        with os.scandir(fd) as entries:
            subdirs = []
            for entry in entries:
                ctime = entry.stat(follow_symlinks=False).st_ctime_ns
                if ctime >= fine_floor:
                    return True  # changed, whatever the filesystem's stamps
                seen["fine"] = seen["fine"] or bool(ctime % _SECOND)
                seen["latest"] = max(seen["latest"], ctime)
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
        for name in subdirs:
            if depth >= _MAX_DEPTH:
                return True
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                if changed(child, depth + 1):
                    return True
            finally:
                os.close(child)
        return False

    root = os.open(upper, _DIR_FLAGS)
    try:
        if changed(root, 0):
            return True
    finally:
        os.close(root)
    fine = seen["fine"] or bool(seen["latest"] % _SECOND)
    return seen["latest"] >= (fine_floor if fine else floor_ns - floor_ns % _SECOND)


def mark_time(unit_id: str, labels: Mapping[str, str]) -> int | None:
    """The wall time (ns) of the mark in ``labels`` if it names the container ``unit_id`` and
    the host's clock has not stepped since, nor the host rebooted; else ``None``: every change
    since the mark stamped a ctime at or after it (rounded down to the filesystem's stamps)."""
    try:
        marked_unit, wall_text, boot_text = labels.get(LABEL_MARK, "").split()
        wall, boot = int(wall_text), int(boot_text)
    except ValueError:
        return None
    if marked_unit != unit_id:
        return None
    now_wall = time.clock_gettime_ns(_REALTIME_COARSE)
    now_boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    if now_boot < boot or abs((now_wall - wall) - (now_boot - boot)) > _STEP_NS:
        return None
    return wall


def unchanged_since(api: docker.APIClient, unit_id: str, labels: Mapping[str, str]) -> bool:
    """Whether the container's files are those of the image labelled ``labels`` (blocking)."""
    wall = mark_time(unit_id, labels)
    if wall is None:
        return False
    try:
        info = api.inspect_container(unit_id)
    except docker.errors.APIError:
        return False
    driver = info.get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    if driver.get("Name") != "overlay2" or not upper:
        return False
    try:
        return not _changed_at_or_after(str(upper), wall)
    except OSError:
        return False
