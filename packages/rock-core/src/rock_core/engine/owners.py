"""Who owns a unit: process identities, and whether their process still lives.

Units an engine makes carry its owner in the ``rock.owner`` label: ``proc:<host>:<pid>:<start>``
for a process (embedded mode), where ``<start>`` is the process's start time in clock ticks since
boot, so that a later process that reuses the pid is not taken for the owner. A process that has
exited but was not yet reaped by its parent (a zombie) is dead: its units are orphans already.
The admin's pid file uses the same test (:func:`process_alive`).

An admin's units carry ``admin:<store path>`` (it outlives its processes) and, in
``rock.owner_host``, the host whose files that path names (:func:`host_identity`: the machine
id, the host name and the mount namespace). An engine on that same host reaps the units of an
admin whose state folder is gone (:func:`admin_folder_gone`): no admin can take them back. A
unit without that label (made before it existed) or from another host sharing the Docker
engine is never judged by its folder: a path means nothing on another host.
"""

from __future__ import annotations

import functools
import os
import socket

__all__ = [
    "LABEL_OWNER_HOST",
    "admin_folder_gone",
    "host_identity",
    "owner_is_dead",
    "proc_start_time",
    "process_alive",
    "process_owner",
]

#: The host whose files the owner's paths name (:func:`host_identity`).
LABEL_OWNER_HOST = "rock.owner_host"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 on), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing paren.
    return stat.rsplit(")", 1)[-1].split()


def proc_start_time(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ("" where it or /proc is missing)."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else ""


def process_alive(pid: int, start_time: str = "") -> bool:
    """Whether process ``pid`` runs: it exists, is not a zombie, and (when ``start_time`` is
    given) is the same process that had that start time, not a later one with its pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    fields = _stat_fields(pid)
    if fields is None:
        return True  # no /proc here: existence is all we can tell
    if fields[0] == "Z":
        return False  # exited; its parent has not reaped it yet
    return not start_time or len(fields) <= 19 or fields[19] == start_time


def process_owner(pid: int | None = None) -> str:
    """The ``rock.owner`` label of units made by process ``pid`` (default: this one):
    ``proc:<host>:<pid>:<start>``."""
    pid = os.getpid() if pid is None else pid
    return f"proc:{socket.gethostname()}:{pid}:{proc_start_time(pid)}"


def owner_is_dead(owner: str) -> bool:
    """Whether the process an ``rock.owner`` label names is gone (exited, a zombie, or its pid
    reused). Owners of another host or another kind (``admin:...``) are never judged dead here."""
    parts = owner.split(":")
    if len(parts) != 4 or parts[0] != "proc" or parts[1] != socket.gethostname():
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    return not process_alive(pid, parts[3])


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                found = f.read().strip()
        except OSError:
            continue
        if found:
            return found
    return ""


def _mount_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/mnt").removeprefix("mnt:").strip("[]")
    except OSError:
        return ""


@functools.cache
def host_identity() -> str:
    """This host as the ``rock.owner_host`` label names it: ``<machine id>/<host name>/<mount
    namespace>``, so that two containers of one image (same machine id) sharing a Docker
    engine, or two mount namespaces of one machine, are different hosts. ``""`` where there is
    no machine id or no mount namespace to read: then no unit is ever judged this host's."""
    machine, mounts = _machine_id(), _mount_namespace()
    if not machine or not mounts:
        return ""
    return f"{machine}/{socket.gethostname()}/{mounts}"


def admin_folder_gone(owner: str, owner_host: str) -> bool:
    """Whether ``owner`` is an admin (``admin:<store path>``) of this host (``owner_host`` is
    :func:`host_identity`) whose state folder (its store's folder) is gone while the folder
    above it is still there (a whole tree missing, say a disk not mounted yet, is not judged).
    Owners without a host (labels made before ``rock.owner_host``), of another host, or of
    another kind are never judged here."""
    if not owner.startswith("admin:") or not owner_host or owner_host != host_identity():
        return False
    path = owner.removeprefix("admin:")
    if not os.path.isabs(path):
        return False
    folder = os.path.dirname(os.path.normpath(path))
    parent = os.path.dirname(folder)
    if folder == parent:
        return False  # the store sits in /: its folder cannot be gone
    return not os.path.lexists(folder) and os.path.isdir(parent)
