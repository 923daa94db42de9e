"""The stand-in's HTTP envelope: Nomad's JSON answers with their ``X-Nomad-*`` headers and
plain-text errors, region and ACL checks, blocking queries (``index``/``wait``), paging, and the
stubs list endpoints answer with. The route handlers build on :class:`ApiEnvelope`."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from rock_nomad.testing._model import NomadError, compact_json, parse_bool, parse_duration

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster
    from rock_nomad.testing.server import StandInNomad


__all__ = [
    "MAX_WAIT",
    "METHODS",
    "NOMAD_VERSION",
    "ApiEnvelope",
    "Handler",
    "alloc_stub",
    "job_stub",
    "json_response",
    "public",
    "text_response",
]

MAX_WAIT = 300.0
NOMAD_VERSION = "1.10.5"

Handler = Callable[[Request, dict[str, str]], Awaitable[Response]]
#: The methods the API's routes take (starlette's router answered any other with 405).
METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS")

log = logging.getLogger("rock_nomad.testing")


def json_response(
    data: Any,
    *,
    index: int | None = None,
    pretty: bool = False,
    headers: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    body = json.dumps(data, indent=4) if pretty else compact_json(data)
    out = {"X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}
    if index is not None:
        out["X-Nomad-Index"] = str(index)
    out.update(headers or {})
    return Response(
        body + ("\n" if pretty else ""),
        status_code=status,
        media_type="application/json",
        headers=out,
    )


def text_response(status: int, text: str) -> Response:
    return Response(text, status_code=status, media_type="text/plain; charset=utf-8")


def public(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if not k.startswith("_")}


ALLOC_STUB_FIELDS = (
    "ID",
    "EvalID",
    "Name",
    "Namespace",
    "NodeID",
    "NodeName",
    "JobID",
    "TaskGroup",
    "DesiredStatus",
    "DesiredDescription",
    "ClientStatus",
    "ClientDescription",
    "DesiredTransition",
    "TaskStates",
    "DeploymentStatus",
    "FollowupEvalID",
    "NextAllocation",
    "RescheduleTracker",
    "PreemptedAllocations",
    "PreemptedByAllocation",
    "NetworkStatus",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
)


def alloc_stub(
    alloc: dict[str, Any], *, resources: bool = False, task_states: bool = True
) -> dict[str, Any]:
    stub = {k: alloc.get(k) for k in ALLOC_STUB_FIELDS}
    stub["JobType"] = alloc["Job"]["Type"]
    stub["JobVersion"] = alloc["Job"]["Version"]
    stub["AllocatedResources"] = alloc["AllocatedResources"] if resources else None
    if not task_states:
        stub["TaskStates"] = None
    return stub


def job_stub(job: dict[str, Any], summary: dict[str, Any], *, meta: bool) -> dict[str, Any]:
    stub = {
        k: job.get(k)
        for k in (
            "ID",
            "ParentID",
            "Name",
            "Namespace",
            "Datacenters",
            "NodePool",
            "Multiregion",
            "Type",
            "Priority",
            "Stop",
            "Status",
            "StatusDescription",
            "CreateIndex",
            "ModifyIndex",
            "JobModifyIndex",
            "SubmitTime",
        )
    }
    stub["Periodic"] = bool(job.get("Periodic"))
    stub["ParameterizedJob"] = bool(job.get("ParameterizedJob"))
    stub["JobSummary"] = summary
    if meta:
        stub["Meta"] = job.get("Meta")
    return stub


class ApiEnvelope:
    """What every route handler of :class:`~rock_nomad.testing._http.Api` stands on."""

    #: The routes, each a path pattern and its handlers by method (made by ``Api``).
    routes: list[tuple[re.Pattern[str], dict[str, tuple[Handler, str]]]]
    #: The routes by the first segment of the paths they match (after ``/v1/``), in order.
    routes_by_segment: dict[
        str | None, list[tuple[re.Pattern[str], dict[str, tuple[Handler, str]]]]
    ]

    def __init__(self, stand_in: StandInNomad) -> None:
        self.s = stand_in

    @property
    def cluster(self) -> Cluster:
        """The stand-in's cluster (there while it serves)."""
        cluster = self.s.cluster
        assert cluster is not None
        return cluster

    # -- envelope --------------------------------------------------------------------------------

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app uvicorn serves: each HTTP request to :meth:`dispatch`, its answer sent.

        Only what a framework's stack would add and the stand-in needs: a method no route has
        is refused with 405 as starlette's router refused it, and a handler's unexpected error
        answers 500 ``Internal Server Error`` (and is logged) as starlette's error middleware
        answered it. Starlette's stack (its app, two middlewares, router and route) had cost
        as much CPU as the handlers of a start's requests."""
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return
        request = Request(scope, receive)
        if scope["method"] not in METHODS:
            response: Response = text_response(405, "Method Not Allowed")
            response.headers["Allow"] = ", ".join(METHODS)
        else:
            try:
                response = await self.dispatch(request)
            except Exception:
                log.exception("stand-in Nomad API: %s %s failed", scope["method"], scope["path"])
                response = text_response(500, "Internal Server Error")
        await response(scope, receive, send)

    async def dispatch(self, request: Request) -> Response:
        """Route ``request`` (the first route whose pattern matches its whole path, among those
        of its first segment after ``/v1/``) and answer it, or answer Nomad's 404 or 405."""
        # The path as starlette's ``request.url.path`` gives it (the few characters its URL
        # would take for a query, a fragment or a backslash kept escaped), without a URL.
        path: str = request.scope["path"]
        if "?" in path or "#" in path or "\\" in path:
            path = path.replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")
        first = path[4:].partition("/")[0] if path.startswith("/v1/") else None
        for pattern, methods in self.routes_by_segment.get(first, ()):
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if request.method not in methods:
                return text_response(405, "Invalid method")
            handler, need = methods[request.method]
            try:
                self._check_region(request)
                self._check_token(request, need)
                return await handler(request, match.groupdict())
            except NomadError as err:
                return text_response(err.status, err.text)
        return text_response(404, "404 page not found\n")

    def _check_region(self, request: Request) -> None:
        region = request.query_params.get("region")
        if region and region != self.cluster.region:
            raise NomadError(500, "No path to region")

    def _token(self, request: Request) -> str | None:
        token = request.headers.get("X-Nomad-Token")
        if token:
            return token
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[7:].strip() or None
        return None

    def _check_token(self, request: Request, need: str) -> None:
        """Refuse the request unless its token may ``need``: ``read``, ``write``, ``token`` (any
        known token), ``var-<capability>`` (a Variables capability: read, list, write, destroy)
        or ``none``."""
        if need == "none" or not self.s.acl:
            return
        secret = self._token(request)
        if secret is None:
            raise NomadError(403, "Permission denied")
        token = self.s.tokens.get(secret)
        if token is None:
            raise NomadError(403, "ACL token not found")
        if token["Type"] == "management":
            return
        if need.startswith("var-"):
            allowed = need[4:] in token["_variables"]
        else:
            allowed = (
                need == "token"
                or (need == "write" and "write" in token["_rights"])
                or (need == "read" and bool(token["_rights"]))
            )
        if not allowed:
            raise NomadError(403, "Permission denied")

    def _may(self, request: Request, need: str) -> bool:
        try:
            self._check_token(request, need)
        except NomadError:
            return False
        return True

    @staticmethod
    def _namespace(request: Request) -> str:
        return request.query_params.get("namespace") or "default"

    @staticmethod
    def _flag(request: Request, name: str) -> bool:
        try:
            return bool(parse_bool(request.query_params.get(name)))
        except ValueError:
            raise NomadError(
                400,
                f"Failed to parse value of {name!r} ({request.query_params.get(name)!r}) as a boolean",
            ) from None

    @staticmethod
    def _pretty(request: Request) -> bool:
        return "pretty" in request.query_params and request.query_params.get("pretty") not in (
            "false",
            "0",
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            raise NomadError(400, "Request body is empty")
        try:
            body = orjson.loads(raw)  # a job's registration: 3 KB
        except orjson.JSONDecodeError as exc:
            raise NomadError(400, f"invalid character in request body: {exc}") from None
        if not isinstance(body, dict):
            raise NomadError(400, "json: cannot unmarshal the request body into a request object")
        return body

    async def _block(self, request: Request, current: Callable[[], int]) -> int:
        raw_index = request.query_params.get("index")
        raw_wait = request.query_params.get("wait")
        index = 0
        if raw_index is not None:
            try:
                index = int(raw_index)
                if index < 0:
                    raise ValueError
            except ValueError:
                raise NomadError(400, "Invalid index") from None
        wait = MAX_WAIT
        if raw_wait is not None:
            try:
                wait = parse_duration(raw_wait)
            except ValueError:
                raise NomadError(400, "Invalid wait time") from None
            if wait <= 0:
                wait = MAX_WAIT
        wait = min(wait, MAX_WAIT)
        if index > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            while not self.cluster.closing:
                event = self.cluster.changed
                if current() > index:
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except TimeoutError:
                    break
        return max(1, current())

    def _page(
        self, request: Request, items: list[dict[str, Any]], key: str = "ID"
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        if request.query_params.get("filter"):
            raise NomadError(
                400,
                "failed to read filter expression: the stand-in Nomad server does not evaluate "
                "filter expressions; list with prefix and filter on the client",
            )
        items = sorted(items, key=lambda o: o[key], reverse=self._flag(request, "reverse"))
        token = request.query_params.get("next_token")
        if token:
            items = [
                o
                for o in items
                if (o[key] <= token if self._flag(request, "reverse") else o[key] >= token)
            ]
        per_page = request.query_params.get("per_page")
        headers = {}
        if per_page:
            try:
                n = int(per_page)
            except ValueError:
                raise NomadError(400, "Invalid per_page") from None
            if n > 0 and len(items) > n:
                headers["X-Nomad-NextToken"] = items[n][key]
                items = items[:n]
        return items, headers
