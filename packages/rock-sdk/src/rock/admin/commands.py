"""The admin's command routes: ``/execute`` (one-shot), ``/execute_stream`` (NDJSON events while
it runs, a rock addition) and the bash sessions (``/create_session``, ``/run_in_session``,
``/close_session``, rock's ``/interrupt_session``), each through the sandbox's rocklet.

Each handler takes the :class:`~rock.admin.app.AdminApp` first; the app's route table binds it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rock.admin.envelope import NDJSON
from rock.admin.models import InterruptSessionRequest
from rock_core.actions import (
    BashObservation,
    CloseBashSessionResponse,
    CommandResponse,
    CreateBashSessionResponse,
    InterruptSessionResponse,
    SandboxBashAction,
    SandboxCloseBashSessionRequest,
    SandboxCommand,
    SandboxCreateBashSessionRequest,
)
from rock_core.converters import unstructure_wire
from rock_core.errors import RockError, RockletUnreachable

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = [
    "execute",
    "execute_stream",
    "create_session",
    "run_in_session",
    "close_session",
    "interrupt_session",
]


async def execute(app: AdminApp, _request: Request, body: SandboxCommand) -> CommandResponse:
    """``POST /execute``."""
    return await app.rocklet(body.sandbox_id, "execute").execute(body)


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


async def create_session(
    app: AdminApp, _request: Request, body: SandboxCreateBashSessionRequest
) -> CreateBashSessionResponse:
    """``POST /create_session``."""
    return await app.rocklet(body.sandbox_id, "create_session").create_session(body)


async def run_in_session(
    app: AdminApp, _request: Request, body: SandboxBashAction
) -> BashObservation:
    """``POST /run_in_session``."""
    return await app.rocklet(body.sandbox_id, "run_in_session").run_in_session(body)


async def close_session(
    app: AdminApp, _request: Request, body: SandboxCloseBashSessionRequest
) -> CloseBashSessionResponse:
    """``POST /close_session``."""
    return await app.rocklet(body.sandbox_id, "close_session").close_session(body)


async def interrupt_session(
    app: AdminApp, _request: Request, body: InterruptSessionRequest
) -> InterruptSessionResponse:
    """``POST /interrupt_session`` (rock addition)."""
    return await app.rocklet(body.sandbox_id, "interrupt_session").interrupt_session(body.session)
