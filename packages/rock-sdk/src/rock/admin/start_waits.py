"""``POST /sandboxes/wait_any`` (rock): one held request waits for many starting sandboxes.

A trainer's starts wait together: each ``Sandbox.start()`` of an event loop joins a held
``wait_any`` of that loop (rock.sdk._drivers.remote_waits), which this route holds until any of
its ids settles. With a ``watch`` the admin keeps the ids between requests (:class:`_Watch`), so
each is sent once; with ``brief`` a sandbox that runs is answered by what a start's wait reads,
not its whole status.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import attrs
from starlette.requests import Request
from starlette.responses import Response

from rock.admin.envelope import success_plain
from rock.admin.lifecycle import _check_count
from rock.admin.models import MAX_STATUS_WAIT
from rock.admin.reading import tenant_of
from rock_core.actions import WaitAnyRequest, WaitAnyResponse
from rock_core.converters import unstructure_wire
from rock_core.engine.settle_waits import SettleWatch
from rock_core.errors import SandboxNotFound
from rock_core.responses import status_response
from rock_core.states import State

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["wait_any"]


async def wait_any(
    app: AdminApp, request: Request, body: WaitAnyRequest
) -> WaitAnyResponse | Response:
    """``POST /sandboxes/wait_any`` (rock): held until the start of any of the sandboxes asked
    has settled (or ``wait`` seconds, at most :data:`~rock.admin.models.MAX_STATUS_WAIT`,
    passed); then the statuses of all that have settled. One request waits for a client's many
    starting sandboxes; another tenant's ids are answered as unknown ones are.

    With ``watch``, the ids join a watch the admin keeps (:class:`_Watch`) and the wait is for
    any of its ids, so a client sends each id once: the cost of a waiting trainer grows with
    its starts, not with the seconds they take."""
    _check_count(app, body.sandbox_ids)
    asked = list(dict.fromkeys(body.sandbox_ids))
    unknown = [sandbox_id for sandbox_id in asked if not app.owns(request, sandbox_id)]
    others = set(unknown)
    mine = [sandbox_id for sandbox_id in asked if sandbox_id not in others]
    wait = min(body.wait, MAX_STATUS_WAIT)
    name = None
    if body.watch is None:
        settled = await app.manager.wait_any(mine, wait) if mine else []
    else:
        name, watch = _watch(app, request, body.watch)
        watch.settles.add(mine)
        if len(watch.pending) > app.settings.batch_max_count:
            del app.wait_watches[name]
            _check_count(app, list(watch.pending))
        watch.asking += 1
        try:
            # The engine's watch looks at the ids that changed since its last look, not at each
            # id at each request (those answered leave it).
            settled = (
                await app.manager.wait_any((), wait, watch=watch.settles) if watch.pending else []
            )
        finally:
            watch.asking -= 1
            watch.used = time.monotonic()
    if body.brief:
        return await _brief_answer(app, settled, unknown, name)
    statuses = []
    for sandbox_id in settled:
        try:
            statuses.append(status_response(await app.manager.get_status(sandbox_id, True)))
        except SandboxNotFound:
            unknown.append(sandbox_id)
    return WaitAnyResponse(statuses=statuses, unknown=unknown, watch=name)


async def _brief_answer(
    app: AdminApp, settled: list[str], unknown: list[str], watch: str | None
) -> Response:
    """``wait_any``'s answer with ``brief``: a running sandbox by its id, state and address
    (what a start's wait reads), any other outcome as its whole status. At 16,000 starts the
    whole statuses were about 7 % of the admin's loop (the status, then its wire form) and the
    larger part of a waiting client's CPU (reading them back)."""
    statuses: list[dict[str, Any]] = []
    for sandbox_id in settled:
        try:
            status = await app.manager.get_status(sandbox_id, True)
        except SandboxNotFound:
            unknown.append(sandbox_id)
            continue
        record = status.record
        if record.state is State.RUNNING:
            statuses.append(
                {
                    "sandbox_id": record.sandbox_id,
                    "state": State.RUNNING.value,
                    "is_alive": not record.paused,
                    "host_name": record.host_name,
                    "host_ip": record.host_ip,
                }
            )
        else:
            statuses.append(unstructure_wire(status_response(status)))
    return success_plain({"statuses": statuses, "unknown": unknown, "watch": watch})


#: A watch no request used for this long (and none holds) is forgotten: its client is gone.
_WATCH_IDLE = 300.0
#: The watches one tenant keeps at most (an SDK process uses up to 4); past it, opening one
#: forgets the tenant's least recently used watch no request holds: a tenant that opens watches
#: without end cannot grow the admin's memory without end.
_WATCHES_PER_TENANT = 256


@attrs.define(eq=False)
class _Watch:
    """The ids one client waits for with ``wait_any``, kept between its requests (in the
    engine's :class:`~rock_core.engine.settle_waits.SettleWatch`, which also keeps how far it
    has looked)."""

    tenant: str | None
    settles: SettleWatch = attrs.field(factory=SettleWatch)
    used: float = attrs.field(factory=time.monotonic)
    asking: int = 0

    @property
    def pending(self) -> dict[str, None]:
        """The ids waited for, not yet answered."""
        return self.settles.pending


def _watch(app: AdminApp, request: Request, name: str) -> tuple[str, _Watch]:
    """The watch ``name`` of the request's tenant, or a new one (``name`` is ``""``, unknown,
    forgotten, or another tenant's); the watches long unused are forgotten meanwhile."""
    watches: dict[str, _Watch] = app.wait_watches
    now = time.monotonic()
    for old in [k for k, w in watches.items() if not w.asking and now - w.used > _WATCH_IDLE]:
        del watches[old]
    tenant = tenant_of(request)
    watch = watches.get(name) if name else None
    if watch is None or watch.tenant != tenant:
        theirs = [
            (w.used, i, k)  # (the oldest first among equal times)
            for i, (k, w) in enumerate(watches.items())
            if w.tenant == tenant and not w.asking
        ]
        if len(theirs) >= _WATCHES_PER_TENANT:
            del watches[min(theirs)[2]]
        name = secrets.token_urlsafe(16)
        watch = watches[name] = _Watch(tenant)
    return name, watch
