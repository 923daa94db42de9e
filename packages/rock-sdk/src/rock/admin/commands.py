"""The admin's hand-written command route: ``/execute_stream`` (NDJSON events while a command
runs, a rock addition), through the sandbox's rocklet.

``/execute`` and the bash sessions are operations of kind ``call``, served by the one handler
of :mod:`rock.admin.operations`. The handler takes the :class:`~rock.admin.app.AdminApp` first;
the route table binds it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rock.admin.envelope import NDJSON
from rock_core.actions import SandboxCommand
from rock_core.converters import unstructure_wire
from rock_core.errors import RockError, RockletUnreachable

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["execute_stream"]


async def execute_stream(app: AdminApp, _request: Request, body: SandboxCommand) -> Response:
    """``POST /execute_stream`` (rock addition): NDJSON events while the command runs."""
    client = app.rocklet(body.sandbox_id, "execute_stream")
    # Opened here and read by the response: a failure before the first byte still becomes an envelope.
    upstream = await client.open_stream("/execute_stream", unstructure_wire(body), "execute_stream")
    manager = app.manager

    async def events() -> AsyncIterator[bytes]:
        # The stream outlives the handler: it is a call of its own until it ends.
        async with manager.call(body.sandbox_id):
            try:
                async for line in client.stream_lines(
                    upstream, "execute_stream"
                ):  # each line capped
                    if line.strip():
                        yield line.encode() + b"\n"
            except httpx.HTTPError as exc:
                error = {
                    "type": "error",
                    "code": RockletUnreachable.code,
                    "message": f"the stream broke: {exc!r}",
                }
                yield json.dumps(error).encode() + b"\n"
            except RockError as exc:
                yield (
                    json.dumps({"type": "error", "code": exc.code, "message": exc.message}).encode()
                    + b"\n"
                )
            finally:
                await upstream.aclose()

    return StreamingResponse(events(), media_type=NDJSON)
