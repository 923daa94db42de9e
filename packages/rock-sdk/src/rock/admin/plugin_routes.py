"""The routes plugins add to the admin (``rock_admin_routes``): checked to be
:class:`~rock_core.routes.AdminRoute`\\ s on paths nobody else serves, and served with their
request as a :class:`~rock_core.routes.RouteRequest` (the asking key's tenant, operator flag and
quota), a handler cancelled when its client goes away."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rock.admin import lifecycle
from rock.admin.envelope import BadInput, failure, json_response, success
from rock.admin.origin_guard import UnsupportedMediaType, require_json
from rock.admin.reading import has_body, quota_of, tenant_of
from rock.admin.routing import Route
from rock_core.errors import BadRequestRockError, PluginError, RockError
from rock_core.routes import AdminRoute, RouteRequest, RouteResponse, RouteStream

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["check_plugin_routes", "plugin_endpoint"]

log = logging.getLogger("rock.admin")


_DISCONNECTED = object()


async def _unless_disconnected(request: Request, call: Awaitable[Any]) -> Any:
    """Await ``call`` (a plugin's handler, its request body already read), cancelling it when
    the client goes away first: a cancelled ``make`` of an environment must not go on to make
    it, as it does not in embedded mode. :data:`_DISCONNECTED` when that happened."""
    outcome: dict[str, Any] = {}

    async def run(scope: anyio.CancelScope) -> None:
        try:
            outcome["value"] = await call
        except Exception as exc:  # raised below, as the handler's own (not in a group)
            outcome["error"] = exc
        finally:
            scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg.cancel_scope)
        tg.start_soon(watch, tg.cancel_scope)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value", _DISCONNECTED)


def _admitted(app: AdminApp, request: Request, body: Any) -> Any:
    """A plugin's start request as the admin's ``/start`` admits it for the request's key."""
    try:
        return lifecycle._start_request(app, request, body)
    except BadInput as exc:
        raise exc.error from None


def check_plugin_routes(served: list[Route], routes: list[Any]) -> list[AdminRoute]:
    """The plugins' routes, each an :class:`AdminRoute` on a path nobody else serves (the
    admin's own routes are ``served``)."""
    taken = {(r.method, r.path) for r in served} | {
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
        if route.open and "{" in route.path:
            raise PluginError(
                f"a plugin's open route {route.method} {route.path} has path parameters; an open route's path is exact",
                attempted="rock_admin_routes",
            )
        taken.add((route.method, route.path))
    return list(routes)


def plugin_endpoint(app: AdminApp, route: AdminRoute) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of a plugin's route: its request as a :class:`RouteRequest`, its answer
    (ROCK's envelope or plain JSON), its errors, the route's count in ``/metrics``."""

    async def endpoint(request: Request) -> Response:
        outcome = "success"
        try:
            if route.json_body:
                require_json(request.headers, has_body(request))
            call = RouteRequest(
                method=request.method,
                path=request.url.path,
                path_params={k: str(v) for k, v in request.path_params.items()},
                query=dict(request.query_params),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=await request.body(),
                engine=app.manager,
                tenant=tenant_of(request),
                operator=lifecycle.is_operator(request),
                quota=quota_of(request),
                admit=lambda body: _admitted(app, request, body),
            )
            answer = await _unless_disconnected(request, route.handler(call))
            if answer is _DISCONNECTED:
                outcome = "cancelled"
                return Response(status_code=499)  # nobody reads it
            if isinstance(answer, RouteStream):
                if answer.status >= 400:
                    outcome = "failed"
                return StreamingResponse(
                    answer.chunks,
                    status_code=answer.status,
                    headers=dict(answer.headers),
                    media_type=answer.media_type,
                )
            if isinstance(answer, RouteResponse):
                if answer.status >= 400:
                    outcome = "failed"
                response = json_response(answer.body, answer.status)
                response.headers.update(answer.headers)
                return response
            return success(answer) if route.envelope else json_response(answer)
        except UnsupportedMediaType as exc:
            outcome = "invalid"
            if route.envelope:
                response = failure(f"{route.method} {route.path} failed", exc)
                response.status_code = 415
                return response
            return json_response({"detail": exc.message, "code": exc.code}, 415)
        except RockError as exc:
            outcome = "invalid" if isinstance(exc, BadRequestRockError) else "failed"
            if route.envelope:
                return failure(f"{route.method} {route.path} failed", exc)
            status = 400 if isinstance(exc, BadRequestRockError) else 500
            return json_response({"detail": exc.message, "code": exc.code}, status)
        except Exception as exc:  # a plugin's bug: an HTTP 500 with the reason, and the log
            outcome = "error"
            log.exception("plugin route %s %s failed", route.method, route.path)
            if route.envelope:
                return failure(f"{route.method} {route.path} failed", exc)
            return json_response({"detail": f"{type(exc).__name__}: {exc}"}, 500)
        finally:
            app.metrics.count(route.path, outcome)

    endpoint.__name__ = f"plugin_{route.method.lower()}_{route.path}"
    return endpoint
