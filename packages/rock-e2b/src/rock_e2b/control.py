"""E2B's control plane (``E2B_API_URL`` = ``http://<admin>/e2b``) on rock's engine.

============================================  ================================================
E2B                                           rock
============================================  ================================================
``POST /sandboxes``, ``/v2/sandboxes``        a start (template -> image, or the tenant's
                                              snapshot of that name; ``timeout`` -> the idle
                                              timeout; ``envVars``; ``metadata``), waited
                                              until running
``GET /sandboxes/{id}``                       the record (``running``; ``paused`` when paused or
                                              archived)
``GET /sandboxes``, ``/v2/sandboxes``         the tenant's sandboxes, ``metadata``/``state``
                                              filters
``DELETE /sandboxes/{id}``                    stop, then delete
``POST /sandboxes/{id}/timeout``              restart the idle clock (never longer than the
                                              idle timeout set at creation: refused)
``POST /sandboxes/{id}/connect``, ``resume``  resume a paused sandbox; answers the data-plane
                                              token
pause, snapshots, fork, metrics               :mod:`rock_e2b.episodes`
============================================  ================================================

``allow_internet_access`` and ``network`` (create, ``PUT /sandboxes/{id}/network``) are rock's
egress policy (:mod:`rock_e2b.network`). Logs and refreshes are answered with E2B's error shape, HTTP 501, saying they
are not served; E2B's templates, volumes and secrets APIs are not served at all (HTTP 404).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

import attrs

from rock_core.actions import SandboxStartRequest
from rock_core.errors import NotSupported, QuotaExceeded, RockError
from rock_core.models import SandboxRecord
from rock_core.routes import AdminRoute, RouteRequest, RouteResponse
from rock_core.states import State
from rock_e2b.access import TENANT_KEY, E2BError, access_token, error_response, owned_record
from rock_e2b.network import egress_of

__all__ = [
    "ENVD_VERSION",
    "PREFIX",
    "TEMPLATE_KEY",
    "Templates",
    "body_of",
    "failed",
    "live_record",
    "routes",
    "templates",
]

PREFIX = "/e2b"
#: The envd version rock answers: what the data plane serves (octet-stream uploads, no
#: file metadata, default user).
ENVD_VERSION = "0.5.7"
#: Where a sandbox made through E2B keeps its template's name.
TEMPLATE_KEY = "rock.e2b.template"
_MIB = 1024 * 1024
_DEFAULT_TIMEOUT = 300


class Templates:
    """Template names to images (``[plugins.e2b] templates = {base = "python:3.11"}``); a name
    not in the table is taken as an image name, as ROCK does."""

    def __init__(self, table: Mapping[str, str] | None = None) -> None:
        self.table = dict(table or {})

    def image(self, template: str) -> str:
        return self.table.get(template, template)


templates = Templates()


def body_of(request: RouteRequest) -> dict[str, Any]:
    try:
        body = request.json()
    except RockError as exc:
        raise E2BError(400, exc.message) from None
    if not isinstance(body, dict):
        raise E2BError(400, "the body must be a JSON object")
    return body


def _user_metadata(record: SandboxRecord) -> dict[str, str]:
    return {k: v for k, v in record.spec.metadata.items() if not k.startswith("rock.")}


def _state(record: SandboxRecord) -> str:
    return "paused" if record.paused or record.state is State.ARCHIVED else "running"


def _sandbox(record: SandboxRecord) -> dict[str, Any]:
    return {
        "templateID": record.spec.metadata.get(TEMPLATE_KEY, record.spec.image),
        "sandboxID": record.sandbox_id,
        "clientID": "rock",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": access_token(record),
        "domain": None,
    }


def _listed(record: SandboxRecord) -> dict[str, Any]:
    started = record.start_time or record.create_time
    timeout = record.spec.auto_clear_seconds or _DEFAULT_TIMEOUT
    return {
        "templateID": record.spec.metadata.get(TEMPLATE_KEY, record.spec.image),
        "sandboxID": record.sandbox_id,
        "clientID": "rock",
        "startedAt": started.isoformat(),
        "endAt": (started + timedelta(seconds=timeout)).isoformat(),
        "cpuCount": max(1, int(record.spec.cpus)),
        "memoryMB": record.spec.memory // _MIB,
        "diskSizeMB": (record.spec.disk or 0) // _MIB,
        "state": _state(record),
        "envdVersion": ENVD_VERSION,
        "metadata": _user_metadata(record),
    }


def failed(exc: RockError) -> E2BError:
    if isinstance(exc, QuotaExceeded):
        return E2BError(429, exc.message)
    if isinstance(exc, NotSupported):  # the runtime lacks what it takes
        return E2BError(501, exc.message)
    return E2BError(400 if exc.code // 1000 == 4 else 500, exc.message)


async def _is_snapshot(request: RouteRequest, name: str) -> bool:
    """Whether ``name`` is one of the caller's snapshots (E2B starts from a snapshot by naming
    it as the template). A name with a tag or a registry path (``python:3.11``) is an image:
    no snapshot is named so, and the runtime is not asked."""
    if ":" in name or "/" in name:
        return False
    try:
        found = await request.engine.list_snapshots(request.tenant)
    except RockError:  # a runtime without snapshots
        return False
    return any(info.name == name for info in found)


async def create(request: RouteRequest) -> Any:
    body = body_of(request)
    template = body.get("templateID")
    if not isinstance(template, str) or not template.strip():
        raise E2BError(400, "templateID: a template name is required")
    for field in ("mcp", "volumeMounts", "iam"):
        if body.get(field):
            raise E2BError(501, f"{field}: rock does not serve E2B's {field}")
    if body.get("autoPause"):
        raise E2BError(501, "autoPause: rock stops idle sandboxes; it does not pause them")
    metadata = body.get("metadata") or {}
    env = body.get("envVars") or {}
    if any(k.startswith("rock.") for k in metadata):
        raise E2BError(400, "metadata: keys starting with 'rock.' are reserved")
    timeout = body.get("timeout", _DEFAULT_TIMEOUT)
    metadata = {**metadata, TEMPLATE_KEY: template}
    if not isinstance(timeout, int) or timeout < 0:
        raise E2BError(400, "timeout: a whole number of seconds is required")
    fields: dict[str, Any] = {"image": templates.image(template), "auto_clear_seconds": timeout}
    if template not in templates.table and await _is_snapshot(request, template):
        fields["snapshot"] = template
    egress = egress_of(body.get("network"), body.get("allow_internet_access"))
    start = _admitted(
        request, SandboxStartRequest(**fields, env=dict(env), metadata=metadata, egress=egress)
    )
    engine = request.engine
    try:
        started = await engine.start_async(start, tenant=request.tenant, quota=request.quota)
        await engine.wait_until_running(started.sandbox_id)
    except RockError as exc:
        raise failed(exc) from None
    record = engine.get_record(started.sandbox_id)
    if record.state is not State.RUNNING:
        why = record.reason or record.state.value
        raise E2BError(400, f"template {template!r} (image {record.spec.image!r}): {why}")
    return RouteResponse(_sandbox(record), status=201)


def _admitted(request: RouteRequest, start: SandboxStartRequest) -> SandboxStartRequest:
    """``start`` as the admin admits it for the caller's key (its tenant, its default egress
    policy; what it may not ask for refused), as the admin's own ``/start``."""
    if request.admit is None:
        if request.tenant is None:
            return start
        metadata = {**(start.metadata or {}), TENANT_KEY: request.tenant}
        return attrs.evolve(start, metadata=metadata)
    try:
        admitted: SandboxStartRequest = request.admit(start)
    except RockError as exc:
        raise E2BError(400, exc.message) from None
    return admitted


async def update_network(request: RouteRequest) -> Any:
    record = live_record(request)
    body = body_of(request)
    egress = egress_of(body, body.get("allow_internet_access"))
    # The admin's check of what the key may ask for (its max_egress; none asked: its default).
    asked = _admitted(request, SandboxStartRequest(image=record.spec.image, egress=egress))
    try:
        await request.engine.update_egress(record.sandbox_id, asked.egress)
    except RockError as exc:
        raise failed(exc) from None
    return RouteResponse({}, status=200)


def live_record(request: RouteRequest) -> SandboxRecord:
    record = owned_record(request.engine, request.path_params["sandbox_id"], request.tenant)
    if record.state not in (State.RUNNING, State.PENDING, State.ARCHIVED):
        raise E2BError(404, f"sandbox {record.sandbox_id!r} not found ({record.state.value})")
    return record


async def get(request: RouteRequest) -> Any:
    record = live_record(request)
    return {**_listed(record), **_sandbox(record)}


async def listing(request: RouteRequest) -> Any:
    """The caller's sandboxes that match ``metadata``, ``state`` and ``template``, by start
    time (``order``: ``asc`` or ``desc``), ``limit`` at a time from ``nextToken`` (an offset;
    the next one in the ``X-Next-Token`` header when more follow)."""
    query = request.query
    wanted = dict(urllib.parse.parse_qsl(query.get("metadata", "")))
    states = {s for s in query.get("state", "").split(",") if s}
    template = query.get("template")
    try:
        limit = max(1, min(int(query.get("limit", 100)), 1000))
        offset = max(0, int(query.get("nextToken") or 0))
    except ValueError:
        raise E2BError(400, "limit and nextToken: whole numbers") from None
    found = []
    for record in request.engine.list_records(states=[State.RUNNING, State.ARCHIVED]):
        meta = record.spec.metadata
        if request.tenant is not None and meta.get(TENANT_KEY) != request.tenant:
            continue
        if any(meta.get(k) != v for k, v in wanted.items()):
            continue
        if states and _state(record) not in states:
            continue
        if template and meta.get(TEMPLATE_KEY, record.spec.image) != template:
            continue
        found.append(record)
    found.sort(key=lambda r: r.start_time or r.create_time, reverse=query.get("order") == "desc")
    page = found[offset : offset + limit]
    headers = {"X-Next-Token": str(offset + limit)} if offset + limit < len(found) else {}
    return RouteResponse([_listed(r) for r in page], headers=headers)


async def kill(request: RouteRequest) -> Any:
    record = live_record(request)
    try:
        if record.state is not State.ARCHIVED:
            await request.engine.stop(record.sandbox_id, reason="killed through E2B's API")
        await request.engine.delete(record.sandbox_id)
    except RockError as exc:
        raise failed(exc) from None
    return RouteResponse({}, status=200)


async def set_timeout(request: RouteRequest) -> Any:
    record = live_record(request)
    timeout = body_of(request).get("timeout")
    if not isinstance(timeout, int) or timeout < 0:
        raise E2BError(400, "timeout: a whole number of seconds is required")
    idle = record.spec.auto_clear_seconds
    if idle is not None and timeout > idle:
        raise E2BError(
            400,
            f"timeout: rock's idle timeout of sandbox {record.sandbox_id} is {idle} s, set when "
            f"it was created; set_timeout restarts it but cannot lengthen it to {timeout} s",
        )
    request.engine.touch(record.sandbox_id)
    return RouteResponse({}, status=200)


async def _resumed(request: RouteRequest, status: int) -> Any:
    record = live_record(request)
    if record.state is State.ARCHIVED:
        raise E2BError(
            501, f"sandbox {record.sandbox_id} is archived: restore it with rock's restart"
        )
    try:
        if record.paused:
            await request.engine.resume(record.sandbox_id)
        await request.engine.wait_until_running(record.sandbox_id)
    except RockError as exc:
        raise failed(exc) from None
    request.engine.touch(record.sandbox_id)
    return RouteResponse(_sandbox(request.engine.get_record(record.sandbox_id)), status=status)


async def connect(request: RouteRequest) -> Any:
    return await _resumed(request, 200)


async def resume(request: RouteRequest) -> Any:
    return await _resumed(request, 201)


def _refuse(what: str) -> Callable[[RouteRequest], Awaitable[Any]]:
    async def handler(request: RouteRequest) -> Any:
        if "sandbox_id" in request.path_params:
            live_record(request)
        raise E2BError(501, f"rock does not serve E2B's {what}")

    return handler


def _e2b(handler: Callable[[RouteRequest], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapped(request: RouteRequest) -> Any:
        try:
            return await handler(request)
        except E2BError as exc:
            return error_response(exc)

    return wrapped


def routes() -> list[AdminRoute]:
    """The control plane's routes, under :data:`PREFIX`."""
    from rock_e2b import episodes

    p, sid = PREFIX, f"{PREFIX}/sandboxes/{{sandbox_id}}"
    table: list[tuple[str, str, Callable[[RouteRequest], Awaitable[Any]]]] = [
        ("POST", f"{p}/sandboxes", create),
        ("POST", f"{p}/v2/sandboxes", create),
        ("GET", f"{p}/sandboxes", listing),
        ("GET", f"{p}/v2/sandboxes", listing),
        ("GET", sid, get),
        ("DELETE", sid, kill),
        ("POST", f"{sid}/timeout", set_timeout),
        ("POST", f"{sid}/pause", episodes.pause),
        ("POST", f"{sid}/resume", resume),
        ("POST", f"{sid}/connect", connect),
        ("POST", f"{p}/v2/sandboxes/{{sandbox_id}}/connect", connect),
        ("POST", f"{sid}/fork", episodes.fork),
        ("POST", f"{sid}/snapshots", episodes.create_snapshot),
        ("GET", f"{p}/snapshots", episodes.list_snapshots),
        ("DELETE", f"{p}/templates/{{template_id}}", episodes.delete_snapshot),
        ("GET", f"{sid}/metrics", episodes.metrics),
        ("PUT", f"{sid}/network", update_network),
        ("GET", f"{sid}/logs", _refuse("logs")),
        ("POST", f"{sid}/refreshes", _refuse("refreshes")),
    ]
    return [
        AdminRoute(method, path, _e2b(handler), summary=f"E2B: {method} {path[len(p) :]}")
        for method, path, handler in table
    ]
