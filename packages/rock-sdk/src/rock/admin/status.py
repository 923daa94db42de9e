"""``GET /admin/status``: the admin's state as JSON, what ``rock admin status`` shows.

``version``; ``sandboxes`` by state; the ``start_queue`` (depth, active); ``tenants``: each
tenant's use (its pending and running sandboxes, their memory in bytes and CPUs, the snapshots
it keeps on the node) with its quota (``max_sandboxes``, ``max_memory`` in bytes, ``max_cpus``,
``max_snapshots``; ``null``: none); ``warm_pools``; ``process``: the admin process itself (its
``pid``, ``rss_bytes``, its resident memory, ``null`` without ``/proc``, and its garbage
collector's ``gc_thresholds`` and ``gc_frozen`` objects, which a served admin tunes).

An operator's key (or anyone, without keys) sees every tenant, each configured one even with no
sandbox, and the warm pools; another key sees its own tenant's row and no pools (they are the
operator's) and no ``process``. Counts by state and the queue are totals, as ``/metrics`` shows
every key.
"""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock import __version__
from rock.admin.key_gate import scope_key
from rock.admin.lifecycle import is_operator
from rock_core.converters import unstructure_wire
from rock_core.states import State
from rock_core.tenancy import Quota, Usage

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["admin_status", "process_status"]


def _row(usage: Usage, snapshots: int, quota: Quota | None) -> dict[str, Any]:
    quota = quota or Quota()
    return {
        "sandboxes": usage.sandboxes,
        "memory": usage.memory,
        "cpus": usage.cpus,
        "snapshots": snapshots,
        "quota": {
            "max_sandboxes": quota.max_sandboxes,
            "max_memory": quota.max_memory,
            "max_cpus": quota.max_cpus,
            "max_snapshots": quota.max_snapshots,
        },
    }


def _resident_bytes() -> int | None:
    """This process's resident memory (``/proc/self/statm``), ``None`` where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def process_status() -> dict[str, Any]:
    """The ``process`` block: this admin process's pid, memory and collector settings."""
    return {
        "pid": os.getpid(),
        "rss_bytes": _resident_bytes(),
        "gc_thresholds": list(gc.get_threshold()),
        "gc_frozen": gc.get_freeze_count(),
    }


async def admin_status(app: AdminApp, request: Request) -> dict[str, Any]:
    """The ``/admin/status`` document for the request's key (see the module docstring)."""
    manager = app.manager
    by_state = manager.count_by_state()
    use = manager.usage_by_tenant()
    kept = await manager.snapshot_counts()
    operator = is_operator(request)
    key = scope_key(request.scope)
    quotas = app.keys.quotas
    if operator:
        tenants = {
            t: _row(use.get(t, Usage()), kept.get(t, 0), quotas.get(t))
            for t in sorted({*quotas, *use})
        }
    else:
        assert key is not None  # without keys, everyone is the operator
        tenants = {
            key.tenant: _row(use.get(key.tenant, Usage()), kept.get(key.tenant, 0), key.quota)
        }
    status = {
        "version": __version__,
        "sandboxes": {state.value: by_state.get(state, 0) for state in State},
        "start_queue": {"depth": manager.queue.depth, "active": manager.queue.active},
        "tenants": tenants,
        "warm_pools": [unstructure_wire(pool) for pool in manager.warm_pools()] if operator else [],
    }
    if operator:
        status["process"] = process_status()
    return status
