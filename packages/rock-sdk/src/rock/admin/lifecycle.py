"""The admin's sandbox lifecycle routes: ``/start``, ``/start_async``, ``/get_status``,
``/is_alive``, the statistics (``/get_sandbox_statistics``, ``/sandboxes/{sandbox_id}/statistics``),
``/stop``, ``/delete``, ``/restart``, ``/sandboxes/{sandbox_id}/archive``,
``/warmup/tasks``, ``/warm_pools``, ``/sandboxes``, ``/sandboxes/batch``,
``/sandboxes/wait_any`` and ``/sandboxes/start_batch``, and what the admin
checks of a start request before the engine sees it (the reserved tenant key, ``network="host"``,
the key's highest priority, the capabilities the key may add, an ``Idempotency-Key`` header).
The engine gets the key's tenant (the sandbox's namespace) and quota with every start and
restart, and checks the quota itself, atomically with recording the start. Warm pools are the
operator's: only an ``operator`` key (or anyone, without keys) sizes, removes or lists them.

Each handler takes the :class:`~rock.admin.app.AdminApp` first; the app's route table binds it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from starlette.requests import Request
from starlette.responses import Response

from rock.admin.auth import TENANT_METADATA_KEY
from rock.admin.egress import limited
from rock.admin.envelope import BadInput, json_response
from rock.admin.key_gate import scope_key, scope_tenant
from rock.admin.models import MAX_STATUS_WAIT, GetStatusQuery, ListSandboxesQuery, SandboxIdQuery
from rock.admin.reading import unknown_keys
from rock_core._evolve import evolve
from rock_core.actions import (
    BatchSandboxStatusRequest,
    BatchSandboxStatusResponse,
    IsAliveResponse,
    SandboxIdRequest,
    SandboxListResponse,
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    StartBatchOutcome,
    StartBatchRequest,
    StartBatchResponse,
    WarmPoolsResponse,
    WarmupRequest,
)
from rock_core.converters import capability_names, structure_wire
from rock_core.engine.starting import idempotency_key_problem
from rock_core.errors import (
    Forbidden,
    InvalidParameter,
    RockError,
    SandboxAlreadyExists,
    SandboxNotFound,
    wire_code,
)
from rock_core.models import PRIORITY_NORMAL
from rock_core.responses import (
    rocklet_statistics,
    start_response,
    statistics_response,
    status_response,
)
from rock_core.states import LIVE_STATES

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

IDEMPOTENCY_HEADER = "Idempotency-Key"

#: How long a ``/sandboxes/start_batch`` takes items in before it lets the event loop run the
#: rest (once after each item, the records of one item each were written and committed one loop
#: turn at a time: about 30 us of a commit's cost per start more than grouped).
_BATCH_TURN = 0.002

__all__ = [
    "start",
    "start_async",
    "start_batch",
    "get_status",
    "is_alive",
    "statistics",
    "get_statistics",
    "stop",
    "delete",
    "restart",
    "archive",
    "warmup",
    "warm_pools",
    "list_sandboxes",
    "batch_status",
    "is_operator",
]


async def start(app: AdminApp, request: Request, body: SandboxStartRequest) -> SandboxStartResponse:
    """``POST /start``: start and wait until running (at most ``start_wait_seconds``)."""
    started = await app.manager.start_async(
        _start_request(app, request, body),
        **_tenancy(request),
        **_identity(request),
        idempotency_key=_idempotency_key(request),
    )
    await app.manager.wait_until_running(
        started.sandbox_id, timeout=app.settings.start_wait_seconds
    )
    return start_response(started)


async def start_async(
    app: AdminApp, request: Request, body: SandboxStartRequest
) -> SandboxStartResponse:
    """``POST /start_async``: accept the start and return at once."""
    return start_response(
        await app.manager.start_async(
            _start_request(app, request, body),
            **_tenancy(request),
            **_identity(request),
            idempotency_key=_idempotency_key(request),
        )
    )


async def start_batch(
    app: AdminApp, request: Request, body: StartBatchRequest
) -> StartBatchResponse:
    """``POST /sandboxes/start_batch`` (rock): accept each item's start as ``/start_async``
    would, in order (each admitted for the caller's tenant, within its quota, as it comes); one
    outcome per item: its sandbox, or the error ``/start_async`` would have answered (a refused
    item leaves nothing behind). A client's many starts in one request."""
    _check_count(app, body.items, "items")
    outcomes = []
    # One batch at a time, in the order they came: taken in turns, a thousand clients' batches
    # would all be answered at the end of the burst; this way the first is answered first.
    headers = _identity(request)  # the batch's, where an item names none (read once)
    async with app.start_batches:
        turn = time.monotonic()
        for item in body.items:
            if time.monotonic() - turn >= _BATCH_TURN:
                # The starts already accepted go on meanwhile, and other requests are read.
                await anyio.lowlevel.checkpoint()
                turn = time.monotonic()
            try:
                started = await _start_item(app, request, item, headers)
                outcomes.append(StartBatchOutcome(sandbox=started))
            except BadInput as exc:
                outcomes.append(_outcome("invalid parameter", exc.error))
            except RockError as exc:
                outcomes.append(_outcome("start sandbox failed", exc))
    return StartBatchResponse(items=outcomes)


async def _start_item(
    app: AdminApp, request: Request, item: Any, headers: dict[str, Any]
) -> SandboxStartResponse:
    data = item.request
    ignored = unknown_keys(data, SandboxStartRequest)
    if ignored and not app.settings.strict_fields:
        data = {k: v for k, v in data.items() if k not in ignored}
    try:
        body = structure_wire(data, SandboxStartRequest)
        if item.idempotency_key is not None:
            why = idempotency_key_problem(item.idempotency_key)
            if why is not None:
                raise InvalidParameter(
                    f"invalid parameter: idempotency_key: {why}, got {item.idempotency_key!r}",
                    field="idempotency_key",
                    value=item.idempotency_key,
                )
    except InvalidParameter as exc:
        raise BadInput(exc) from None
    if body.sandbox_id is not None and not app.owns(request, body.sandbox_id):
        raise SandboxAlreadyExists(  # the id is taken; whose is not said (as /start_async)
            f"sandbox id {body.sandbox_id!r} is taken: choose another, or leave sandbox_id out",
            sandbox_id=body.sandbox_id,
            attempted="start_batch",
        )
    identity = {name: getattr(item, name) or value for name, value in headers.items()}
    started = await app.manager.start_async(
        _start_request(app, request, body),
        **_tenancy(request),
        **identity,
        idempotency_key=item.idempotency_key,
    )
    return start_response(started)


def _outcome(message: str, exc: RockError) -> StartBatchOutcome:
    """A refused item's outcome: the ``Failed`` envelope ``/start_async`` would answer."""
    return StartBatchOutcome(
        message=message,
        error=str(exc) or type(exc).__name__,
        code=wire_code(exc.code),
        rock_code=exc.code,
    )


def _idempotency_key(request: Request) -> str | None:
    """The start's ``Idempotency-Key`` header (rock; the IETF draft's name), or ``None``: a start
    with a key the tenant used before answers that start's sandbox instead of making another.

    :raises BadInput: a blank key, one longer than 200 characters, or one with a character
        that is not printable ASCII; naming the header and the value.
    """
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    why = idempotency_key_problem(key)
    if why is not None:
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: {IDEMPOTENCY_HEADER}: {why}, got {key!r}",
                field=IDEMPOTENCY_HEADER,
                value=key,
            )
        )
    return key


async def get_status(
    app: AdminApp, _request: Request, query: GetStatusQuery
) -> SandboxStatusResponse:
    """``GET /get_status``; with rock's ``wait``, once the sandbox's start settled or the wait
    is up (see :class:`~rock.admin.models.GetStatusQuery`)."""
    if query.wait > 0:
        with anyio.move_on_after(min(query.wait, MAX_STATUS_WAIT)):
            try:
                await app.manager.wait_until_running(query.sandbox_id, timeout=None)
            except RockError:
                pass  # failed, stopped or unknown: the status below says which
    return status_response(await app.manager.get_status(query.sandbox_id, query.include_all_states))


async def is_alive(app: AdminApp, _request: Request, query: SandboxIdQuery) -> IsAliveResponse:
    """``GET /is_alive``: any failure is ``is_alive: false`` (ROCK)."""
    try:
        client = app.manager.rocklet(query.sandbox_id, "is_alive", activity=False)
    except RockError as exc:
        return IsAliveResponse(is_alive=False, message=str(exc))
    alive = await client.is_alive()
    return IsAliveResponse(
        is_alive=alive, message="" if alive else "the sandbox's rocklet does not answer"
    )


async def statistics(app: AdminApp, _request: Request, query: SandboxIdQuery) -> dict[str, Any]:
    """``GET /sandboxes/{sandbox_id}/statistics``: the engine's last sample of the sandbox's
    resource use, in ROCK's ``get_statistics`` shape (cpu, mem, disk, net) with rock's usage."""
    return statistics_response(await app.manager.get_status(query.sandbox_id))


async def get_statistics(app: AdminApp, _request: Request, query: SandboxIdQuery) -> dict[str, Any]:
    """``GET /get_sandbox_statistics``: the rocklet's CPU, memory and network figures, and the
    sandbox's disk use (:func:`~rock_core.responses.rocklet_statistics`)."""
    figures = await app.manager.rocklet(
        query.sandbox_id, "get_statistics", activity=False
    ).get_statistics()
    return rocklet_statistics(figures, await app.manager.get_status(query.sandbox_id))


async def stop(app: AdminApp, _request: Request, body: SandboxIdRequest) -> str:
    """``POST /stop``."""
    await app.manager.stop(body.sandbox_id)
    return f"{body.sandbox_id} stopped"


async def delete(app: AdminApp, _request: Request, body: SandboxIdRequest) -> str:
    """``POST /delete``."""
    await app.manager.delete(body.sandbox_id)
    return f"{body.sandbox_id} deleted"


async def restart(app: AdminApp, request: Request, body: SandboxIdRequest) -> SandboxStartResponse:
    """``POST /restart`` and ``POST /sandboxes/{sandbox_id}/restart`` (within the key's quota)."""
    return start_response(await app.manager.restart(body.sandbox_id, _tenancy(request)["quota"]))


async def archive(app: AdminApp, _request: Request, body: SandboxIdRequest) -> str:
    """``POST /sandboxes/{sandbox_id}/archive``: start archiving a stopped sandbox."""
    await app.manager.archive(body.sandbox_id)
    return f"{body.sandbox_id} archiving"


async def warmup(app: AdminApp, request: Request, body: WarmupRequest) -> Response:
    """``POST /warmup/tasks``: pull the image in the background (ROCK); with ``size``, keep a
    warm pool (rock: an operator's key only)."""
    tenant = scope_tenant(request.scope)
    if body.size is not None:
        _require_operator(request, f"warm pools (size {body.size})")
    _check_network(app, tenant, body)
    _check_capabilities(request, body)
    key = await app.manager.warmup(body.start_request(), body.size, tenant=tenant)
    message = "warmup task started" if key is None else f"warm pool {key} set to {body.size}"
    return json_response({"status": "Success", "message": message, "error": None, "result": None})


async def warm_pools(app: AdminApp, request: Request, _data: None) -> WarmPoolsResponse:
    """``GET /warm_pools`` (rock addition): every warm pool and how full it is (an operator's key only)."""
    _require_operator(request, "warm pools")
    return WarmPoolsResponse(pools=app.manager.warm_pools())


async def list_sandboxes(
    app: AdminApp, request: Request, query: ListSandboxesQuery
) -> SandboxListResponse:
    """``GET /sandboxes``: a page of pending and running sandboxes."""
    limit = app.settings.batch_max_count
    if query.page_size > limit:
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: page_size: at most {limit}, got {query.page_size}",
                field="page_size",
                value=query.page_size,
            )
        )
    filters = {
        name: value
        for name in ("user_id", "experiment_id", "namespace", "cluster", "image", "state")
        if (value := getattr(query, name)) is not None
    }
    states = sorted(LIVE_STATES, key=lambda s: s.value)
    manager = app.manager
    offset = (query.page - 1) * query.page_size
    tenant = scope_tenant(request.scope)
    if tenant is None:
        records = manager.list_records(
            states=states, filters=filters, limit=query.page_size, offset=offset
        )
        total = manager.count_records(states=states, filters=filters)
    else:
        # The tenant lives in the spec's metadata, which the store cannot filter on; live
        # sandboxes are few enough to filter here.
        mine = [
            r
            for r in manager.list_records(states=states, filters=filters)
            if r.spec.metadata.get(TENANT_METADATA_KEY) == tenant
        ]
        records, total = mine[offset : offset + query.page_size], len(mine)
    items = [status_response(s) for s in manager.statuses_of(records)]
    return SandboxListResponse(items=items, total=total, has_more=offset + len(items) < total)


async def batch_status(
    app: AdminApp, request: Request, body: BatchSandboxStatusRequest
) -> BatchSandboxStatusResponse:
    """``POST /sandboxes/batch``: statuses of the pending and running sandboxes among those asked."""
    _check_count(app, body.sandbox_ids)
    records = []
    for sandbox_id in dict.fromkeys(body.sandbox_ids):
        try:
            record = app.manager.get_record(sandbox_id)
        except SandboxNotFound:
            continue
        if record.state in LIVE_STATES and app.owns(request, sandbox_id):
            records.append(record)
    return BatchSandboxStatusResponse(
        statuses=[status_response(s) for s in app.manager.statuses_of(records)]
    )


def _check_count(app: AdminApp, sandbox_ids: list[Any], field: str = "sandbox_ids") -> None:
    limit = app.settings.batch_max_count
    if len(sandbox_ids) > limit:
        what = "ids" if field == "sandbox_ids" else field
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: {field}: at most {limit} {what}, got {len(sandbox_ids)}",
                field=field,
                value=len(sandbox_ids),
            )
        )


def _start_request(
    app: AdminApp, request: Request, body: SandboxStartRequest
) -> SandboxStartRequest:
    """``body`` with the key's tenant in its metadata; the reserved key is refused from callers."""
    metadata = dict(body.metadata or {})
    if TENANT_METADATA_KEY in metadata:
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: metadata: {TENANT_METADATA_KEY!r} is reserved for the admin",
                field="metadata",
                value=TENANT_METADATA_KEY,
            )
        )
    tenant = scope_tenant(request.scope)
    _check_network(app, tenant, body)
    _check_priority(app, tenant, body)
    _check_capabilities(request, body)
    egress = limited(app, request, body.egress)  # the default, within the key's widest
    changes: dict[str, Any] = {}
    if egress != body.egress:
        changes["egress"] = egress
    if tenant is not None:
        metadata[TENANT_METADATA_KEY] = tenant
        changes["metadata"] = metadata
    return evolve(body, **changes) if changes else body


def _check_priority(app: AdminApp, tenant: str | None, body: SandboxStartRequest) -> None:
    """Refuse a start priority above what the caller's key may ask for (``max_priority`` of
    its api_keys entry; 5, normal, unless raised there). Without keys any priority goes."""
    if tenant is None or body.priority is None:
        return
    limit = app.keys.max_priority.get(tenant, PRIORITY_NORMAL)
    if body.priority > limit:
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: priority: {body.priority} is above the highest tenant {tenant!r} may ask "
                f"for ({limit}; raise max_priority on its api_keys entry)",
                field="priority",
                value=body.priority,
            )
        )


def _check_network(app: AdminApp, tenant: str | None, body: SandboxStartRequest) -> None:
    """Refuse ``network="host"`` unless this admin, or the caller's key, allows it: a sandbox on
    the host's network reaches everything the host does (trusted code only)."""
    if (
        body.network != "host"
        or app.settings.allow_host_network
        or tenant in app.keys.host_network_tenants
    ):
        return
    who = f"tenant {tenant!r}" if tenant is not None else "callers"
    raise BadInput(
        InvalidParameter(
            f"invalid parameter: network: 'host' shares the host's network and is for trusted code only; "
            f"this admin does not allow it for {who} (set allow_host_network in [admin], or on the "
            "tenant's api_keys entry; see docs/security.md)",
            field="network",
            value="host",
        )
    )


def _tenancy(request: Request) -> dict[str, Any]:
    """What the engine gets of the request's key: its tenant (the sandbox's namespace) and its
    quota. Without keys: neither (the engine's owner is the tenant, with no quota)."""
    key = scope_key(request.scope)
    return (
        {"tenant": None, "quota": None}
        if key is None
        else {"tenant": key.tenant, "quota": key.quota}
    )


def is_operator(request: Request) -> bool:
    """Whether the request's key is an operator's (``operator = true``); without keys, everyone is."""
    key = scope_key(request.scope)
    return key is None or key.operator


def _require_operator(request: Request, what: str) -> None:
    """Refuse a non-operator key (:class:`~rock_core.errors.Forbidden`, code 4003), naming the role."""
    if not is_operator(request):
        tenant = scope_tenant(request.scope)
        raise Forbidden(
            f"{what}: managing warm pools needs the operator role, which tenant {tenant!r}'s key does not have "
            "(operator = true on its api_keys entry); its starts are served from the pools without it",
            attempted="warmup",
        )


def _check_capabilities(request: Request, body: SandboxStartRequest) -> None:
    """Refuse capabilities the caller's key was not given (``allowed_cap_add`` of its api_keys
    entry; none unless listed). Without keys the engine's own ``allowed_cap_add`` rules alone."""
    key = scope_key(request.scope)
    if key is None or not body.cap_add:
        return
    try:
        asked = capability_names(body.cap_add)
    except ValueError:
        return  # not a list of capabilities: the engine names the field and the value
    refused = [name for name in asked if name not in key.allowed_cap_add]
    if refused:
        allowed = ", ".join(key.allowed_cap_add) or "none"
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: cap_add: {', '.join(refused)} not allowed for tenant {key.tenant!r} "
                f"(allowed_cap_add on its api_keys entry: {allowed}; see docs/security.md)",
                field="cap_add",
                value=refused,
            )
        )


def _identity(request: Request) -> dict[str, Any]:
    headers = request.headers
    return {
        "user_id": headers.get("x-user-id") or None,
        "experiment_id": headers.get("x-experiment-id") or None,
        "namespace": headers.get("x-namespace") or None,
        "cluster": headers.get("x-cluster") or None,
    }
