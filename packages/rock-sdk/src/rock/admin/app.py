"""The admin server's ASGI app: ROCK's sandbox API over a :class:`~rock_core.engine.manager.SandboxManager`.

Routes live under ``/apis/envs/sandbox/v1`` (:data:`PREFIX`) and answer with ROCK's envelope at
HTTP 200::

    {"status": "Success", "message": null, "error": null, "result": <the route's model>}
    {"status": "Failed", "message": "stop sandbox failed", "error": "<what went wrong>",
     "result": {"code": 4004, "exit_code": null, "failure_reason": "<what went wrong>"}}

A request that does not fit its model (malformed JSON, an unknown or missing field, a blank id,
a wrong type, a bad query parameter) is answered ``Failed`` with ``message: "invalid parameter"``,
``error`` naming every bad field and ``result.code`` 4001. An unexpected exception is answered
``Failed`` with ``result: null`` (never an HTTP 500). A body above the configured limit (10 MiB of
JSON, 100 MiB for ``/upload``) is answered with HTTP 413.

Besides ROCK's routes (:func:`build_routes` has the table, ``GET /openapi.json`` documents it),
the app serves ``GET /`` (``{"message": "hello, ROCK!"}``), ``GET /healthz`` and ``GET /metrics``
(Prometheus text).

API keys (see :mod:`rock.admin.auth`): when ``settings.api_keys`` is not empty, every request but
``GET /healthz`` and ``GET /`` needs ``X-API-Key: <key>`` or ``Authorization: Bearer <key>``; a
missing or unknown key is answered with HTTP 401 and a ``Failed`` envelope (``result.code``
4011). A key acts on its tenant's sandboxes only: another tenant's sandbox id is answered exactly
as an unknown id, and listings and batches leave them out. ``/metrics`` stays global (counts by
state and route, no sandbox ids). Without keys nothing is checked (ROCK has no authentication).

Streaming routes (rock additions): ``POST /execute_stream`` answers NDJSON events (those of
:meth:`RockletClient.execute_stream`; a failure after the stream began is one last
``{"type": "error", "code", "message"}`` event); ``POST /download`` and
``GET /processes/{process_id}/output`` answer raw bytes (``application/octet-stream``). All three
answer a failure that happens before any byte is sent with the JSON envelope instead, so a client
tells the two apart by the ``Content-Type``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from rock_core.actions import (
    BatchSandboxStatusRequest,
    BatchSandboxStatusResponse,
    CloseBashSessionResponse,
    CommandResponse,
    CreateBashSessionResponse,
    BashObservation,
    InterruptSessionResponse,
    IsAliveResponse,
    ListDirResponse,
    ProcessInfo,
    ReadFileResponse,
    SandboxBashAction,
    SandboxCloseBashSessionRequest,
    SandboxCommand,
    SandboxCreateBashSessionRequest,
    SandboxIdRequest,
    SandboxListResponse,
    SandboxReadFileRequest,
    SandboxStartRequest,
    WarmupRequest,
    WarmPoolsResponse,
    SandboxStartResponse,
    SandboxStatusResponse,
    SandboxWriteFileRequest,
    UploadResponse,
    WriteFileResponse,
)
from rock_core.converters import structure_wire, unstructure_wire
from rock_core.engine.manager import SandboxManager
from rock_core.engine.rocklet_client import RockletClient
from rock_core.errors import (
    BadRequestRockError,
    InvalidParameter,
    PayloadTooLarge,
    PluginError,
    RockError,
    RockletUnreachable,
    SandboxNotFound,
)
from rock_core.models import PRIORITY_NORMAL
from rock_core.plugins import Plugins, plugin_tables
from rock_core.responses import start_response, statistics_response, status_response
from rock_core.routes import AdminRoute, RouteRequest, RouteResponse
from rock_core.runtime import Runtime
from rock_core.states import LIVE_STATES, State
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rock import __version__
from rock.admin._openapi import openapi_document
from rock.admin.auth import TENANT_METADATA_KEY, KeyRing, key_from_headers
from rock.admin.config import AdminSettings
from rock.admin.portforward import SandboxSockets
from rock.admin.proxy import SandboxAccess, SandboxProxy
from rock.admin.models import (
    GetStatusQuery,
    InterruptSessionRequest,
    KillProcessRequest,
    ListSandboxesQuery,
    ProcessOutputQuery,
    ProcessStatusQuery,
    SandboxIdQuery,
    SandboxPathRequest,
    StartProcessRequest,
)

__all__ = ["PREFIX", "Route", "AdminApp", "create_app", "Metrics", "ApiKeyGate", "OPEN_PATHS", "UNAUTHORIZED_CODE"]

log = logging.getLogger("rock.admin")

#: Where ROCK's sandbox routes live.
PREFIX = "/apis/envs/sandbox/v1"

_JSON = "application/json"
_NDJSON = "application/x-ndjson"
_BYTES = "application/octet-stream"
_PATH_PARAM = re.compile(r"{(\w+)}")

# Routes outside ROCK's prefix, for the OpenAPI document: (path, summary, media type).
_PLAIN_ROUTES = (
    ("/", 'Greeting: {"message": "hello, ROCK!"}.', _JSON),
    ("/healthz", 'Liveness: {"status": "ok", "version"} (503 while starting).', _JSON),
    ("/metrics", "Prometheus text: sandboxes by state, start latency, queue, requests.", "text/plain"),
    ("/admin/status", "The admin's state as JSON: version, sandboxes by state, start queue, warm pools.", _JSON),
    ("/openapi.json", "This document.", _JSON),
    ("/rocklet.pyz", "The rocklet units on other hosts download (no key needed); X-Checksum-Sha256 is its digest.",
     "application/zip"),
)

Handler = Callable[[Request, Any], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class Route:
    """One route of the admin: how its input is read, what it answers, and its documentation.

    :param body: the attrs model of the JSON body (``None``: no body).
    :param query: the attrs model of the query string (``None``: no query parameters).
    :param form: the JSON schema of a multipart body (``/upload``).
    :param result: the model in the envelope's ``result`` (or of the raw answer).
    :param kind: ``envelope`` (ROCK's JSON envelope), ``ndjson`` or ``bytes`` (streams).
    :param failure: the envelope's ``message`` when the engine fails (ROCK's wording).
    """

    method: str
    path: str
    name: str
    handler: Handler
    summary: str
    description: str = ""
    body: Any = None
    query: Any = None
    form: dict[str, Any] | None = None
    result: Any = None
    kind: str = "envelope"
    failure: str = ""

    @property
    def path_params(self) -> list[str]:
        """Names of the ``{...}`` parts of the path."""
        return _PATH_PARAM.findall(self.path)

    @property
    def limited(self) -> bool:
        """Whether the route reads a body (and so can answer 413)."""
        return self.body is not None or self.form is not None

    @property
    def media_type(self) -> str:
        """The ``Content-Type`` of a successful answer."""
        return {"envelope": _JSON, "ndjson": _NDJSON, "bytes": _BYTES}[self.kind]

    @property
    def kind_description(self) -> str:
        """What a successful answer is, in words (for the OpenAPI document)."""
        return {
            "envelope": "ROCK's envelope",
            "ndjson": "NDJSON events; a failure before the first event is ROCK's JSON envelope",
            "bytes": "the raw bytes; a failure is ROCK's JSON envelope",
        }[self.kind]


# ---------------------------------------------------------------------------------------------
# Envelopes


def _json_response(data: Any, status_code: int = 200) -> Response:
    return Response(json.dumps(data, separators=(",", ":")).encode(), status_code=status_code, media_type=_JSON)


def success(result: Any) -> Response:
    """ROCK's envelope of a successful call."""
    return _json_response({"status": "Success", "message": None, "error": None, "result": unstructure_wire(result)})


def failure(message: str, exc: BaseException) -> Response:
    """ROCK's envelope of a failed call: typed errors carry their code in ``result``."""
    text = str(exc) or type(exc).__name__
    result = None
    if isinstance(exc, RockError):
        result = {"code": exc.code, "exit_code": getattr(exc, "exit_code", None), "failure_reason": text}
    return _json_response({"status": "Failed", "message": message, "error": text, "result": result})


def _too_large_response(limit: int) -> Response:
    exc = PayloadTooLarge(f"request body is larger than the limit of {limit} bytes")
    response = failure("payload too large", exc)
    response.status_code = 413
    return response


def _warned(request: Request, response: Response) -> Response:
    """``response`` with a ``Warning`` header naming the request's ignored fields, if any."""
    ignored = getattr(request.state, "ignored_keys", None)
    if ignored:
        # A header is printable ASCII: JSON's escapes for anything else, at most 20 names.
        names = [json.dumps(k)[1:-1].replace('\\"', "'").replace("\x7f", "\\u007f") for k in ignored[:20]]
        more = f" and {len(ignored) - 20} more" if len(ignored) > 20 else ""
        response.headers["Warning"] = f'299 rock "unknown field(s) ignored: {", ".join(names)}{more}"'
    return response


def _unknown_keys(data: Any, cls: type) -> list[str]:
    """The top-level keys of ``data`` that name no field of ``cls`` (an attrs class)."""
    if not isinstance(data, dict) or not attrs.has(cls):
        return []
    names = {f.name for f in attrs.fields(cls)}
    return sorted(str(key) for key in data if key not in names)


class _BadInput(Exception):
    """Wraps an :class:`InvalidParameter` raised while reading the request (not by the engine)."""

    def __init__(self, error: InvalidParameter) -> None:
        super().__init__(str(error))
        self.error = error


class _BodyTooLarge(Exception):
    """The request body passed its limit (``limit`` bytes) while it was being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than the limit of {limit} bytes")
        self.limit = limit


# ---------------------------------------------------------------------------------------------
# Metrics


_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


# No `_created` series: they double the exposition and no dashboard of rock's uses them.
disable_created_metrics()


class Metrics:
    """The admin's figures for Prometheus (``prometheus_client``, a registry of its own).

    Counters and the start-time histogram are cumulative for the life of the process: they never
    go backwards. Request counts are labelled by route *template* (``.../processes/{process_id}``)
    and outcome, so their number of series is bounded. Sandbox counts, the start queue and warm
    pools are read from the engine at each scrape, and so are the running sandboxes' summed
    usage and (``per_sandbox``) each one's gauges: a sandbox's series go when it stops.
    """

    def __init__(self, *, per_sandbox: bool = False) -> None:
        #: Whether each running sandbox's usage is exposed as gauges of its own (``sandbox_id`` label).
        self.per_sandbox = per_sandbox
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = PromCounter(
            "rock_http_requests", "Requests answered, by route template and outcome.", ["route", "outcome"],
            registry=self.registry,
        )
        self.start_seconds = Histogram(
            "rock_sandbox_start_seconds", "Seconds from a start request to running.",
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self._manager: SandboxManager | None = None
        self.registry.register(_EngineFigures(self))

    def count(self, route: str, outcome: str) -> None:
        """Count one request of ``route`` (a template) that ended with ``outcome``
        (``success``, ``failed``, ``invalid``, ``error``, ``too_large`` or ``unauthorized``)."""
        self.requests.labels(route, outcome).inc()

    def attach(self, manager: SandboxManager | None) -> None:
        """Read the engine's figures from ``manager`` (``None``: the engine stopped); observe its starts."""
        if manager is not None and self.start_seconds.observe not in manager.start_observers:
            manager.start_observers.append(self.start_seconds.observe)
        self._manager = manager

    def render(self) -> bytes:
        """The Prometheus text exposition of the admin's figures."""
        return generate_latest(self.registry)


class _EngineFigures:
    """A collector of what the engine knows at scrape time (sandboxes by state, queue, pools)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        manager = self._metrics._manager
        if manager is None:
            return
        by_state = manager.count_by_state()
        sandboxes = GaugeMetricFamily("rock_sandboxes", "Sandboxes known to the admin, by state.", labels=["state"])
        for state in State:
            sandboxes.add_metric([state.value], by_state.get(state, 0))
        yield sandboxes
        yield GaugeMetricFamily("rock_start_queue_depth", "Starts waiting for a slot in the start queue.", value=manager.queue.depth)
        yield GaugeMetricFamily("rock_start_queue_active", "Starts holding a slot now.", value=manager.queue.active)
        pools = manager.warm_pools()
        for name, family, help_text in (
            ("ready", GaugeMetricFamily, "Started sandboxes waiting in a warm pool."),
            ("size", GaugeMetricFamily, "Target size of a warm pool."),
            ("claimed", CounterMetricFamily, "Starts served from a warm pool."),
            ("failures", CounterMetricFamily, "Warm-pool members that failed to start."),
        ):
            metric = family(f"rock_warm_pool_{name}", help_text, labels=["pool", "image"])
            for pool in pools:
                metric.add_metric([pool.key, pool.image], getattr(pool, name))
            yield metric
        yield from _usage_figures(manager, per_sandbox=self._metrics.per_sandbox)


_USAGE_GAUGES = (
    ("cpu_percent", "CPU use in percent of one core over the last sample."),
    ("memory_bytes", "Memory in use (less reclaimable file cache)."),
    ("memory_limit_bytes", "Memory limit."),
    ("network_rx_bytes", "Bytes received since the sandbox started."),
    ("network_tx_bytes", "Bytes sent since the sandbox started."),
    ("pids", "Processes and threads."),
    ("oom_kills", "Processes the OOM killer ended."),
)


def _usage_figures(manager: SandboxManager, *, per_sandbox: bool) -> Iterator[Any]:
    """The running sandboxes' sampled usage: totals always, one series per sandbox when asked
    (bounded by the running sandboxes: a sandbox's series go with it)."""
    sampled = list(manager.usages().items())
    yield GaugeMetricFamily(
        "rock_sandboxes_cpu_percent", "Summed CPU use of the running sandboxes, in percent of one core.",
        value=sum(u.cpu_percent for _, u in sampled),
    )
    yield GaugeMetricFamily(
        "rock_sandboxes_memory_bytes", "Summed memory in use by the running sandboxes.",
        value=sum(u.memory_bytes for _, u in sampled),
    )
    yield GaugeMetricFamily(
        "rock_sandboxes_near_memory_limit", "Running sandboxes whose memory is near their limit.",
        value=sum(1 for _, u in sampled if any(w.startswith("memory at") for w in u.warnings)),
    )
    if not per_sandbox:
        return
    for field, help_text in _USAGE_GAUGES:
        metric = GaugeMetricFamily(f"rock_sandbox_{field}", help_text, labels=["sandbox_id"])
        for sandbox_id, usage in sampled:
            value = getattr(usage, field)
            if value is not None:
                metric.add_metric([sandbox_id], value)
        yield metric


# ---------------------------------------------------------------------------------------------
# Body size limits (a pure ASGI layer: it sees the bytes before any parsing)


class BodyLimit:
    """Answers HTTP 413 when a request body passes its limit (checked on ``Content-Length`` and
    again while reading, for chunked bodies); ``upload_paths`` get ``upload_limit``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        json_limit: int,
        upload_limit: int,
        upload_paths: set[str],
        metrics: Metrics,
        known_paths: set[str] | None = None,
    ) -> None:
        self.app = app
        # Requests are counted by path only when it is a route's own (bounded label values).
        self.known_paths = known_paths or set()
        self.json_limit = json_limit
        self.upload_limit = upload_limit
        self.upload_paths = upload_paths
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        limit = self.upload_limit if path in self.upload_paths else self.json_limit
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    self.metrics.count(path if path in self.known_paths else "(other)", "too_large")
                    await _too_large_response(limit)(scope, receive, send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            # Routes answer it themselves; this catches reads outside them.
            if started:
                raise
            self.metrics.count(path if path in self.known_paths else "(other)", "too_large")
            await _too_large_response(limit)(scope, receive, send)


# ---------------------------------------------------------------------------------------------
# API keys (a pure ASGI layer in front of everything, so no body is read for a stranger)

#: Paths served without a key: liveness probes and ROCK's greeting reveal nothing.
OPEN_PATHS = frozenset({"/healthz", "/", "/rocklet.pyz"})

#: ``result.code`` of a request refused for its key (ROCK has none; a 4xxx client error).
UNAUTHORIZED_CODE = 4011

#: Where :class:`ApiKeyGate` leaves the request's tenant in the ASGI scope.
_TENANT_SCOPE_KEY = "rock.tenant"


class ApiKeyGate:
    """Answers HTTP 401 unless the request carries a configured key (``X-API-Key`` or
    ``Authorization: Bearer``); puts the key's tenant in the scope for the routes."""

    def __init__(self, app: ASGIApp, *, keys: KeyRing, metrics: Metrics) -> None:
        self.app = app
        self.keys = keys
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        key = key_from_headers(scope["headers"])
        tenant = self.keys.tenant_of(key)
        if tenant is None and scope["type"] == "websocket":
            self.metrics.count("(unauthorized)", "unauthorized")
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized: no valid API key"})
            return
        if tenant is None:
            # One label for every refusal: a stranger must not grow the metrics with paths.
            self.metrics.count("(unauthorized)", "unauthorized")
            why = "no API key given" if key is None else "the API key is not valid"
            exc = BadRequestRockError(
                f"{why}: send X-API-Key: <key> or Authorization: Bearer <key>", code=UNAUTHORIZED_CODE
            )
            response = failure("unauthorized", exc)
            response.status_code = 401
            response.headers["www-authenticate"] = 'Bearer realm="rock"'
            await response(scope, receive, send)
            return
        await self.app({**scope, _TENANT_SCOPE_KEY: tenant}, receive, send)


def _tenant(request: Request) -> str | None:
    """The tenant of the request's key (``None``: keys are off)."""
    return request.scope.get(_TENANT_SCOPE_KEY)


def _as_unknown(sandbox_id: str, attempted: str) -> SandboxNotFound:
    # Word for word what the engine says of an id it never saw.
    return SandboxNotFound(f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted=attempted)


# ---------------------------------------------------------------------------------------------
# The app


_PROCESS_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _process_id(request: Request) -> str:
    value = str(request.path_params["process_id"])
    if not _PROCESS_ID.match(value) or value in (".", ".."):
        raise _BadInput(InvalidParameter(
            f"invalid parameter: process_id: {value!r} is not a process id", field="process_id", value=value
        ))
    return value


def _identity(request: Request) -> dict[str, str | None]:
    headers = request.headers
    return {
        "user_id": headers.get("x-user-id") or None,
        "experiment_id": headers.get("x-experiment-id") or None,
        "namespace": headers.get("x-namespace") or None,
        "cluster": headers.get("x-cluster") or None,
    }


class AdminApp:
    """The admin's routes over one engine. :attr:`asgi` is the ASGI app to serve.

    :param settings: the admin's settings.
    :param manager: an engine that is already open (tests); else the app opens one from
        ``settings.engine`` at startup and closes it at shutdown (sandboxes keep running).
    :param runtime: the runtime that engine places sandboxes with, instead of the plugin
        ``settings.engine.runtime`` names (``rock bench admin --scripted``).
    """

    def __init__(
        self,
        settings: AdminSettings,
        manager: SandboxManager | None = None,
        plugins: Plugins | None = None,
        *,
        runtime: Runtime | None = None,
    ) -> None:
        self.settings = settings
        self._given_manager = manager
        self._runtime = runtime
        self._manager = manager
        self.metrics = Metrics(per_sandbox=settings.per_sandbox_metrics)
        self.metrics.attach(manager)
        self.routes = build_routes(self)
        self._openapi: dict[str, Any] | None = None
        if plugins is None and manager is not None:
            plugins = manager.plugins
        elif plugins is None:
            # The admin owns rock's configuration: each plugin gets its table before anything
            # it registered is used, and the engine started at startup does not do it again.
            plugins = Plugins.load()
            plugins.configure(plugin_tables(settings.engine.plugin_options, os.environ, plugins.names()))
        self.plugins = plugins
        self.plugin_routes = self._check_plugin_routes(plugins.admin_routes())
        starlette_routes = [
            StarletteRoute(r.path, self._endpoint(r), methods=[r.method], name=r.name) for r in self.routes
        ]
        starlette_routes += [
            StarletteRoute(r.path, self._plugin_endpoint(r), methods=[r.method]) for r in self.plugin_routes
        ]
        starlette_routes += [
            StarletteRoute("/", self._hello, methods=["GET"]),
            StarletteRoute("/healthz", self._healthz, methods=["GET"]),
            StarletteRoute("/rocklet.pyz", self._rocklet_pyz, methods=["GET"]),
            StarletteRoute("/metrics", self._metrics, methods=["GET"]),
            StarletteRoute("/admin/status", self._status, methods=["GET"]),
            StarletteRoute("/openapi.json", self._openapi_json, methods=["GET"]),
        ]
        self.starlette = Starlette(routes=starlette_routes, lifespan=self._lifespan)
        self.asgi: ASGIApp = BodyLimit(
            self.starlette,
            json_limit=settings.max_json_body,
            upload_limit=settings.max_upload_body,
            upload_paths={f"{PREFIX}/upload"},
            metrics=self.metrics,
            known_paths={r.path for r in self.routes if "{" not in r.path},
        )
        self.keys = KeyRing(settings.api_keys)
        # A sandbox's own services (rock.admin.proxy, rock.admin.portforward): in front of the
        # body limit (proxied bodies stream, of any size), behind the key gate.
        access = SandboxAccess(lambda: self.manager, TENANT_METADATA_KEY)
        self.proxy = SandboxProxy(
            self.asgi, access=access, prefix=PREFIX, timeout=settings.proxy_timeout,
            max_message=settings.ws_max_message, credentials=self._is_key,
            tenant_of_scope=lambda scope: scope.get(_TENANT_SCOPE_KEY), sockets=SandboxSockets(access),
        )
        self.asgi = self.proxy
        if self.keys:
            self.asgi = ApiKeyGate(self.asgi, keys=self.keys, metrics=self.metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point (so the instance itself can be served)."""
        await self.asgi(scope, receive, send)

    def _is_key(self, authorization: str) -> bool:
        """Whether an ``Authorization`` value carries one of this admin's keys (never proxied on)."""
        return bool(self.keys) and self.keys.tenant_of(key_from_headers([(b"authorization", authorization.encode("latin-1"))])) is not None

    @property
    def manager(self) -> SandboxManager:
        """The engine (only while the app runs)."""
        if self._manager is None:
            raise RuntimeError("the admin's engine is not running")
        return self._manager

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        if self._given_manager is not None:
            yield
            return
        store = self.settings.engine.store_path
        if store:
            Path(store).parent.mkdir(parents=True, exist_ok=True)
        engine_config = self.settings.engine
        if engine_config.rocklet_url is None:  # units on other hosts fetch the rocklet from here
            engine_config = attrs.evolve(engine_config, rocklet_url=f"{self.settings.url}/rocklet.pyz")
        async with SandboxManager(
            engine_config, runtime=self._runtime, owner=self.settings.owner, plugins=self.plugins,
            configured=True,
        ) as manager:
            self._manager = manager
            self.metrics.attach(manager)
            log.info("rock admin %s: engine ready (store %s), serving %s", __version__, store, self.settings.url)
            try:
                yield
            finally:
                await self.proxy.aclose()
                log.info("rock admin shutting down; running sandboxes keep running")
                self._manager = None
                self.metrics.attach(None)

    # -- plugin routes ------------------------------------------------------------------

    def _check_plugin_routes(self, routes: list[Any]) -> list[AdminRoute]:
        """The plugins' routes, each an :class:`AdminRoute` on a path nobody else serves."""
        taken = {(r.method, r.path) for r in self.routes} | {
            ("GET", path) for path in ("/", "/healthz", "/metrics", "/openapi.json")
        }
        for route in routes:
            if not isinstance(route, AdminRoute):
                raise PluginError(
                    f"a plugin returned {route!r} from rock_admin_routes; return rock_core.routes.AdminRoute objects",
                    attempted="rock_admin_routes",
                )
            if (route.method, route.path) in taken:
                raise PluginError(
                    f"a plugin's route {route.method} {route.path} is already served by the admin or another plugin",
                    attempted="rock_admin_routes",
                )
            taken.add((route.method, route.path))
        return list(routes)

    def _plugin_endpoint(self, route: AdminRoute) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            outcome = "success"
            try:
                call = RouteRequest(
                    method=request.method,
                    path=request.url.path,
                    path_params={k: str(v) for k, v in request.path_params.items()},
                    query=dict(request.query_params),
                    headers={k.lower(): v for k, v in request.headers.items()},
                    body=await request.body(),
                    engine=self.manager,
                    tenant=_tenant(request),
                )
                answer = await route.handler(call)
                if isinstance(answer, RouteResponse):
                    if answer.status >= 400:
                        outcome = "failed"
                    response = _json_response(answer.body, answer.status)
                    response.headers.update(answer.headers)
                    return response
                return success(answer) if route.envelope else _json_response(answer)
            except RockError as exc:
                outcome = "invalid" if isinstance(exc, BadRequestRockError) else "failed"
                if route.envelope:
                    return failure(f"{route.method} {route.path} failed", exc)
                status = 400 if isinstance(exc, BadRequestRockError) else 500
                return _json_response({"detail": exc.message, "code": exc.code}, status)
            except Exception as exc:  # a plugin's bug: an HTTP 500 with the reason, and the log
                outcome = "error"
                log.exception("plugin route %s %s failed", route.method, route.path)
                if route.envelope:
                    return failure(f"{route.method} {route.path} failed", exc)
                return _json_response({"detail": f"{type(exc).__name__}: {exc}"}, 500)
            finally:
                self.metrics.count(route.path, outcome)

        endpoint.__name__ = f"plugin_{route.method.lower()}_{route.path}"
        return endpoint

    # -- request handling ----------------------------------------------------------------

    def _endpoint(self, route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            outcome = "success"
            try:
                data = await self._read(request, route)
                sandbox_id = getattr(data, "sandbox_id", None)
                if isinstance(sandbox_id, str) and not self._owns(request, sandbox_id):
                    answer = self._foreign(route, sandbox_id)
                elif not isinstance(sandbox_id, str) or self._manager is None:
                    answer = await route.handler(request, data)
                else:
                    async with self.manager.call(sandbox_id):  # never idle-stopped under a running call
                        answer = await route.handler(request, data)
                return _warned(request, answer if isinstance(answer, Response) else success(answer))
            except _BodyTooLarge as exc:
                outcome = "too_large"
                return _too_large_response(exc.limit)
            except _BadInput as exc:
                outcome = "invalid"
                return _warned(request, failure("invalid parameter", exc.error))
            except RockError as exc:
                outcome = "failed"
                return _warned(request, failure(route.failure, exc))
            except Exception as exc:  # never an HTTP 500: ROCK's envelope without a code
                outcome = "error"
                log.exception("%s %s failed", route.method, route.path)
                return _warned(request, failure(route.failure, exc))
            finally:
                self.metrics.count(route.path, outcome)

        endpoint.__name__ = route.name
        return endpoint

    def _owns(self, request: Request, sandbox_id: str) -> bool:
        """Whether the request's key may see ``sandbox_id`` (always, when keys are off).

        Unknown ids count as owned: the engine answers them as unknown anyway.
        """
        tenant = _tenant(request)
        if tenant is None or self._manager is None:
            return True
        try:
            record = self.manager.get_record(sandbox_id)
        except SandboxNotFound:
            return True
        return record.spec.metadata.get(TENANT_METADATA_KEY) == tenant

    def _foreign(self, route: Route, sandbox_id: str) -> Any:
        """The answer the route gives for an unknown id, given for another tenant's sandbox."""
        if route.name == "stop":
            return f"{sandbox_id} stopped"  # ROCK: stopping an unknown id is not an error
        if route.name == "delete":
            return f"{sandbox_id} deleted"
        if route.name == "is_alive":
            return IsAliveResponse(is_alive=False, message=str(_as_unknown(sandbox_id, "is_alive")))
        raise _as_unknown(sandbox_id, route.name)

    def _start_request(self, request: Request, body: SandboxStartRequest) -> SandboxStartRequest:
        """``body`` with the key's tenant in its metadata; the reserved key is refused from callers."""
        metadata = dict(body.metadata or {})
        if TENANT_METADATA_KEY in metadata:
            raise _BadInput(InvalidParameter(
                f"invalid parameter: metadata: {TENANT_METADATA_KEY!r} is reserved for the admin",
                field="metadata", value=TENANT_METADATA_KEY,
            ))
        tenant = _tenant(request)
        self._check_network(tenant, body)
        self._check_priority(tenant, body)
        if tenant is None:
            return body
        metadata[TENANT_METADATA_KEY] = tenant
        return attrs.evolve(body, metadata=metadata)

    def _check_priority(self, tenant: str | None, body: SandboxStartRequest) -> None:
        """Refuse a start priority above what the caller's key may ask for (``max_priority`` of
        its api_keys entry; 5, normal, unless raised there). Without keys any priority goes."""
        if tenant is None or body.priority is None:
            return
        limit = self.keys.max_priority.get(tenant, PRIORITY_NORMAL)
        if body.priority > limit:
            raise _BadInput(InvalidParameter(
                f"invalid parameter: priority: {body.priority} is above the highest tenant {tenant!r} may ask "
                f"for ({limit}; raise max_priority on its api_keys entry)",
                field="priority", value=body.priority,
            ))

    def _check_network(self, tenant: str | None, body: SandboxStartRequest) -> None:
        """Refuse ``network="host"`` unless this admin, or the caller's key, allows it: a sandbox on
        the host's network reaches everything the host does (trusted code only)."""
        if body.network != "host" or self.settings.allow_host_network or tenant in self.keys.host_network_tenants:
            return
        who = f"tenant {tenant!r}" if tenant is not None else "callers"
        raise _BadInput(InvalidParameter(
            f"invalid parameter: network: 'host' shares the host's network and is for trusted code only; "
            f"this admin does not allow it for {who} (set allow_host_network in [admin], or on the "
            "tenant's api_keys entry; see docs/security.md)",
            field="network", value="host",
        ))

    async def _read(self, request: Request, route: Route) -> Any:
        """The route's input as its model; bad input raises :class:`_BadInput`."""
        try:
            if route.query is not None:
                given = {k: v for k, v in request.query_params.items()}
                if "sandbox_id" in request.path_params:
                    given["sandbox_id"] = str(request.path_params["sandbox_id"])  # the path names it
                query = self._known_keys(request, route, given, route.query)
                return structure_wire(query, route.query)
            if route.body is not None:
                raw = await request.body()
                try:
                    data = json.loads(raw) if raw.strip() else {}
                except (ValueError, UnicodeDecodeError) as exc:
                    raise InvalidParameter(f"invalid parameter: body: malformed JSON: {exc}", field="body") from None
                if "sandbox_id" in request.path_params and isinstance(data, dict):
                    data = {**data, "sandbox_id": str(request.path_params["sandbox_id"])}  # the path names it
                return structure_wire(self._known_keys(request, route, data, route.body), route.body)
        except InvalidParameter as exc:
            raise _BadInput(exc) from None
        return None

    def _known_keys(self, request: Request, route: Route, data: Any, cls: type) -> Any:
        """``data`` without keys ``cls`` does not know, as Kubernetes' field validation does by
        default: the request goes on, and the response (``Warning`` header) and the log name
        what was ignored. With ``strict_fields`` nothing is dropped, and the model refuses them."""
        ignored = _unknown_keys(data, cls)
        if not ignored or self.settings.strict_fields:
            return data
        request.state.ignored_keys = ignored
        log.warning("%s %s: ignored unknown field(s) %s", route.method, route.path, ", ".join(ignored))
        return {k: v for k, v in data.items() if k not in ignored}

    async def _hello(self, _request: Request) -> Response:
        return _json_response({"message": "hello, ROCK!"})

    async def _rocklet_pyz(self, _request: Request) -> Response:
        """``GET /rocklet.pyz``: the rocklet units on other hosts download (no key needed: it holds
        no secret, and every rocklet asks for its sandbox's own); ``X-Checksum-Sha256`` says its digest."""
        delivery = self.manager.rocklet_delivery
        if delivery is None:
            return _json_response({"detail": "the engine is starting"}, status_code=503)
        return FileResponse(
            delivery.path, media_type="application/zip", headers={"X-Checksum-Sha256": delivery.sha256}
        )

    async def _healthz(self, _request: Request) -> Response:
        if self._manager is None:
            return _json_response({"status": "starting", "version": __version__}, status_code=503)
        return _json_response({"status": "ok", "version": __version__})

    async def _metrics(self, _request: Request) -> Response:
        self.metrics.attach(self._manager)
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def _status(self, _request: Request) -> Response:
        """``GET /admin/status``: what ``rock admin status`` shows, as JSON."""
        manager = self.manager
        by_state = manager.count_by_state()
        return _json_response({
            "version": __version__,
            "sandboxes": {state.value: by_state.get(state, 0) for state in State},
            "start_queue": {"depth": manager.queue.depth, "active": manager.queue.active},
            "warm_pools": [unstructure_wire(pool) for pool in manager.warm_pools()],
        })

    async def _openapi_json(self, _request: Request) -> Response:
        if self._openapi is None:
            document = openapi_document(self.routes, title="rock admin", version=__version__)
            for path, summary, media in _PLAIN_ROUTES:
                document["paths"][path] = {"get": {
                    "operationId": path.strip("/").replace(".", "_") or "hello",
                    "summary": summary,
                    "responses": {"200": {"description": summary, "content": {media: {"schema": {}}}}},
                }}
            for route in self.plugin_routes:
                summary = route.summary or f"{route.method} {route.path} (plugin route)"
                document["paths"].setdefault(route.path, {})[route.method.lower()] = {
                    "operationId": f"plugin_{route.method.lower()}_" + re.sub(r"[^A-Za-z0-9]+", "_", route.path).strip("_"),
                    "summary": summary,
                    "responses": {"200": {"description": summary, "content": {_JSON: {"schema": {}}}}},
                }
            if self.keys:
                document.setdefault("components", {})["securitySchemes"] = {
                    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                    "bearer": {"type": "http", "scheme": "bearer"},
                }
                document["security"] = [{"apiKey": []}, {"bearer": []}]
                for path in OPEN_PATHS:
                    document["paths"][path]["get"]["security"] = []
            self._openapi = document
        return _json_response(self._openapi)

    # -- handlers: lifecycle -------------------------------------------------------------

    async def start(self, request: Request, body: SandboxStartRequest) -> SandboxStartResponse:
        """``POST /start``: start and wait until running (at most ``start_wait_seconds``)."""
        started = await self.manager.start_async(self._start_request(request, body), **_identity(request))
        await self.manager.wait_until_running(started.sandbox_id, timeout=self.settings.start_wait_seconds)
        return start_response(started)

    async def start_async(self, request: Request, body: SandboxStartRequest) -> SandboxStartResponse:
        """``POST /start_async``: accept the start and return at once."""
        return start_response(await self.manager.start_async(self._start_request(request, body), **_identity(request)))

    async def get_status(self, _request: Request, query: GetStatusQuery) -> SandboxStatusResponse:
        """``GET /get_status``."""
        return status_response(await self.manager.get_status(query.sandbox_id, query.include_all_states))

    async def is_alive(self, _request: Request, query: SandboxIdQuery) -> IsAliveResponse:
        """``GET /is_alive``: any failure is ``is_alive: false`` (ROCK)."""
        try:
            client = self.manager.rocklet(query.sandbox_id, "is_alive")
        except RockError as exc:
            return IsAliveResponse(is_alive=False, message=str(exc))
        alive = await client.is_alive()
        return IsAliveResponse(is_alive=alive, message="" if alive else "the sandbox's rocklet does not answer")

    async def stop(self, _request: Request, body: SandboxIdRequest) -> str:
        """``POST /stop``."""
        await self.manager.stop(body.sandbox_id)
        return f"{body.sandbox_id} stopped"

    async def delete(self, _request: Request, body: SandboxIdRequest) -> str:
        """``POST /delete``."""
        await self.manager.delete(body.sandbox_id)
        return f"{body.sandbox_id} deleted"

    async def restart(self, _request: Request, body: SandboxIdRequest) -> SandboxStartResponse:
        """``POST /restart`` and ``POST /sandboxes/{sandbox_id}/restart``."""
        return start_response(await self.manager.restart(body.sandbox_id))

    async def archive(self, _request: Request, body: SandboxIdRequest) -> str:
        """``POST /sandboxes/{sandbox_id}/archive``: start archiving a stopped sandbox."""
        await self.manager.archive(body.sandbox_id)
        return f"{body.sandbox_id} archiving"

    async def warmup(self, request: Request, body: WarmupRequest) -> Response:
        """``POST /warmup/tasks``: pull the image in the background (ROCK); with ``size``, keep a warm pool (rock)."""
        self._check_network(_tenant(request), body)
        key = await self.manager.warmup(body.start_request(), body.size)
        message = "warmup task started" if key is None else f"warm pool {key} set to {body.size}"
        return _json_response({"status": "Success", "message": message, "error": None, "result": None})

    async def warm_pools(self, _request: Request, _data: None) -> WarmPoolsResponse:
        """``GET /warm_pools`` (rock addition): every warm pool and how full it is."""
        return WarmPoolsResponse(pools=self.manager.warm_pools())

    async def list_sandboxes(self, request: Request, query: ListSandboxesQuery) -> SandboxListResponse:
        """``GET /sandboxes``: a page of pending and running sandboxes."""
        limit = self.settings.batch_max_count
        if query.page_size > limit:
            raise _BadInput(InvalidParameter(
                f"invalid parameter: page_size: at most {limit}, got {query.page_size}",
                field="page_size", value=query.page_size,
            ))
        filters = {
            name: value
            for name in ("user_id", "experiment_id", "namespace", "cluster", "image", "state")
            if (value := getattr(query, name)) is not None
        }
        states = sorted(LIVE_STATES, key=lambda s: s.value)
        manager = self.manager
        offset = (query.page - 1) * query.page_size
        tenant = _tenant(request)
        if tenant is None:
            records = manager.list_records(states=states, filters=filters, limit=query.page_size, offset=offset)
            total = manager.count_records(states=states, filters=filters)
        else:
            # The tenant lives in the spec's metadata, which the store cannot filter on; live
            # sandboxes are few enough to filter here.
            mine = [
                r for r in manager.list_records(states=states, filters=filters)
                if r.spec.metadata.get(TENANT_METADATA_KEY) == tenant
            ]
            records, total = mine[offset:offset + query.page_size], len(mine)
        items = [status_response(s) for s in manager.statuses_of(records)]
        return SandboxListResponse(items=items, total=total, has_more=offset + len(items) < total)

    async def batch_status(self, request: Request, body: BatchSandboxStatusRequest) -> BatchSandboxStatusResponse:
        """``POST /sandboxes/batch``: statuses of the pending and running sandboxes among those asked."""
        limit = self.settings.batch_max_count
        if len(body.sandbox_ids) > limit:
            raise _BadInput(InvalidParameter(
                f"invalid parameter: sandbox_ids: at most {limit} ids, got {len(body.sandbox_ids)}",
                field="sandbox_ids", value=len(body.sandbox_ids),
            ))
        records = []
        for sandbox_id in dict.fromkeys(body.sandbox_ids):
            try:
                record = self.manager.get_record(sandbox_id)
            except SandboxNotFound:
                continue
            if record.state in LIVE_STATES and self._owns(request, sandbox_id):
                records.append(record)
        return BatchSandboxStatusResponse(statuses=[status_response(s) for s in self.manager.statuses_of(records)])

    # -- handlers: runtime calls -----------------------------------------------------------

    def _rocklet(self, sandbox_id: str, attempted: str) -> RockletClient:
        return self.manager.rocklet(sandbox_id, attempted)

    async def execute(self, _request: Request, body: SandboxCommand) -> CommandResponse:
        """``POST /execute``."""
        return await self._rocklet(body.sandbox_id, "execute").execute(body)

    async def create_session(self, _request: Request, body: SandboxCreateBashSessionRequest) -> CreateBashSessionResponse:
        """``POST /create_session``."""
        return await self._rocklet(body.sandbox_id, "create_session").create_session(body)

    async def run_in_session(self, _request: Request, body: SandboxBashAction) -> BashObservation:
        """``POST /run_in_session``."""
        return await self._rocklet(body.sandbox_id, "run_in_session").run_in_session(body)

    async def close_session(self, _request: Request, body: SandboxCloseBashSessionRequest) -> CloseBashSessionResponse:
        """``POST /close_session``."""
        return await self._rocklet(body.sandbox_id, "close_session").close_session(body)

    async def interrupt_session(self, _request: Request, body: InterruptSessionRequest) -> InterruptSessionResponse:
        """``POST /interrupt_session`` (rock addition)."""
        return await self._rocklet(body.sandbox_id, "interrupt_session").interrupt_session(body.session)

    async def read_file(self, _request: Request, body: SandboxReadFileRequest) -> ReadFileResponse:
        """``POST /read_file``."""
        return await self._rocklet(body.sandbox_id, "read_file").read_file(body)

    async def write_file(self, _request: Request, body: SandboxWriteFileRequest) -> WriteFileResponse:
        """``POST /write_file``."""
        return await self._rocklet(body.sandbox_id, "write_file").write_file(body)

    async def upload(self, request: Request, _data: None) -> UploadResponse:
        """``POST /upload``: multipart ``file``, ``target_path``, ``sandbox_id`` (and rock's
        optional ``unzip``: ``true`` extracts a zip archive at ``target_path``)."""
        try:
            form = await request.form(max_files=1, max_fields=4)
        except _BodyTooLarge:
            raise
        except Exception as exc:  # the multipart parser's own errors: the caller's fault
            raise _BadInput(InvalidParameter(f"invalid parameter: body: not a valid multipart form: {exc}", field="body")) from None
        try:
            problems = []
            unknown = sorted(set(form.keys()) - {"file", "target_path", "sandbox_id", "unzip"})
            problems += [f"extra field {name!r} not allowed" for name in unknown]
            sandbox_id = form.get("sandbox_id")
            target_path = form.get("target_path")
            upload = form.get("file")
            if not isinstance(sandbox_id, str) or not sandbox_id.strip():
                problems.append("sandbox_id: " + ("required field missing" if sandbox_id is None else "must be a non-blank string"))
            if not isinstance(target_path, str) or not target_path.strip():
                problems.append("target_path: " + ("required field missing" if target_path is None else "must be a non-blank string"))
            if upload is None or isinstance(upload, str):
                problems.append("file: " + ("required field missing" if upload is None else "must be a file part"))
            unzip_text = form.get("unzip", "false")
            unzip = str(unzip_text).strip().lower() if isinstance(unzip_text, str) else ""
            if unzip not in ("true", "false"):
                problems.append(f"unzip: expected true or false, got {unzip_text!r}")
            if problems:
                fields = [p.split(":")[0] for p in problems if not p.startswith("extra")]
                raise _BadInput(InvalidParameter("invalid parameter: " + "; ".join(problems), field=", ".join(fields) or None))
            assert isinstance(sandbox_id, str) and isinstance(target_path, str) and not isinstance(upload, str)
            if not self._owns(request, sandbox_id.strip()):
                raise _as_unknown(sandbox_id.strip(), "upload")
            client = self._rocklet(sandbox_id.strip(), "upload")
            content = await upload.read()
        finally:
            await form.close()
        async with self.manager.call(sandbox_id.strip()):  # a form, so the endpoint could not
            return await client.upload(target_path, content, unzip=unzip == "true")

    async def list_dir(self, _request: Request, body: SandboxPathRequest) -> ListDirResponse:
        """``POST /list_dir`` (rock addition)."""
        return await self._rocklet(body.sandbox_id, "list_dir").list_dir(body.path)

    async def statistics(self, _request: Request, query: SandboxIdQuery) -> dict[str, Any]:
        """``GET /sandboxes/{sandbox_id}/statistics``: the engine's last sample of the sandbox's
        resource use, in ROCK's ``get_statistics`` shape (cpu, mem, disk, net) with rock's usage."""
        return statistics_response(await self.manager.get_status(query.sandbox_id))

    async def get_statistics(self, _request: Request, query: SandboxIdQuery) -> dict[str, Any]:
        """``GET /get_sandbox_statistics``: the rocklet's CPU, memory, disk and network figures."""
        return await self._rocklet(query.sandbox_id, "get_statistics").get_statistics()

    async def start_process(self, _request: Request, body: StartProcessRequest) -> ProcessInfo:
        """``POST /processes`` (rock addition)."""
        return await self._rocklet(body.sandbox_id, "start_process").start_process(
            body.command, cwd=body.cwd, env=body.env, timeout=body.timeout
        )

    async def process_status(self, request: Request, query: ProcessStatusQuery) -> ProcessInfo:
        """``GET /processes/{process_id}`` (rock addition)."""
        process_id = _process_id(request)
        client = self._rocklet(query.sandbox_id, "process_status")
        return await client.process_status(process_id, wait=query.wait, tail=query.tail)

    async def kill_process(self, request: Request, body: KillProcessRequest) -> ProcessInfo:
        """``POST /processes/{process_id}/kill`` (rock addition)."""
        process_id = _process_id(request)
        client = self._rocklet(body.sandbox_id, "kill_process")
        return await client.kill_process(process_id, signal=body.signal, wait=body.wait)

    async def process_output(self, request: Request, query: ProcessOutputQuery) -> Response:
        """``GET /processes/{process_id}/output`` (rock addition): raw bytes."""
        process_id = _process_id(request)
        client = self._rocklet(query.sandbox_id, "process_output")
        data = await client.process_output(process_id, offset=query.offset, limit=query.limit)
        return Response(data, media_type=_BYTES)

    async def execute_stream(self, _request: Request, body: SandboxCommand) -> Response:
        """``POST /execute_stream`` (rock addition): NDJSON events while the command runs."""
        client = self._rocklet(body.sandbox_id, "execute_stream")
        # Opened here and read by the response: a failure before the first byte still becomes an envelope.
        upstream = await client.open_stream("/execute_stream", unstructure_wire(body), "execute_stream")
        manager = self.manager

        async def events() -> AsyncIterator[bytes]:
            # The stream outlives the handler: it is a call of its own until it ends.
            async with manager.call(body.sandbox_id):
                try:
                    async for line in upstream.aiter_lines():
                        if line.strip():
                            yield line.encode() + b"\n"
                except httpx.HTTPError as exc:
                    error = {"type": "error", "code": RockletUnreachable.code, "message": f"the stream broke: {exc!r}"}
                    yield json.dumps(error).encode() + b"\n"
                finally:
                    await upstream.aclose()

        return StreamingResponse(events(), media_type=_NDJSON)

    async def download(self, _request: Request, body: SandboxPathRequest) -> Response:
        """``POST /download`` (rock addition): the file's raw bytes."""
        client = self._rocklet(body.sandbox_id, "download")
        upstream = await client.open_stream("/download", {"path": body.path}, "download")
        headers = {}
        if "content-length" in upstream.headers:
            headers["content-length"] = upstream.headers["content-length"]

        manager = self.manager

        async def chunks() -> AsyncIterator[bytes]:
            async with manager.call(body.sandbox_id):  # a long download is activity until it ends
                try:
                    async for chunk in upstream.aiter_raw():
                        yield chunk
                finally:
                    await upstream.aclose()

        return StreamingResponse(chunks(), media_type=_BYTES, headers=headers)


def build_routes(app: AdminApp) -> list[Route]:
    """The admin's route table (ROCK's routes, then rock's additions)."""
    p = PREFIX
    sid_form = {
        "type": "object",
        "properties": {
            "file": {"type": "string", "contentMediaType": _BYTES},
            "target_path": {"type": "string"},
            "sandbox_id": {"type": "string"},
            "unzip": {"enum": ["true", "false"], "default": "false"},
        },
        "required": ["file", "target_path", "sandbox_id"],
        "additionalProperties": False,
    }
    return [
        Route(method="POST", path=f"{p}/start", name="start", handler=app.start, body=SandboxStartRequest,
              result=SandboxStartResponse, failure="start sandbox failed",
              summary="Start a sandbox and wait until it runs.",
              description="Identity headers X-User-Id, X-Experiment-Id, X-Namespace, X-Cluster are recorded."),
        Route(method="POST", path=f"{p}/start_async", name="start_async", handler=app.start_async,
              body=SandboxStartRequest, result=SandboxStartResponse, failure="start sandbox failed",
              summary="Accept a start and return at once; poll get_status.",
              description="Identity headers X-User-Id, X-Experiment-Id, X-Namespace, X-Cluster are recorded."),
        Route(method="GET", path=f"{p}/get_status", name="get_status", handler=app.get_status, query=GetStatusQuery,
              result=SandboxStatusResponse, failure="get sandbox status failed",
              summary="A sandbox's state and phases; stopped ones only with include_all_states."),
        Route(method="GET", path=f"{p}/is_alive", name="is_alive", handler=app.is_alive, query=SandboxIdQuery,
              result=IsAliveResponse, failure="check sandbox alive failed",
              summary="Whether the sandbox's agent answers (any failure: false)."),
        Route(method="GET", path=f"{p}/get_sandbox_statistics", name="get_sandbox_statistics",
              handler=app.get_statistics, query=SandboxIdQuery, result=dict, failure="get sandbox statistics failed",
              summary="CPU, memory, disk and network figures of a running sandbox."),
        Route(method="GET", path=f"{p}/sandboxes/{{sandbox_id}}/statistics", name="statistics",
              handler=app.statistics, query=SandboxIdQuery, result=dict, failure="get sandbox statistics failed",
              summary="The sandbox's resource use as the engine last sampled it (no call into the sandbox).",
              description="ROCK's get_statistics figures cpu and mem (percent), disk (percent of its limit), net "
                          "(bytes received plus sent), and usage (every figure, sampled_at) and warnings."),
        Route(method="POST", path=f"{p}/stop", name="stop", handler=app.stop, body=SandboxIdRequest, result=str,
              failure="stop sandbox failed", summary="Stop a sandbox (unknown or stopped: no error)."),
        Route(method="POST", path=f"{p}/delete", name="delete", handler=app.delete, body=SandboxIdRequest, result=str,
              failure="delete sandbox failed", summary="Delete a stopped sandbox (unknown: no error)."),
        Route(method="POST", path=f"{p}/restart", name="restart", handler=app.restart, body=SandboxIdRequest,
              result=SandboxStartResponse, failure="restart sandbox failed",
              summary="Start a stopped sandbox again in its own container (restore an archived one)."),
        Route(method="POST", path=f"{p}/sandboxes/{{sandbox_id}}/restart", name="restart_by_path", handler=app.restart,
              body=SandboxIdRequest, result=SandboxStartResponse, failure="restart sandbox failed",
              summary="ROCK's alias of /restart, the sandbox named in the path."),
        Route(method="POST", path=f"{p}/sandboxes/{{sandbox_id}}/archive", name="archive", handler=app.archive,
              body=SandboxIdRequest, result=str, failure="archive sandbox failed",
              summary="Archive a stopped sandbox into the archive store (in the background); restart restores it.",
              description="Returns at once; get_status(include_all_states=true) shows archiving, then archived "
                          "(phases image_archive, log_archive), or stopped with the reason."),
        Route(method="POST", path=f"{p}/warmup/tasks", name="warmup", handler=app.warmup, body=WarmupRequest,
              result=None, failure="warmup failed",
              summary="Pull an image ahead of the starts that need it (in the background).",
              description="rock addition: with size > 0 the engine keeps that many sandboxes of the kind the "
                          "other start-request fields describe started in a warm pool (0 removes the pool)."),
        Route(method="GET", path=f"{p}/warm_pools", name="warm_pools", handler=app.warm_pools,
              result=WarmPoolsResponse, failure="list warm pools failed",
              summary="(rock) The warm pools: target size, members ready and starting, claims, failures."),
        Route(method="POST", path=f"{p}/execute", name="execute", handler=app.execute, body=SandboxCommand,
              result=CommandResponse, failure="execute command failed", summary="Run a one-shot command."),
        Route(method="POST", path=f"{p}/create_session", name="create_session", handler=app.create_session,
              body=SandboxCreateBashSessionRequest, result=CreateBashSessionResponse,
              failure="create session failed", summary="Open a persistent bash session."),
        Route(method="POST", path=f"{p}/run_in_session", name="run_in_session", handler=app.run_in_session,
              body=SandboxBashAction, result=BashObservation, failure="run in session failed",
              summary="Run a command in a bash session."),
        Route(method="POST", path=f"{p}/close_session", name="close_session", handler=app.close_session,
              body=SandboxCloseBashSessionRequest, result=CloseBashSessionResponse, failure="close session failed",
              summary="Close a bash session."),
        Route(method="POST", path=f"{p}/read_file", name="read_file", handler=app.read_file,
              body=SandboxReadFileRequest, result=ReadFileResponse, failure="read file failed",
              summary="Read a text file."),
        Route(method="POST", path=f"{p}/write_file", name="write_file", handler=app.write_file,
              body=SandboxWriteFileRequest, result=WriteFileResponse, failure="write file failed",
              summary="Write a text file, creating parent directories."),
        Route(method="POST", path=f"{p}/upload", name="upload", handler=app.upload, form=sid_form,
              result=UploadResponse, failure="upload file failed",
              summary="Upload a file (multipart: file, target_path, sandbox_id)."),
        Route(method="GET", path=f"{p}/sandboxes", name="list_sandboxes", handler=app.list_sandboxes,
              query=ListSandboxesQuery, result=SandboxListResponse, failure="list sandboxes failed",
              summary="A page of pending and running sandboxes, with exact-match filters (page_size at most 2000)."),
        Route(method="POST", path=f"{p}/sandboxes/batch", name="batch_status", handler=app.batch_status,
              body=BatchSandboxStatusRequest, result=BatchSandboxStatusResponse, failure="batch get status failed",
              summary="Statuses of the pending and running sandboxes among the ids asked (at most 2000)."),
        # rock additions
        Route(method="POST", path=f"{p}/interrupt_session", name="interrupt_session", handler=app.interrupt_session,
              body=InterruptSessionRequest, result=InterruptSessionResponse, failure="interrupt session failed",
              summary="Ctrl-C the command running in a session; the session stays usable."),
        Route(method="POST", path=f"{p}/execute_stream", name="execute_stream", handler=app.execute_stream,
              body=SandboxCommand, kind="ndjson", failure="execute command failed",
              summary="Run a one-shot command and stream its events as NDJSON.",
              description='Events: {"type":"start","pid"}, {"type":"output","stream","data"}..., '
                          '{"type":"exit","exit_code",...}; a broken stream ends with {"type":"error","code","message"}.'),
        Route(method="POST", path=f"{p}/download", name="download", handler=app.download, body=SandboxPathRequest,
              kind="bytes", failure="download file failed", summary="The raw bytes of a file in the sandbox."),
        Route(method="POST", path=f"{p}/list_dir", name="list_dir", handler=app.list_dir, body=SandboxPathRequest,
              result=ListDirResponse, failure="list directory failed", summary="List a directory in the sandbox."),
        Route(method="POST", path=f"{p}/processes", name="start_process", handler=app.start_process,
              body=StartProcessRequest, result=ProcessInfo, failure="start process failed",
              summary="Start a background command; its exit code, usage and output stay readable."),
        Route(method="GET", path=f"{p}/processes/{{process_id}}", name="process_status", handler=app.process_status,
              query=ProcessStatusQuery, result=ProcessInfo, failure="get process status failed",
              summary="The state of a background process, waiting up to `wait` seconds for its end."),
        Route(method="GET", path=f"{p}/processes/{{process_id}}/output", name="process_output",
              handler=app.process_output, query=ProcessOutputQuery, kind="bytes", failure="get process output failed",
              summary="Raw output bytes of a background process from `offset`."),
        Route(method="POST", path=f"{p}/processes/{{process_id}}/kill", name="kill_process", handler=app.kill_process,
              body=KillProcessRequest, result=ProcessInfo, failure="kill process failed",
              summary="Signal a background process and wait for it to end."),
    ]


def create_app(
    settings: AdminSettings, manager: SandboxManager | None = None, *, runtime: Runtime | None = None
) -> AdminApp:
    """The admin app for ``settings`` (see :class:`AdminApp`)."""
    return AdminApp(settings, manager, runtime=runtime)
