"""The stand-in's node, namespace, region, status, agent, ACL-token and task-log routes."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from rock_nomad.testing._model import NomadError

if TYPE_CHECKING:
    pass


from rock_nomad.testing._http_envelope import (
    NOMAD_VERSION,
    ApiEnvelope,
    json_response,
    public,
)

__all__ = ["ClusterRoutes"]


class ClusterRoutes(ApiEnvelope):
    """Nodes, namespaces, the agent and status, a token about itself, task logs."""

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
        return json_response(nodes, index=index, pretty=self._pretty(request), headers=headers)

    async def get_node(self, request: Request, params: dict[str, str]) -> Response:
        def current() -> int:
            node = self.cluster.nodes.get(params["id"])
            return int(node["ModifyIndex"]) if node is not None else self.cluster.tables["nodes"]

        index = await self._block(request, current)
        node = self.cluster.nodes.get(params["id"])
        if node is None:
            raise NomadError(404, "node not found")
        return json_response(node, index=index, pretty=self._pretty(request))

    async def node_allocations(self, request: Request, params: dict[str, str]) -> Response:
        index = await self._block(request, lambda: self.cluster.tables["allocs"])
        if params["id"] not in self.cluster.nodes:
            raise NomadError(404, "node not found")
        allocs = [public(a) for a in self.cluster.allocs.values() if a["NodeID"] == params["id"]]
        return json_response(allocs, index=index, pretty=self._pretty(request))

    async def node_eligibility(self, request: Request, params: dict[str, str]) -> Response:
        body = await self._body(request)
        if params["id"] not in self.cluster.nodes:
            raise NomadError(404, "node not found")
        if body.get("NodeID") not in (None, "", params["id"]):
            raise NomadError(400, "ID in request body doesn't match URL")
        index = self.cluster.set_node_eligibility(params["id"], body.get("Eligibility") or "")
        return json_response(
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
        return json_response(
            list(self.cluster.namespaces.values()), index=1, pretty=self._pretty(request)
        )

    async def get_namespace(self, request: Request, params: dict[str, str]) -> Response:
        ns = self.cluster.namespaces.get(params["id"])
        if ns is None:
            raise NomadError(404, "namespace not found")
        return json_response(ns, index=1, pretty=self._pretty(request))

    async def regions(self, request: Request, params: dict[str, str]) -> Response:
        return json_response([self.cluster.region], pretty=self._pretty(request))

    async def leader(self, request: Request, params: dict[str, str]) -> Response:
        return json_response(f"{self.s.host}:4647")

    async def peers(self, request: Request, params: dict[str, str]) -> Response:
        return json_response([f"{self.s.host}:4647"])

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
        return json_response(
            {
                "config": config,
                "member": member,
                "stats": {"nomad": {"server": "true", "leader": "true"}},
            },
            pretty=self._pretty(request),
        )

    async def agent_health(self, request: Request, params: dict[str, str]) -> Response:
        return json_response(
            {"client": {"message": "ok", "ok": True}, "server": {"message": "ok", "ok": True}}
        )

    async def token_self(self, request: Request, params: dict[str, str]) -> Response:
        if not self.s.acl:
            raise NomadError(400, "ACL support disabled")
        token = self.s.tokens[self._token(request) or ""]
        return json_response(
            public(token), index=token["ModifyIndex"], pretty=self._pretty(request)
        )

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
        return json_response(frame if data else {})
