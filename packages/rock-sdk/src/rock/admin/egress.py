"""(rock) The admin's egress route: ``POST /sandboxes/{sandbox_id}/egress`` replaces a running
sandbox's egress policy (:mod:`rock_core.egress`), enforced on the host before it answers.
A key reaches only its tenant's sandboxes (another tenant's id is an unknown sandbox)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock.admin.routing import PREFIX, Handler, Route
from rock_core.actions import EgressRequest, SandboxStatusResponse
from rock_core.responses import status_response

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["egress_routes", "update_egress"]


async def update_egress(
    app: AdminApp, _request: Request, body: EgressRequest
) -> SandboxStatusResponse:
    """``POST /sandboxes/{sandbox_id}/egress``: the new policy in force, then the status."""
    record = await app.manager.update_egress(body.sandbox_id, body.egress)
    return status_response(app.manager.status_of(record))


def egress_routes(bound: Callable[[Callable[..., Awaitable[Any]]], Handler]) -> list[Route]:
    """The route of this module for the admin's route table (:mod:`rock.admin.route_table`)."""
    return [
        Route(
            method="POST",
            path=f"{PREFIX}/sandboxes/{{sandbox_id}}/egress",
            name="egress",
            leader=True,
            handler=bound(update_egress),
            body=EgressRequest,
            result=SandboxStatusResponse,
            failure="update egress failed",
            summary="(rock) Replace a running sandbox's egress policy (where it may connect).",
            description="Body: egress, a policy {default: allow|deny, rules: [{action, cidr, ports, "
            "protocol}], domains: [...]} or null for none; in force on the host before the answer.",
        ),
    ]
