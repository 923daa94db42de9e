"""(rock) The admin's snapshot routes: ``/sandboxes/{sandbox_id}/snapshot``, ``/snapshots``,
``/snapshots/delete`` and ``/sandboxes/{sandbox_id}/fork``.

A snapshot belongs to the tenant of the key that made it (the sandbox's); a key sees, uses and
deletes only its tenant's: another tenant's name is an unknown snapshot. A fork's starts count
against the key's quota, all of them checked before the snapshot is made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock.admin.key_gate import scope_key, scope_tenant
from rock.admin.routing import PREFIX, Handler, Route
from rock_core.actions import (
    ForkRequest,
    ForkResponse,
    SnapshotInfo,
    SnapshotListResponse,
    SnapshotNameRequest,
    SnapshotRequest,
)
from rock_core.responses import start_response

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["delete_snapshot", "fork", "list_snapshots", "snapshot", "snapshot_routes"]


async def snapshot(app: AdminApp, request: Request, body: SnapshotRequest) -> SnapshotInfo:
    """``POST /sandboxes/{sandbox_id}/snapshot``: keep the sandbox's files as a snapshot."""
    tenant = scope_tenant(request.scope)
    return await app.manager.snapshot(body.sandbox_id, body.name, tenant=tenant)


async def list_snapshots(app: AdminApp, request: Request, _data: None) -> SnapshotListResponse:
    """``GET /snapshots``: the key's tenant's snapshots (without keys: the engine's)."""
    return SnapshotListResponse(
        snapshots=await app.manager.list_snapshots(scope_tenant(request.scope))
    )


async def delete_snapshot(app: AdminApp, request: Request, body: SnapshotNameRequest) -> str:
    """``POST /snapshots/delete``: delete one of the key's tenant's snapshots."""
    await app.manager.delete_snapshot(body.name, tenant=scope_tenant(request.scope))
    return f"snapshot {body.name} deleted"


async def fork(app: AdminApp, request: Request, body: ForkRequest) -> ForkResponse:
    """``POST /sandboxes/{sandbox_id}/fork``: a snapshot and ``count`` starts from it (within
    the key's quota), answered at once with the pending starts."""
    key = scope_key(request.scope)
    snap, records = await app.manager.fork(
        body.sandbox_id,
        body.count,
        tenant=None if key is None else key.tenant,
        quota=None if key is None else key.quota,
    )
    return ForkResponse(snapshot=snap, sandboxes=[start_response(r) for r in records])


def snapshot_routes(bound: Callable[[Callable[..., Awaitable[Any]]], Handler]) -> list[Route]:
    """The routes of this module for the admin's route table (:mod:`rock.admin.route_table`);
    ``bound`` gives a handler its app. Only a cluster's leader makes snapshots and forks."""
    p = PREFIX
    return [
        Route(
            method="POST",
            path=f"{p}/sandboxes/{{sandbox_id}}/snapshot",
            name="snapshot",
            leader=True,
            handler=bound(snapshot),
            body=SnapshotRequest,
            result=SnapshotInfo,
            failure="snapshot sandbox failed",
            summary="(rock) Keep a running or stopped sandbox's files (not its processes) as a snapshot.",
            description="The container is paused for the copy only (frozen_seconds); the snapshot belongs "
            "to the key's tenant. Body: optional name (unique per tenant).",
        ),
        Route(
            method="GET",
            path=f"{p}/snapshots",
            name="snapshots",
            leader=True,
            activity=False,
            handler=bound(list_snapshots),
            result=SnapshotListResponse,
            failure="list snapshots failed",
            summary="(rock) The key's tenant's snapshots: name, source sandbox, size, creation time.",
        ),
        Route(
            method="POST",
            path=f"{p}/snapshots/delete",
            name="delete_snapshot",
            leader=True,
            handler=bound(delete_snapshot),
            body=SnapshotNameRequest,
            result=str,
            failure="delete snapshot failed",
            summary="(rock) Delete a snapshot of the key's tenant (refused while sandboxes use it).",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/{{sandbox_id}}/fork",
            name="fork",
            leader=True,
            handler=bound(fork),
            body=ForkRequest,
            result=ForkResponse,
            failure="fork sandbox failed",
            summary="(rock) Snapshot a sandbox and accept count starts from it (the key's quota for all).",
            description="Answers at once with the snapshot and the pending starts; poll their get_status.",
        ),
    ]
