"""The admin's pause routes (rock): ``POST /pause`` and ``POST /resume``.

Both take ``{"sandbox_id": ...}`` (the tenant check of every route with a ``sandbox_id``: another
tenant's sandbox answers as unknown), are leader-only in a cluster (a follower forwards them),
and answer the sandbox's status (``paused`` and ``paused_time``; its ``state`` stays ``running``).
The engine's job is :mod:`rock_core.engine.pausing`.

Each handler takes the :class:`~rock.admin.app.AdminApp` first; the app's route table binds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request

from rock_core.actions import SandboxIdRequest, SandboxStatusResponse
from rock_core.responses import status_response

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["pause", "resume"]


async def pause(app: AdminApp, _request: Request, body: SandboxIdRequest) -> SandboxStatusResponse:
    """``POST /pause``: freeze a running sandbox (memory and processes kept)."""
    record = await app.manager.pause(body.sandbox_id)
    return status_response(app.manager.status_of(record))


async def resume(app: AdminApp, _request: Request, body: SandboxIdRequest) -> SandboxStatusResponse:
    """``POST /resume``: thaw a paused sandbox."""
    record = await app.manager.resume(body.sandbox_id)
    return status_response(app.manager.status_of(record))
