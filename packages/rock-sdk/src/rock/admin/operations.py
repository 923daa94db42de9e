"""The admin's routes for the operations of :mod:`rock_core.operations`, made from the catalog.

Every operation gets its route: method and path, name, summary, failure message and whether it
counts as activity come from its declaration. An operation of kind ``call`` is served by one
handler (:func:`_call`): the body read as the operation's ``body`` model, the tenant check and
``manager.call`` by :meth:`AdminApp._endpoint <rock.admin.app.AdminApp._endpoint>` as for any
route with a ``sandbox_id``, then the request sent on to the sandbox's rocklet with
:meth:`RockletClient.call <rock_core.rocklet_client.RockletClient.call>`. The other kinds
(streams, raw bytes, the multipart upload, background processes) have hand-written handlers in
:mod:`rock.admin.commands`, :mod:`rock.admin.files`, :mod:`rock.admin.processes` and
:mod:`rock.admin.lifecycle`, named in :data:`_HANDWRITTEN` with the input they read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rock.admin import commands, files, lifecycle, processes
from rock.admin.models import (
    KillProcessRequest,
    ProcessOutputQuery,
    ProcessStatusQuery,
    SandboxIdQuery,
    SandboxPathRequest,
    StartProcessRequest,
)
from rock.admin.routing import PREFIX, Handler, Route
from rock_core.operations import OPERATIONS, Operation

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["operation_routes"]

# The operations whose admin handler is written by hand: the handler, and what the route reads
# (``body``, ``query`` or ``form``) and answers (``result``), and its name where it is not the
# operation's (ROCK's ``get_sandbox_statistics``).
_HANDWRITTEN: dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, Any]]] = {
    "execute_stream": (commands.execute_stream, {}),
    "upload": (files.upload, {"form": files.UPLOAD_FORM}),
    "download": (files.download, {"body": SandboxPathRequest}),
    "start_process": (processes.start_process, {"body": StartProcessRequest}),
    "process_status": (processes.process_status, {"query": ProcessStatusQuery}),
    "process_output": (processes.process_output, {"query": ProcessOutputQuery}),
    "kill_process": (processes.kill_process, {"body": KillProcessRequest}),
    "get_statistics": (
        lifecycle.get_statistics,
        {"query": SandboxIdQuery, "name": "get_sandbox_statistics"},
    ),
}

# The answer of each kind: ROCK's envelope, or a stream.
_ROUTE_KIND = {
    "call": "envelope",
    "custom": "envelope",
    "multipart": "envelope",
    "ndjson": "ndjson",
    "bytes": "bytes",
}


def _call(app: AdminApp, op: Operation[Any, Any]) -> Handler:
    """The handler of an operation of kind ``call``: its request on to the sandbox's rocklet."""

    async def handler(_request: Request, body: Any) -> Any:
        client = app.manager.rocklet(body.sandbox_id, op.name, activity=op.activity)
        return await client.call(op, op.forward(body))

    return handler


def operation_routes(app: AdminApp) -> list[Route]:
    """A :class:`~rock.admin.routing.Route` of ``app`` for every catalogued operation.

    :raises RuntimeError: an operation not of kind ``call`` has no hand-written handler.
    """
    routes = []
    for op in OPERATIONS:
        fields: dict[str, Any] = {"name": op.name}
        if op.generic:
            handler = _call(app, op)
            fields["body"] = op.body
        else:
            if op.name not in _HANDWRITTEN:
                raise RuntimeError(f"operation {op.name!r} (kind {op.kind}) has no admin handler")
            function, fields_given = _HANDWRITTEN[op.name]
            handler = partial(function, app)
            if op.admin_body is not None:
                fields["body"] = op.admin_body
            fields.update(fields_given)
        kind = _ROUTE_KIND[op.kind]
        routes.append(
            Route(
                method=op.admin_method,
                path=PREFIX + op.admin_path,
                handler=handler,
                result=op.response if kind == "envelope" else None,
                kind=kind,
                failure=op.failure,
                summary=op.summary,
                description=op.description,
                activity=op.activity,
                **fields,
            )
        )
    return routes
