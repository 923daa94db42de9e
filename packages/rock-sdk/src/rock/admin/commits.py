"""The admin's commit routes, ROCK 1.11's: ``POST /commit`` (begin committing a sandbox's files
as an image tag; answers the ``RUNNING`` status) and ``GET /commit/{sandbox_id}`` (the last
commit's status, polled until ``SUCCEEDED`` or ``FAILED``). Both leader-only in a cluster; a
sandbox of another tenant is unknown. The engine's job is :mod:`rock_core.engine.commits`.
``username`` and ``password`` are only handed to a push (never logged or kept)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock.admin.key_gate import scope_tenant
from rock.admin.models import SandboxIdQuery
from rock.admin.routing import PREFIX, Handler, Route
from rock_core.actions import CommitRequest, CommitStatusResponse

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["commit", "commit_routes", "get_commit_status"]


async def commit(app: AdminApp, request: Request, body: CommitRequest) -> CommitStatusResponse:
    """``POST /commit``: begin the commit; the answer is its ``RUNNING`` status."""
    return await app.manager.commit(
        body.sandbox_id,
        body.image_tag,
        body.username,
        body.password,
        tenant=scope_tenant(request.scope),
    )


async def get_commit_status(
    app: AdminApp, request: Request, query: SandboxIdQuery
) -> CommitStatusResponse:
    """``GET /commit/{sandbox_id}``: the sandbox's last commit's status."""
    return await app.manager.get_commit_status(query.sandbox_id, tenant=scope_tenant(request.scope))


def commit_routes(bound: Callable[[Callable[..., Awaitable[Any]]], Handler]) -> list[Route]:
    """The routes of this module for the admin's route table (:mod:`rock.admin.route_table`)."""
    p = PREFIX
    return [
        Route(
            method="POST",
            path=f"{p}/commit",
            name="commit",
            leader=True,
            handler=bound(commit),
            body=CommitRequest,
            result=CommitStatusResponse,
            failure="commit sandbox failed",
            summary="Commit a sandbox's files (not its processes) as an image tag, in the background.",
            description="Body: sandbox_id, image_tag ([registry/]repository[:tag]), username, password. "
            "Answers the RUNNING status; poll GET /commit/{sandbox_id}. A tag naming a registry is "
            "pushed there only when the engine's commit_registries lists it (refused otherwise).",
        ),
        Route(
            method="GET",
            path=f"{p}/commit/{{sandbox_id}}",
            name="get_commit_status",
            leader=True,
            activity=False,
            handler=bound(get_commit_status),
            query=SandboxIdQuery,
            result=CommitStatusResponse,
            failure="get commit status failed",
            summary="The last commit's status: phase RUNNING, SUCCEEDED or FAILED (stage, code, message).",
        ),
    ]
