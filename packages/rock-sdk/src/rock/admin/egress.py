"""(rock) The admin's egress route: ``POST /sandboxes/{sandbox_id}/egress`` replaces a running
sandbox's egress policy (:mod:`rock_core.egress`), enforced on the host before it answers.
A key reaches only its tenant's sandboxes (another tenant's id is an unknown sandbox)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock.admin.envelope import BadInput
from rock.admin.key_gate import scope_key
from rock.admin.routing import PREFIX, Handler, Route
from rock_core.actions import EgressRequest, SandboxStatusResponse
from rock_core.egress import egress_policy, wider_than
from rock_core.errors import InvalidParameter
from rock_core.responses import status_response

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["egress_routes", "limited", "update_egress"]


def limited(app: AdminApp, request: Request, asked: dict[str, Any] | None) -> dict[str, Any] | None:
    """The egress policy a start (or an update) of the caller's key gets: ``asked``, else the
    key's ``default_egress``, else the admin's; refused when wider than the key's ``max_egress``.

    :raises BadInput: malformed, or wider than the key allows (naming the rule and the tenant).
    """
    key = scope_key(request.scope)
    try:
        policy = egress_policy(asked) if asked is not None else None
    except InvalidParameter as exc:
        raise BadInput(exc) from None
    if policy is None:
        policy = (key.default_egress if key is not None else None) or app.settings.default_egress
    widest = key.max_egress if key is not None else None
    if key is not None and widest is not None:
        wider = wider_than(policy, widest)
        if wider is not None:
            raise BadInput(
                InvalidParameter(
                    f"invalid parameter: egress: {wider} is wider than tenant {key.tenant!r} may "
                    f"ask for (max_egress on its api_keys entry: {widest.describe()})",
                    field="egress",
                    value=asked,
                )
            )
    return policy.to_dict() if policy is not None else None


async def update_egress(
    app: AdminApp, request: Request, body: EgressRequest
) -> SandboxStatusResponse:
    """``POST /sandboxes/{sandbox_id}/egress``: the new policy in force, then the status."""
    policy = limited(app, request, body.egress)  # none asked: the default, within the max
    record = await app.manager.update_egress(body.sandbox_id, policy)
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
