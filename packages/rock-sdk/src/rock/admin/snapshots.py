"""(rock) The admin's snapshot routes: ``/sandboxes/{sandbox_id}/snapshot``, ``/snapshots``,
``/snapshots/delete``, ``/sandboxes/{sandbox_id}/fork`` and ``/sandboxes/{sandbox_id}/reset``.

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
    ResetRequest,
    SandboxStatusResponse,
    SnapshotInfo,
    SnapshotListResponse,
    SnapshotNameRequest,
    SnapshotRequest,
)
from rock_core.responses import start_response, status_response

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["delete_snapshot", "fork", "list_snapshots", "reset", "snapshot", "snapshot_routes"]


async def snapshot(app: AdminApp, request: Request, body: SnapshotRequest) -> SnapshotInfo:
    """``POST /sandboxes/{sandbox_id}/snapshot``: keep the sandbox's files as a snapshot."""
    key = scope_key(request.scope)
    return await app.manager.snapshot(
        body.sandbox_id,
        body.name,
        tenant=None if key is None else key.tenant,
        quota=None if key is None else key.quota,
        archive=body.archive,
    )


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


async def reset(app: AdminApp, request: Request, body: ResetRequest) -> SandboxStatusResponse:
    """``POST /sandboxes/{sandbox_id}/reset``: back to the image's files, or a snapshot's (of the
    key's tenant); answered once the sandbox runs again."""
    tenant = scope_tenant(request.scope)
    record = await app.manager.reset(body.sandbox_id, body.snapshot, tenant=tenant)
    return status_response(app.manager.status_of(record))


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
            "to the key's tenant. Body: optional name (unique per tenant); archive: true keeps it "
            "in the engine's archive store as well, for other nodes and later days.",
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
        Route(
            method="POST",
            path=f"{p}/sandboxes/{{sandbox_id}}/reset",
            name="reset",
            leader=True,
            handler=bound(reset),
            body=ResetRequest,
            result=SandboxStatusResponse,
            failure="reset sandbox failed",
            summary="(rock) Put a running sandbox back to its image's files, or a snapshot's.",
            description="Body: optional snapshot (a name of the key's tenant). Its processes and "
            "sessions end; its id, limits, port_mapping and secret stay. A sandbox started from a "
            "snapshot resets to it. A sandbox not running, or paused, is refused.",
        ),
    ]
