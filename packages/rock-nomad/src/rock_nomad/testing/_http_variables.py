"""The stand-in's Nomad Variables routes (``/v1/vars``, ``/v1/var/<path>``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from rock_nomad.testing._model import NomadError

if TYPE_CHECKING:
    pass


from rock_nomad.testing._http_envelope import (
    ApiEnvelope,
    json_response,
)

__all__ = ["VariableRoutes"]


class VariableRoutes(ApiEnvelope):
    """Nomad Variables: list, read, write (check-and-set), delete."""

    # -- variables -------------------------------------------------------------------------------

    async def list_variables(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/vars``: the metadata (never the items) of the variables under ``prefix``."""
        index = await self._block(request, lambda: self.cluster.tables["vars"])
        found = self.cluster.variables.list(
            self._namespace(request), request.query_params.get("prefix") or ""
        )
        found, headers = self._page(request, found, key="Path")
        return json_response(found, index=index, pretty=self._pretty(request), headers=headers)

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
            return json_response(var, index=index, pretty=self._pretty(request))
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
                return json_response(
                    written, index=self.cluster.index, pretty=self._pretty(request)
                )
        assert conflict is not None
        if not self._may(request, "var-read"):
            conflict = {**conflict, "Items": None}  # a caller who may not read it sees no items
        return json_response(
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
