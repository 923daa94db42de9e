"""The stand-in's HTTP API: Nomad's ``/v1`` routes, envelopes, errors and blocking queries.

One ASGI app (starlette) routes every request itself, so that Nomad's own answers for unknown
paths (``404 page not found``) and wrong methods (405 ``Invalid method``) come out as Nomad
gives them. Errors are plain text; successes are JSON with ``X-Nomad-Index``,
``X-Nomad-KnownLeader`` and ``X-Nomad-LastContact``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rock_nomad.testing._model import NomadError, parse_bool, parse_duration

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster
    from rock_nomad.testing.server import StandInNomad

MAX_WAIT = 300.0
NOMAD_VERSION = "1.10.5"

Handler = Callable[[Request, dict[str, str]], Awaitable[Response]]


def _json(
    data: Any,
    *,
    index: int | None = None,
    pretty: bool = False,
    headers: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    body = json.dumps(data, indent=4 if pretty else None, separators=None if pretty else (",", ":"))
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


def _text(status: int, text: str) -> Response:
    return Response(text, status_code=status, media_type="text/plain; charset=utf-8")


def _public(obj: dict[str, Any]) -> dict[str, Any]:
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


class Api:
    """Routes and handlers of the stand-in's HTTP API."""

    def __init__(self, stand_in: StandInNomad) -> None:
        self.s = stand_in
        c = r"(?P<id>[^/]+)"
        j = r"(?P<id>.+)"
        table: list[tuple[str, dict[str, tuple[Handler, str]]]] = [
            (
                r"jobs",
                {
                    "GET": (self.list_jobs, "read"),
                    "PUT": (self.register, "write"),
                    "POST": (self.register, "write"),
                },
            ),
            (rf"job/{j}/allocations", {"GET": (self.job_allocations, "read")}),
            (rf"job/{j}/evaluations", {"GET": (self.job_evaluations, "read")}),
            (rf"job/{j}/summary", {"GET": (self.job_summary, "read")}),
            (rf"job/{j}/versions", {"GET": (self.job_versions, "read")}),
            (
                rf"job/{j}/evaluate",
                {"PUT": (self.job_evaluate, "write"), "POST": (self.job_evaluate, "write")},
            ),
            (
                rf"job/{j}",
                {
                    "GET": (self.get_job, "read"),
                    "PUT": (self.register, "write"),
                    "POST": (self.register, "write"),
                    "DELETE": (self.deregister, "write"),
                },
            ),
            (
                rf"allocation/{c}/stop",
                {"PUT": (self.stop_alloc, "write"), "POST": (self.stop_alloc, "write")},
            ),
            (rf"allocation/{c}", {"GET": (self.get_alloc, "read")}),
            (r"allocations", {"GET": (self.list_allocs, "read")}),
            (rf"evaluation/{c}/allocations", {"GET": (self.eval_allocations, "read")}),
            (rf"evaluation/{c}", {"GET": (self.get_eval, "read")}),
            (r"evaluations", {"GET": (self.list_evals, "read")}),
            (r"nodes", {"GET": (self.list_nodes, "read")}),
            (rf"node/{c}/allocations", {"GET": (self.node_allocations, "read")}),
            (
                rf"node/{c}/eligibility",
                {"PUT": (self.node_eligibility, "write"), "POST": (self.node_eligibility, "write")},
            ),
            (rf"node/{c}", {"GET": (self.get_node, "read")}),
            (r"namespaces", {"GET": (self.list_namespaces, "read")}),
            (rf"namespace/{c}", {"GET": (self.get_namespace, "read")}),
            (r"regions", {"GET": (self.regions, "read")}),
            (r"status/leader", {"GET": (self.leader, "none")}),
            (r"status/peers", {"GET": (self.peers, "none")}),
            (r"agent/self", {"GET": (self.agent_self, "read")}),
            (r"agent/health", {"GET": (self.agent_health, "none")}),
            (r"acl/token/self", {"GET": (self.token_self, "token")}),
            (rf"client/fs/logs/{c}", {"GET": (self.logs, "read")}),
            (r"event/stream", {"GET": (self.event_stream, "read")}),
            (r"vars", {"GET": (self.list_variables, "var-list")}),
            # Nomad answers a wrong method here with 400, not 405: the handler checks it.
            (
                r"var/(?P<path>.*)",
                {
                    m: (self.variable, "none")
                    for m in ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS")
                },
            ),
        ]
        self.routes = [(re.compile(rf"/v1/{pattern}"), methods) for pattern, methods in table]
        self.app = Starlette(
            routes=[
                Route(
                    "/{path:path}",
                    self.dispatch,
                    methods=["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"],
                )
            ]
        )

    @property
    def cluster(self) -> Cluster:
        """The stand-in's cluster (there while it serves)."""
        cluster = self.s.cluster
        assert cluster is not None
        return cluster

    # -- envelope --------------------------------------------------------------------------------

    async def dispatch(self, request: Request) -> Response:
        path = request.url.path
        for pattern, methods in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if request.method not in methods:
                return _text(405, "Invalid method")
            handler, need = methods[request.method]
            try:
                self._check_region(request)
                self._check_token(request, need)
                return await handler(request, match.groupdict())
            except NomadError as err:
                return _text(err.status, err.text)
        return _text(404, "404 page not found\n")

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
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
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

    # -- jobs ------------------------------------------------------------------------------------

    async def register(self, request: Request, params: dict[str, str]) -> Response:
        body = await self._body(request)
        out = self.cluster.register(
            body, namespace=request.query_params.get("namespace"), path_id=params.get("id")
        )
        return _json(out, index=out["Index"], pretty=self._pretty(request))

    async def deregister(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.deregister(
            self._namespace(request), params["id"], purge=self._flag(request, "purge")
        )
        return _json(out, index=out["Index"], pretty=self._pretty(request))

    async def job_evaluate(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.evaluate(self._namespace(request), params["id"])
        return _json(out, index=out["Index"], pretty=self._pretty(request))

    async def list_jobs(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["jobs"])
        ns = self._namespace(request)
        prefix = request.query_params.get("prefix") or ""
        meta = self._flag(request, "meta")
        jobs = [
            job_stub(_public(j), self.cluster.summary(j["Namespace"], j["ID"]), meta=meta)
            for (jns, jid), j in self.cluster.jobs.items()
            if (ns == "*" or jns == ns) and jid.startswith(prefix)
        ]
        jobs, headers = self._page(request, jobs)
        return _json(jobs, index=index, pretty=self._pretty(request), headers=headers)

    async def get_job(self, request: Request, params: dict[str, str]) -> Response:
        key = (self._namespace(request), params["id"])

        def current() -> int:
            job = self.cluster.jobs.get(key)
            return int(job["ModifyIndex"]) if job is not None else self.cluster.tables["jobs"]

        index = await self._block(request, current)
        job = self.cluster.jobs.get(key)
        if job is None:
            raise NomadError(404, "job not found")
        return _json(_public(job), index=index, pretty=self._pretty(request))

    async def job_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        allocs = self.cluster.allocs_of(
            self._namespace(request), params["id"], all_versions=self._flag(request, "all")
        )
        allocs.sort(key=lambda a: a["CreateIndex"], reverse=True)
        return _json([alloc_stub(a) for a in allocs], index=index, pretty=self._pretty(request))

    async def job_evaluations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["evals"])
        ns = self._namespace(request)
        evals = [
            e
            for e in self.cluster.evals.values()
            if e["JobID"] == params["id"] and e["Namespace"] == ns
        ]
        evals.sort(key=lambda e: e["CreateIndex"], reverse=True)
        return _json(evals, index=index, pretty=self._pretty(request))

    async def job_summary(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(
            request, lambda: max(self.cluster.tables["jobs"], self.cluster.tables["allocs"])
        )
        return _json(
            self.cluster.summary(self._namespace(request), params["id"]),
            index=index,
            pretty=self._pretty(request),
        )

    async def job_versions(self, request: Request, params: dict[str, str]) -> Response:
        diffs = request.query_params.get("diffs") or ""
        try:
            wanted = bool(parse_bool(diffs)) if diffs else False
        except ValueError:
            raise NomadError(500, f'Failed to parse value of "diffs" ({diffs}) as a bool') from None
        if wanted:
            raise NomadError(
                400, "the stand-in does not compute job diffs (diffs=true)"
            )  # never silently left out
        index = await self._block(request, lambda: self.cluster.tables["jobs"])
        versions = self.cluster.versions(self._namespace(request), params["id"])
        if not versions:
            raise NomadError(404, "job versions not found")
        body = {
            "Versions": [_public(v) for v in versions],
            "Diffs": None,
            "Index": index,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }
        return _json(body, index=index, pretty=self._pretty(request))

    # -- allocations and evaluations -------------------------------------------------------------

    async def get_alloc(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            alloc = self.cluster.allocs.get(params["id"])
            return int(alloc["ModifyIndex"]) if alloc is not None else self.cluster.tables["allocs"]

        index = await self._block(request, current)
        alloc = self.cluster.allocs.get(params["id"])
        if alloc is None:
            raise NomadError(404, "alloc not found")
        return _json(_public(alloc), index=index, pretty=self._pretty(request))

    async def stop_alloc(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.stop_alloc(params["id"])
        return _json(out, index=out["Index"], pretty=self._pretty(request))

    async def list_allocs(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        ns = self._namespace(request)
        prefix = request.query_params.get("prefix") or ""
        resources = self._flag(request, "resources")
        task_states = request.query_params.get("task_states") is None or self._flag(
            request, "task_states"
        )
        allocs = [
            alloc_stub(a, resources=resources, task_states=task_states)
            for a in self.cluster.allocs.values()
            if (ns == "*" or a["Namespace"] == ns) and a["ID"].startswith(prefix)
        ]
        allocs, headers = self._page(request, allocs)
        return _json(allocs, index=index, pretty=self._pretty(request), headers=headers)

    async def get_eval(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            ev = self.cluster.evals.get(params["id"])
            return int(ev["ModifyIndex"]) if ev is not None else self.cluster.tables["evals"]

        index = await self._block(request, current)
        ev = self.cluster.evals.get(params["id"])
        if ev is None:
            raise NomadError(404, "eval not found")
        return _json(ev, index=index, pretty=self._pretty(request))

    async def eval_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        allocs = [
            alloc_stub(a) for a in self.cluster.allocs.values() if a["EvalID"] == params["id"]
        ]
        return _json(allocs, index=index, pretty=self._pretty(request))

    async def list_evals(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["evals"])
        ns = self._namespace(request)
        prefix = request.query_params.get("prefix") or ""
        job = request.query_params.get("job")
        status = request.query_params.get("status")
        evals = [
            e
            for e in self.cluster.evals.values()
            if (ns == "*" or e["Namespace"] == ns)
            and e["ID"].startswith(prefix)
            and (not job or e["JobID"] == job)
            and (not status or e["Status"] == status)
        ]
        evals, headers = self._page(request, evals)
        return _json(evals, index=index, pretty=self._pretty(request), headers=headers)

    # -- nodes -----------------------------------------------------------------------------------

    async def list_nodes(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["nodes"])
        prefix = request.query_params.get("prefix") or ""
        nodes = [
            self.cluster.node_stub(
                n, resources=self._flag(request, "resources"), os=self._flag(request, "os")
            )
            for n in self.cluster.nodes.values()
            if n["ID"].startswith(prefix)
        ]
        nodes, headers = self._page(request, nodes)
        return _json(nodes, index=index, pretty=self._pretty(request), headers=headers)

    async def get_node(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            node = self.cluster.nodes.get(params["id"])
            return int(node["ModifyIndex"]) if node is not None else self.cluster.tables["nodes"]

        index = await self._block(request, current)
        node = self.cluster.nodes.get(params["id"])
        if node is None:
            raise NomadError(404, "node not found")
        return _json(node, index=index, pretty=self._pretty(request))

    async def node_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        if params["id"] not in self.cluster.nodes:
            raise NomadError(404, "node not found")
        allocs = [_public(a) for a in self.cluster.allocs.values() if a["NodeID"] == params["id"]]
        return _json(allocs, index=index, pretty=self._pretty(request))

    async def node_eligibility(self, request: Request, params: dict[str, str]) -> Response:
        body = await self._body(request)
        if params["id"] not in self.cluster.nodes:
            raise NomadError(404, "node not found")
        if body.get("NodeID") not in (None, "", params["id"]):
            raise NomadError(400, "ID in request body doesn't match URL")
        index = self.cluster.set_node_eligibility(params["id"], body.get("Eligibility") or "")
        return _json(
            {
                "EvalIDs": None,
                "EvalCreateIndex": 0,
                "NodeModifyIndex": index,
                "Index": index,
                "LastContact": 0,
                "KnownLeader": True,
            },
            index=index,
        )

    # -- agent, status, namespaces, ACL ------------------------------------------------------------

    async def list_namespaces(self, request: Request, params: dict[str, str]) -> Response:
        return _json(list(self.cluster.namespaces.values()), index=1, pretty=self._pretty(request))

    async def get_namespace(self, request: Request, params: dict[str, str]) -> Response:
        ns = self.cluster.namespaces.get(params["id"])
        if ns is None:
            raise NomadError(404, "namespace not found")
        return _json(ns, index=1, pretty=self._pretty(request))

    async def regions(self, request: Request, params: dict[str, str]) -> Response:
        return _json([self.cluster.region], pretty=self._pretty(request))

    async def leader(self, request: Request, params: dict[str, str]) -> Response:
        return _json(f"{self.s.host}:4647")

    async def peers(self, request: Request, params: dict[str, str]) -> Response:
        return _json([f"{self.s.host}:4647"])

    async def agent_self(self, request: Request, params: dict[str, str]) -> Response:
        member = {
            "Name": "stand-in.global",
            "Addr": self.s.host,
            "Port": 4648,
            "Tags": {
                "region": self.cluster.region,
                "dc": "dc1",
                "role": "nomad",
                "build": NOMAD_VERSION,
            },
            "Status": "alive",
            "ProtocolMin": 1,
            "ProtocolMax": 5,
            "ProtocolCur": 2,
            "DelegateMin": 2,
            "DelegateMax": 5,
            "DelegateCur": 2,
        }
        config = {
            "Region": self.cluster.region,
            "Datacenter": "dc1",
            "NodeName": "stand-in",
            "Version": {
                "Version": NOMAD_VERSION,
                "VersionPrerelease": "",
                "VersionMetadata": "stand-in",
            },
            "ACL": {"Enabled": self.s.acl},
            "Server": {"Enabled": True},
            "Client": {"Enabled": True},
        }
        return _json(
            {
                "config": config,
                "member": member,
                "stats": {"nomad": {"server": "true", "leader": "true"}},
            },
            pretty=self._pretty(request),
        )

    async def agent_health(self, request: Request, params: dict[str, str]) -> Response:
        return _json(
            {"client": {"message": "ok", "ok": True}, "server": {"message": "ok", "ok": True}}
        )

    async def token_self(self, request: Request, params: dict[str, str]) -> Response:
        if not self.s.acl:
            raise NomadError(400, "ACL support disabled")
        token = self.s.tokens[self._token(request) or ""]
        return _json(_public(token), index=token["ModifyIndex"], pretty=self._pretty(request))

    async def logs(self, request: Request, params: dict[str, str]) -> Response:
        alloc = self.cluster.allocs.get(params["id"])
        if alloc is None:
            raise NomadError(404, f'Unknown allocation "{params["id"]}"')
        task = request.query_params.get("task")
        if not task:
            raise NomadError(400, "must provide task name")
        kind = request.query_params.get("type") or ""
        if kind not in ("stdout", "stderr"):
            raise NomadError(400, "must provide log type (stdout or stderr)")
        runner = self.s.client.runner(params["id"], task) if self.s.client else None
        if task not in alloc["TaskStates"]:
            raise NomadError(400, f'unknown task name "{task}"')
        data = await runner.live_logs(kind) if runner is not None else b""
        try:
            offset = int(request.query_params.get("offset") or 0)
        except ValueError:
            raise NomadError(400, "Invalid offset") from None
        origin = request.query_params.get("origin") or "start"
        if origin not in ("start", "end"):
            raise NomadError(400, 'origin must be "start" or "end"')
        if origin == "end":
            data = data[len(data) - min(len(data), max(0, offset)) :]
        else:
            data = data[max(0, offset) :]
        if self._flag(request, "plain"):
            return Response(data, media_type="text/plain; charset=utf-8")
        frame = {
            "File": f"alloc/logs/{task}.{kind}.0",
            "Offset": len(data),
            "Data": base64.b64encode(data).decode(),
        }
        return _json(frame if data else {})

    # -- variables -------------------------------------------------------------------------------

    async def list_variables(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/vars``: the metadata (never the items) of the variables under ``prefix``."""
        index = await self._block(request, lambda: self.cluster.tables["vars"])
        found = self.cluster.variables.list(
            self._namespace(request), request.query_params.get("prefix") or ""
        )
        found, headers = self._page(request, found, key="Path")
        return _json(found, index=index, pretty=self._pretty(request), headers=headers)

    async def variable(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/var/<path>``: read (``GET``, blocking), write (``PUT``/``POST``, ``cas``) or
        delete (``DELETE``, ``cas``) one variable, checked in Nomad's order: the path, the
        method, the body, ``cas``, then the token, then the variable itself."""
        path = params["path"]
        if not path:
            raise NomadError(400, "missing variable path")
        method = request.method
        if method not in ("GET", "PUT", "POST", "DELETE"):
            raise NomadError(400, "Invalid method")
        store = self.cluster.variables
        if method == "GET":
            self._check_token(request, "var-read")
            key = (self._namespace(request), path)

            def current() -> int:
                var = store.get(*key)
                return int(var["ModifyIndex"]) if var is not None else self.cluster.tables["vars"]

            index = await self._block(request, current)
            var = store.get(*key)
            if var is None:
                raise NomadError(404, "variable not found")
            return _json(var, index=index, pretty=self._pretty(request))
        body = await self._body(request) if method != "DELETE" else {}
        if method != "DELETE" and not body.get("Items"):
            raise NomadError(400, "variable missing required Items object")
        cas = self._cas(request)
        namespace = body.get("Namespace") or self._namespace(request)
        if method == "DELETE":
            self._check_token(request, "var-destroy")
            conflict = store.delete(namespace, path, cas=cas)
            if conflict is None:
                return Response(status_code=204, headers={"X-Nomad-Index": str(self.cluster.index)})
        else:
            self._check_token(request, "var-write")
            written, conflict = store.put(namespace, path, body["Items"], cas=cas)
            if written is not None:
                return _json(written, index=self.cluster.index, pretty=self._pretty(request))
        assert conflict is not None
        if not self._may(request, "var-read"):
            conflict = {**conflict, "Items": None}  # a caller who may not read it sees no items
        return _json(
            conflict, index=conflict["ModifyIndex"], pretty=self._pretty(request), status=409
        )

    @staticmethod
    def _cas(request: Request) -> int | None:
        raw = request.query_params.get("cas")
        if not raw:
            return None
        try:
            cas = int(raw)
            if cas < 0:
                raise ValueError
        except ValueError:
            raise NomadError(
                400, f"can not parse cas: the value {raw!r} is not an unsigned integer"
            ) from None
        return cas

    async def event_stream(self, request: Request, params: dict[str, str]) -> Response:
        """``/v1/event/stream``: NDJSON frames ``{"Index", "Events"}`` from ``index`` on, ``{}``
        as a heartbeat every 10 s; ``topic=Topic:Key`` (repeatable, ``*`` for any)."""
        try:
            start = int(request.query_params.get("index") or 0)
        except ValueError:
            raise NomadError(400, "Invalid index") from None
        topics: list[tuple[str, str]] = []
        for raw in request.query_params.getlist("topic"):
            topic, _, key = raw.partition(":")
            if not topic or not key:
                raise NomadError(400, f"Invalid key value pair for topic: {raw}")
            topics.append((topic, key))
        topics = topics or [("*", "*")]
        namespace = request.query_params.get("namespace") or "default"
        cluster = self.cluster

        def wanted(topic: str, key: str, event_ns: str, filter_keys: list[str]) -> bool:
            if namespace != "*" and event_ns and event_ns != namespace:
                return False
            return any(
                t in ("*", topic) and (k == "*" or k == key or k in filter_keys) for t, k in topics
            )

        async def frames() -> AsyncIterator[str]:
            last = start
            while not cluster.closing:
                changed = cluster.changed
                fresh = []
                for entry in reversed(cluster.events):
                    if entry[0] <= last:
                        break
                    fresh.append(entry)
                fresh.reverse()
                if fresh:
                    last = fresh[-1][0]
                    by_index: dict[int, list[str]] = {}
                    for index, topic, key, event_ns, filter_keys, text in fresh:
                        if wanted(topic, key, event_ns, filter_keys):
                            by_index.setdefault(index, []).append(text)
                    for index, batch in by_index.items():
                        yield '{"Index":%d,"Events":[%s]}\n' % (index, ",".join(batch))
                    continue
                try:
                    await asyncio.wait_for(changed.wait(), 10)
                except TimeoutError:
                    yield "{}\n"

        return StreamingResponse(
            frames(),
            media_type="application/json",
            headers={"X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"},
        )


__all__ = ["Api", "alloc_stub", "job_stub"]
