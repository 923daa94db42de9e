"""The stand-in's job, allocation and evaluation routes, and the event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rock_nomad.testing._model import NomadError, parse_bool

if TYPE_CHECKING:
    pass


from rock_nomad.testing._http_envelope import (
    ApiEnvelope,
    alloc_stub,
    job_stub,
    json_response,
    public,
)

__all__ = ["JobRoutes"]


class JobRoutes(ApiEnvelope):
    """Jobs, allocations, evaluations and ``/v1/event/stream``."""

    # -- jobs ------------------------------------------------------------------------------------

    async def register(self, request: Request, params: dict[str, str]) -> Response:
        body = await self._body(request)
        out = self.cluster.register(
            body, namespace=request.query_params.get("namespace"), path_id=params.get("id")
        )
        return json_response(out, index=out["Index"], pretty=self._pretty(request))

    async def deregister(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.deregister(
            self._namespace(request), params["id"], purge=self._flag(request, "purge")
        )
        return json_response(out, index=out["Index"], pretty=self._pretty(request))

    async def job_evaluate(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.evaluate(self._namespace(request), params["id"])
        return json_response(out, index=out["Index"], pretty=self._pretty(request))

    async def list_jobs(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["jobs"])
        ns = self._namespace(request)
        prefix = request.query_params.get("prefix") or ""
        meta = self._flag(request, "meta")
        jobs = [
            job_stub(public(j), self.cluster.summary(j["Namespace"], j["ID"]), meta=meta)
            for (jns, jid), j in self.cluster.jobs.items()
            if (ns == "*" or jns == ns) and jid.startswith(prefix)
        ]
        jobs, headers = self._page(request, jobs)
        return json_response(jobs, index=index, pretty=self._pretty(request), headers=headers)

    async def get_job(self, request: Request, params: dict[str, str]) -> Response:
        key = (self._namespace(request), params["id"])

        def current() -> int:
            job = self.cluster.jobs.get(key)
            return int(job["ModifyIndex"]) if job is not None else self.cluster.tables["jobs"]

        index = await self._block(request, current)
        job = self.cluster.jobs.get(key)
        if job is None:
            raise NomadError(404, "job not found")
        return json_response(public(job), index=index, pretty=self._pretty(request))

    async def job_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        allocs = self.cluster.allocs_of(
            self._namespace(request), params["id"], all_versions=self._flag(request, "all")
        )
        allocs.sort(key=lambda a: a["CreateIndex"], reverse=True)
        return json_response(
            [alloc_stub(a) for a in allocs], index=index, pretty=self._pretty(request)
        )

    async def job_evaluations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["evals"])
        ns = self._namespace(request)
        evals = self.cluster._evals_of(ns, params["id"])
        evals.sort(key=lambda e: e["CreateIndex"], reverse=True)
        return json_response(evals, index=index, pretty=self._pretty(request))

    async def job_summary(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(
            request, lambda: max(self.cluster.tables["jobs"], self.cluster.tables["allocs"])
        )
        return json_response(
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
            "Versions": [public(v) for v in versions],
            "Diffs": None,
            "Index": index,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }
        return json_response(body, index=index, pretty=self._pretty(request))

    # -- allocations and evaluations -------------------------------------------------------------

    async def get_alloc(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            alloc = self.cluster.allocs.get(params["id"])
            return int(alloc["ModifyIndex"]) if alloc is not None else self.cluster.tables["allocs"]

        index = await self._block(request, current)
        alloc = self.cluster.allocs.get(params["id"])
        if alloc is None:
            raise NomadError(404, "alloc not found")
        return json_response(public(alloc), index=index, pretty=self._pretty(request))

    async def stop_alloc(self, request: Request, params: dict[str, str]) -> Response:
        out = self.cluster.stop_alloc(params["id"])
        return json_response(out, index=out["Index"], pretty=self._pretty(request))

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
        return json_response(allocs, index=index, pretty=self._pretty(request), headers=headers)

    async def get_eval(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            ev = self.cluster.evals.get(params["id"])
            return int(ev["ModifyIndex"]) if ev is not None else self.cluster.tables["evals"]

        index = await self._block(request, current)
        ev = self.cluster.evals.get(params["id"])
        if ev is None:
            raise NomadError(404, "eval not found")
        return json_response(ev, index=index, pretty=self._pretty(request))

    async def eval_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        allocs = [
            alloc_stub(a) for a in self.cluster.allocs.values() if a["EvalID"] == params["id"]
        ]
        return json_response(allocs, index=index, pretty=self._pretty(request))

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
        return json_response(evals, index=index, pretty=self._pretty(request), headers=headers)

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
                    if by_index:
                        # Every frame there is now, in one write: one line each, as ever.
                        yield "".join(
                            '{"Index":%d,"Events":[%s]}\n' % (index, ",".join(batch))
                            for index, batch in by_index.items()
                        )
                    continue
                if not await cluster.next_change(10):
                    yield "{}\n"

        return StreamingResponse(
            frames(),
            media_type="application/json",
            headers={"X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"},
        )
