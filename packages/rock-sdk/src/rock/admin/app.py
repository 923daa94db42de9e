"""The admin server's ASGI app: ROCK's sandbox API over a :class:`~rock_core.engine.manager.SandboxManager`.

Routes live under ``/apis/envs/sandbox/v1`` (:data:`PREFIX`) and answer with ROCK's envelope at
HTTP 200::

    {"status": "Success", "message": null, "error": null, "result": <the route's model>}
    {"status": "Failed", "message": "stop sandbox failed", "error": "<what went wrong>",
     "result": {"code": 4000, "rock_code": 4004, "exit_code": null, "failure_reason": "..."}}

A request that does not fit its model (malformed JSON, an unknown or missing field, a blank id,
a wrong type, a bad query parameter) is answered ``Failed`` with ``message: "invalid parameter"``,
``error`` naming every bad field and ``result.code`` 4001. An unexpected exception is answered
``Failed`` with ``result: null`` (never an HTTP 500). A body above the configured limit (10 MiB of
JSON, 100 MiB for ``/upload``) is answered with HTTP 413, a JSON route's body sent with another
``Content-Type`` than ``application/json`` with HTTP 415 (``result.code`` 4015), and a request
with a foreign ``Origin`` or an unexpected ``Host`` with HTTP 403 (:mod:`rock.admin.origin_guard`).

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

This module is the app (reading requests, answering them, the layers around it) and its route
table; the routes' handlers live by job in :mod:`rock.admin.lifecycle`, :mod:`rock.admin.commands`,
:mod:`rock.admin.files` and :mod:`rock.admin.processes`, and the rest has a module of its own: ROCK's
envelope (:mod:`rock.admin.envelope`), ``/metrics`` (:mod:`rock.admin.metrics`), the body limit
(:mod:`rock.admin.body_limit`), the API-key gate (:mod:`rock.admin.key_gate`) and the
``Origin``/``Host`` guard (:mod:`rock.admin.origin_guard`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rock import __version__
from rock.admin._openapi import openapi_document
from rock.admin.auth import TENANT_METADATA_KEY, KeyRing, key_from_headers
from rock.admin.body_limit import BodyLimit, BodyTooLarge, too_large_response
from rock.admin.config import AdminSettings
from rock.admin.daemon import take_removal_mark
from rock.admin.envelope import JSON, BadInput, failure, json_response, success
from rock.admin.key_gate import (
    OPEN_PATHS,
    UNAUTHORIZED_CODE,
    ApiKeyGate,
    scope_tenant,
    unknown_sandbox,
)
from rock.admin.leader_forward import LeaderForward
from rock.admin.lifecycle import is_operator
from rock.admin.metrics import Metrics
from rock.admin.origin_guard import OriginGuard, UnsupportedMediaType, require_json
from rock.admin.plugin_routes import check_plugin_routes, plugin_endpoint
from rock.admin.portforward import SandboxSockets
from rock.admin.proxy import SandboxAccess, SandboxProxy
from rock.admin.reading import has_body, tenant_of, unknown_keys, warned
from rock.admin.route_table import build_routes
from rock.admin.routing import PREFIX, Route
from rock.admin.status import admin_status
from rock_core.actions import IsAliveResponse
from rock_core.converters import structure_wire
from rock_core.engine.manager import SandboxManager
from rock_core.errors import (
    InvalidParameter,
    RockError,
    SandboxAlreadyExists,
    SandboxNotFound,
)
from rock_core.models import NonBlankStr
from rock_core.plugins import Plugins, plugin_tables
from rock_core.records import mask_url
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import Runtime

__all__ = [
    "PREFIX",
    "Route",
    "AdminApp",
    "create_app",
    "Metrics",
    "ApiKeyGate",
    "OPEN_PATHS",
    "UNAUTHORIZED_CODE",
]

log = logging.getLogger("rock.admin")

# Routes outside ROCK's prefix, for the OpenAPI document: (path, summary, media type).
_PLAIN_ROUTES = (
    ("/", 'Greeting: {"message": "hello, ROCK!"}.', JSON),
    (
        "/healthz",
        'Liveness: {"status": "ok", "version"} (503 while starting); in a cluster also '
        '"leader" (whether this admin leads it now) and "cluster" (its name).',
        JSON,
    ),
    (
        "/metrics",
        "Prometheus text: sandboxes by state, start latency, queue, requests.",
        "text/plain",
    ),
    (
        "/admin/status",
        "The admin's state as JSON: version, sandboxes by state, start queue, warm pools.",
        JSON,
    ),
    ("/openapi.json", "This document.", JSON),
    (
        "/rocklet.pyz",
        "The rocklet units on other hosts download (no key needed); X-Checksum-Sha256 is its digest.",
        "application/zip",
    ),
)


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
        self._commit: Callable[[], None] | None = None  # the store's, with group commits
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
            plugins.configure(
                plugin_tables(settings.engine.plugin_options, os.environ, plugins.names())
            )
        self.plugins = plugins
        self.plugin_routes = check_plugin_routes(self.routes, plugins.admin_routes())
        starlette_routes = [
            StarletteRoute(r.path, self._endpoint(r), methods=[r.method], name=r.name)
            for r in self.routes
        ]
        starlette_routes += [
            StarletteRoute(r.path, plugin_endpoint(self, r), methods=[r.method])
            for r in self.plugin_routes
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
        #: ``/upload`` bodies read at once (rock.admin.files.upload): the rest wait their turn.
        self.upload_slots = anyio.Semaphore(settings.max_concurrent_uploads)
        #: ``/sandboxes/start_batch`` requests are served one after another, first come first
        #: served (rock.admin.lifecycle.start_batch): the first batch is answered first.
        self.start_batches = anyio.Lock()
        #: ``/sandboxes/wait_any``'s watches by name (rock.admin.start_waits' ``_Watch``): the
        #: ids each waiting client sent once, kept between its requests.
        self.wait_watches: dict[str, Any] = {}
        # A sandbox's own services (rock.admin.proxy, rock.admin.portforward): in front of the
        # body limit (proxied bodies stream, of any size), behind the key gate.
        access = SandboxAccess(lambda: self.manager, TENANT_METADATA_KEY)
        self.proxy = SandboxProxy(
            self.asgi,
            access=access,
            prefix=PREFIX,
            timeout=settings.proxy_timeout,
            max_message=settings.ws_max_message,
            credentials=self._is_key,
            tenant_of_scope=scope_tenant,
            sockets=SandboxSockets(access),
        )
        self.asgi = self.proxy
        # In a cluster, what only the leader does goes to it (rock.admin.leader_forward).
        self.leader_forward = LeaderForward(
            self.asgi,
            for_leader=_leader_paths(self.routes, self.plugin_routes),
            manager=lambda: self._manager,
            own_url=settings.url,
            max_body=settings.max_json_body,
        )
        self.asgi = self.leader_forward
        if self.keys:
            self.asgi = ApiKeyGate(
                self.asgi,
                keys=self.keys,
                metrics=self.metrics,
                open_paths=frozenset(r.path for r in self.plugin_routes if r.open),
            )
        # Outermost, keys or not: a web page (foreign Origin, or a rebound DNS name) never
        # reaches a route (rock.admin.origin_guard).
        self.asgi = OriginGuard(
            self.asgi,
            allowed_hosts=self._own_hosts(),
            allowed_origins=settings.allowed_origins,
            metrics=self.metrics,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point (so the instance itself can be served). An HTTP answer starts
        once the records written so far are committed (the store's group commits)."""
        commit = self._commit
        if commit is None or scope["type"] != "http":
            await self.asgi(scope, receive, send)
            return

        async def committed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                commit()
            await send(message)

        await self.asgi(scope, receive, committed_send)

    def _own_hosts(self) -> list[str]:
        """The host names that name this admin: ``allowed_hosts``, the name it is bound to and
        the host of ``engine.rocklet_url`` (where units on other hosts download the rocklet)."""
        hosts = [*self.settings.allowed_hosts, self.settings.host]
        if self.settings.engine.rocklet_url:
            hosts.append(urlsplit(self.settings.engine.rocklet_url).hostname or "")
        return hosts

    def _is_key(self, authorization: str) -> bool:
        """Whether an ``Authorization`` value carries one of this admin's keys (never proxied on)."""
        return (
            bool(self.keys)
            and self.keys.tenant_of(
                key_from_headers([(b"authorization", authorization.encode("latin-1"))])
            )
            is not None
        )

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
            engine_config = attrs.evolve(
                engine_config, rocklet_url=NonBlankStr(f"{self.settings.url}/rocklet.pyz")
            )
        if engine_config.cluster is not None and engine_config.cluster_address is None:
            # where the other admins of the cluster send what only the leader does
            engine_config = attrs.evolve(
                engine_config, cluster_address=NonBlankStr(self.settings.url)
            )
        async with SandboxManager(
            engine_config,
            runtime=self._runtime,
            owner=self.settings.owner,
            plugins=self.plugins,
            configured=True,
        ) as manager:
            self._manager = manager
            self.metrics.attach(manager)
            records = manager.store
            if records.can_group_commits and records.persistent:
                # A start writes its record about eight times: commit each loop turn's writes
                # together, and before every answer (__call__), so nothing answered is lost
                # (SQLite: one commit; PostgreSQL: one round trip on the event loop).
                records.group_commits = True
                self._commit = records.commit
            log.info(
                "rock admin %s: engine ready (store %s%s), serving %s",
                __version__,
                mask_url(engine_config.store) if engine_config.store else store,
                f", cluster {engine_config.cluster}" if engine_config.cluster else "",
                self.settings.url,
            )
            try:
                yield
            finally:
                await self.proxy.aclose()
                await self.leader_forward.aclose()
                if take_removal_mark(self.settings):
                    log.info(
                        "rock admin shutting down; removing its sandboxes (--remove-sandboxes)"
                    )
                    await manager.aclose(remove_sandboxes=True)
                else:
                    log.info("rock admin shutting down; running sandboxes keep running")
                self._manager = None
                self._commit = None
                self.metrics.attach(None)

    # -- request handling ----------------------------------------------------------------

    def _endpoint(self, route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            outcome = "success"
            try:
                data = await self._read(request, route)
                sandbox_id = getattr(data, "sandbox_id", None)
                if isinstance(sandbox_id, str) and not self.owns(request, sandbox_id):
                    answer = self._foreign(route, sandbox_id)
                elif not isinstance(sandbox_id, str) or self._manager is None or not route.activity:
                    answer = await route.handler(request, data)
                else:
                    async with self.manager.call(
                        sandbox_id
                    ):  # never idle-stopped under a running call
                        answer = await route.handler(request, data)
                return warned(request, answer if isinstance(answer, Response) else success(answer))
            except BodyTooLarge as exc:
                outcome = "too_large"
                return too_large_response(exc.limit)
            except UnsupportedMediaType as exc:
                outcome = "invalid"
                response = failure("unsupported media type", exc)
                response.status_code = 415
                return response
            except BadInput as exc:
                outcome = "invalid"
                return warned(request, failure("invalid parameter", exc.error))
            except RockError as exc:
                outcome = "failed"
                return warned(request, failure(route.failure, exc))
            except Exception as exc:  # never an HTTP 500: ROCK's envelope without a code
                outcome = "error"
                log.exception("%s %s failed", route.method, route.path)
                return warned(request, failure(route.failure, exc))
            finally:
                self.metrics.count(route.path, outcome)

        endpoint.__name__ = route.name
        return endpoint

    def owns(self, request: Request, sandbox_id: str) -> bool:
        """Whether the request's key may see ``sandbox_id`` (always, when keys are off). A
        sandbox of no tenant (started before keys were turned on) is an operator key's.

        Unknown ids count as owned: the engine answers them as unknown anyway.
        """
        tenant = tenant_of(request)
        if tenant is None or self._manager is None:
            return True
        try:
            record = self.manager.get_record(sandbox_id)
        except SandboxNotFound:
            return True
        owner = record.spec.metadata.get(TENANT_METADATA_KEY)
        if owner is None:  # started before keys were turned on: the operator's to manage
            return is_operator(request)
        return owner == tenant

    def rocklet(self, sandbox_id: str, attempted: str) -> RockletClient:
        """The rocklet client of ``sandbox_id`` (``attempted``: the call, for errors)."""
        return self.manager.rocklet(sandbox_id, attempted)

    def _foreign(self, route: Route, sandbox_id: str) -> Any:
        """The answer the route gives for an unknown id, given for another tenant's sandbox."""
        if route.name in ("start", "start_async"):  # the id is taken; whose is not said
            raise SandboxAlreadyExists(
                f"sandbox id {sandbox_id!r} is taken: choose another, or leave sandbox_id out",
                sandbox_id=sandbox_id,
                attempted=route.name,
            )
        if route.name == "stop":
            return f"{sandbox_id} stopped"  # ROCK: stopping an unknown id is not an error
        if route.name == "delete":
            return f"{sandbox_id} deleted"
        if route.name == "is_alive":
            return IsAliveResponse(
                is_alive=False, message=str(unknown_sandbox(sandbox_id, "is_alive"))
            )
        raise unknown_sandbox(sandbox_id, route.name)

    async def _read(self, request: Request, route: Route) -> Any:
        """The route's input as its model; bad input raises :class:`BadInput`."""
        try:
            if route.query is not None:
                given = {k: v for k, v in request.query_params.items()}
                if "sandbox_id" in request.path_params:
                    given["sandbox_id"] = str(
                        request.path_params["sandbox_id"]
                    )  # the path names it
                query = self._known_keys(request, route, given, route.query)
                return structure_wire(query, route.query)
            if route.body is not None:
                require_json(request.headers, has_body(request))
                raw = await request.body()
                try:
                    data = json.loads(raw) if raw.strip() else {}
                except (ValueError, UnicodeDecodeError) as exc:
                    raise InvalidParameter(
                        f"invalid parameter: body: malformed JSON: {exc}", field="body"
                    ) from None
                if "sandbox_id" in request.path_params and isinstance(data, dict):
                    data = {
                        **data,
                        "sandbox_id": str(request.path_params["sandbox_id"]),
                    }  # the path names it
                return structure_wire(
                    self._known_keys(request, route, data, route.body), route.body
                )
        except InvalidParameter as exc:
            raise BadInput(exc) from None
        return None

    def _known_keys(self, request: Request, route: Route, data: Any, cls: type) -> Any:
        """``data`` without keys ``cls`` does not know, as Kubernetes' field validation does by
        default: the request goes on, and the response (``Warning`` header) and the log name
        what was ignored. With ``strict_fields`` nothing is dropped, and the model refuses them."""
        ignored = unknown_keys(data, cls)
        if not ignored or self.settings.strict_fields:
            return data
        request.state.ignored_keys = ignored
        log.warning(
            "%s %s: ignored unknown field(s) %s", route.method, route.path, ", ".join(ignored)
        )
        return {k: v for k, v in data.items() if k not in ignored}

    async def _hello(self, _request: Request) -> Response:
        return json_response({"message": "hello, ROCK!"})

    async def _rocklet_pyz(self, _request: Request) -> Response:
        """``GET /rocklet.pyz``: the rocklet units on other hosts download (no key needed: it holds
        no secret, and every rocklet asks for its sandbox's own); ``X-Checksum-Sha256`` says its digest."""
        delivery = self.manager.rocklet_delivery
        if delivery is None:
            return json_response({"detail": "the engine is starting"}, status_code=503)
        return FileResponse(
            delivery.path,
            media_type="application/zip",
            headers={"X-Checksum-Sha256": delivery.sha256},
        )

    async def _healthz(self, _request: Request) -> Response:
        """Liveness; in a cluster (``[engine] cluster``) also its name and whether this admin
        leads it now (see :class:`~rock.admin.models.HealthResponse`)."""
        manager = self._manager
        if manager is None:
            return json_response({"status": "starting", "version": __version__}, status_code=503)
        body: dict[str, Any] = {"status": "ok", "version": __version__}
        if manager.config.cluster is not None:
            body["leader"] = manager.role is not None and manager.role.leading
            body["cluster"] = manager.config.cluster
        return json_response(body)

    async def _metrics(self, _request: Request) -> Response:
        self.metrics.attach(self._manager)
        return Response(self.metrics.render(), media_type=self.metrics.media_type)

    async def _status(self, request: Request) -> Response:
        """``GET /admin/status``: what ``rock admin status`` shows, as JSON (:mod:`rock.admin.status`)."""
        return json_response(await admin_status(self, request))

    async def _openapi_json(self, _request: Request) -> Response:
        if self._openapi is None:
            document = openapi_document(self.routes, title="rock admin", version=__version__)
            for path, summary, media in _PLAIN_ROUTES:
                document["paths"][path] = {
                    "get": {
                        "operationId": path.strip("/").replace(".", "_") or "hello",
                        "summary": summary,
                        "responses": {
                            "200": {"description": summary, "content": {media: {"schema": {}}}}
                        },
                    }
                }
            for route in self.plugin_routes:
                summary = route.summary or f"{route.method} {route.path} (plugin route)"
                document["paths"].setdefault(route.path, {})[route.method.lower()] = {
                    "operationId": f"plugin_{route.method.lower()}_"
                    + re.sub(r"[^A-Za-z0-9]+", "_", route.path).strip("_"),
                    "summary": summary,
                    "responses": {
                        "200": {"description": summary, "content": {JSON: {"schema": {}}}}
                    },
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
        return json_response(self._openapi)


def create_app(
    settings: AdminSettings,
    manager: SandboxManager | None = None,
    *,
    runtime: Runtime | None = None,
) -> AdminApp:
    """The admin app for ``settings`` (see :class:`AdminApp`)."""
    return AdminApp(settings, manager, runtime=runtime)


def _leader_paths(routes: list[Route], plugin_routes: list[Any]) -> Callable[[str], bool]:
    """Whether a path is one only a cluster's leader serves: the routes marked ``leader`` and
    every plugin route (a plugin's state lives with the engine that serves it)."""
    paths = [r.path for r in routes if r.leader] + [r.path for r in plugin_routes]
    exact = frozenset(p for p in paths if "{" not in p)
    patterns = [
        re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(p)) + "$")
        for p in paths
        if "{" in p
    ]
    return lambda path: path in exact or any(p.match(path) for p in patterns)
