"""E2B's pause, snapshots, fork and metrics on rock's own (the control plane's other routes are
:mod:`rock_e2b.control`'s).

- ``pause`` is rock's pause: the sandbox's processes frozen in place, its memory kept, until
  ``connect`` (or ``resume``) thaws it. E2B's filesystem-only pause (``memory: false``) is refused:
  rock's pause never drops the processes.
- ``create_snapshot(mode="filesystem")`` is rock's snapshot (the sandbox's files, under the
  tenant's name); ``Sandbox.create(<snapshot id>)`` starts from it; ``list_snapshots`` and
  ``delete_snapshot`` are rock's. A full snapshot (E2B's default, memory included) is refused:
  rock's snapshots keep files only, and none is faked.
- ``fork`` is refused: E2B's forks carry the source's memory, rock's forks its files only.
- ``get_metrics`` is one sample of the rocklet's figures (CPU, memory, disk) taken now.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rock_core.errors import RockError
from rock_core.routes import RouteRequest, RouteResponse
from rock_e2b.access import E2BError, owned_record
from rock_e2b.control import body_of, failed, live_record

__all__ = ["create_snapshot", "delete_snapshot", "fork", "list_snapshots", "metrics", "pause"]


async def pause(request: RouteRequest) -> Any:
    record = live_record(request)
    if body_of(request).get("memory") is False:
        raise E2BError(
            400,
            "memory: rock's pause keeps the sandbox's processes and memory frozen in place; a "
            "filesystem-only pause is not served",
        )
    if record.paused:
        raise E2BError(409, f"sandbox {record.sandbox_id} is already paused")
    try:
        await request.engine.pause(record.sandbox_id)
    except RockError as exc:
        raise failed(exc) from None
    return RouteResponse({}, status=200)


def _snapshot(info: Any) -> dict[str, Any]:
    return {"snapshotID": info.name, "names": [info.name]}


async def create_snapshot(request: RouteRequest) -> Any:
    record = live_record(request)
    body = body_of(request)
    if body.get("memory") is not False:
        raise E2BError(
            400,
            "memory: rock's snapshots keep a sandbox's files, not its memory or processes; "
            "create_snapshot(mode='filesystem') makes one",
        )
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise E2BError(400, "name: a snapshot name must be a string")
    try:
        info = await request.engine.snapshot(record.sandbox_id, name, tenant=request.tenant)
    except RockError as exc:
        raise failed(exc) from None
    return RouteResponse(_snapshot(info), status=201)


async def list_snapshots(request: RouteRequest) -> Any:
    sandbox_id = request.query.get("sandboxID")
    if sandbox_id:
        owned_record(request.engine, sandbox_id, request.tenant)
    try:
        found = await request.engine.list_snapshots(request.tenant)
    except RockError as exc:
        raise failed(exc) from None
    name = request.query.get("name")
    return [
        _snapshot(info)
        for info in found
        if (not sandbox_id or info.sandbox_id == sandbox_id) and (not name or info.name == name)
    ]


async def delete_snapshot(request: RouteRequest) -> Any:
    name = request.path_params["template_id"]
    try:
        await request.engine.delete_snapshot(name, tenant=request.tenant)
    except RockError as exc:
        if "unknown snapshot" in exc.message:
            raise E2BError(404, f"snapshot {name!r} not found") from None
        raise failed(exc) from None
    return RouteResponse({}, status=200)


async def fork(request: RouteRequest) -> Any:
    live_record(request)
    raise E2BError(
        501,
        "fork: E2B's forks carry the sandbox's memory; rock's forks keep files only "
        "(rock's own API: POST /sandboxes/{id}/fork)",
    )


async def metrics(request: RouteRequest) -> Any:
    record = live_record(request)
    try:
        client = request.engine.rocklet(record.sandbox_id, "e2b get_metrics", activity=False)
        stats = await client.get_statistics()
    except RockError as exc:
        raise failed(exc) from None
    now = datetime.now(UTC)
    return [
        {
            "timestamp": now.isoformat(),
            "timestampUnix": int(now.timestamp()),
            "cpuCount": int(stats.get("cpu_limit") or record.spec.cpus),
            "cpuUsedPct": float(stats.get("cpu") or 0.0),
            "memUsed": int(stats.get("mem_bytes") or 0),
            "memTotal": int(stats.get("mem_limit_bytes") or record.spec.memory),
            "memCache": 0,
            "diskUsed": int(stats.get("disk_used_bytes") or 0),
            "diskTotal": int(stats.get("disk_total_bytes") or 0),
        }
    ]
