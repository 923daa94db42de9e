"""The admin's background-process routes (rock additions): ``POST /processes`` starts one,
``GET /processes/{process_id}`` its state, ``GET .../output`` its raw output bytes and
``POST .../kill`` signals it, each through the sandbox's rocklet.

Each handler takes the :class:`~rock.admin.app.AdminApp` first; the app's route table binds it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from rock.admin.envelope import BYTES, BadInput
from rock.admin.models import (
    KillProcessRequest,
    ProcessOutputQuery,
    ProcessStatusQuery,
    StartProcessRequest,
)
from rock_core.actions import ProcessInfo
from rock_core.errors import InvalidParameter

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["start_process", "process_status", "kill_process", "process_output"]

_PROCESS_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _process_id(request: Request) -> str:
    value = str(request.path_params["process_id"])
    if not _PROCESS_ID.match(value) or value in (".", ".."):
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: process_id: {value!r} is not a process id",
                field="process_id",
                value=value,
            )
        )
    return value


async def start_process(app: AdminApp, _request: Request, body: StartProcessRequest) -> ProcessInfo:
    """``POST /processes`` (rock addition)."""
    return await app.rocklet(body.sandbox_id, "start_process").start_process(
        body.command, cwd=body.cwd, env=body.env, timeout=body.timeout
    )


async def process_status(app: AdminApp, request: Request, query: ProcessStatusQuery) -> ProcessInfo:
    """``GET /processes/{process_id}`` (rock addition)."""
    process_id = _process_id(request)
    client = app.rocklet(query.sandbox_id, "process_status")
    return await client.process_status(process_id, wait=query.wait, tail=query.tail)


async def kill_process(app: AdminApp, request: Request, body: KillProcessRequest) -> ProcessInfo:
    """``POST /processes/{process_id}/kill`` (rock addition)."""
    process_id = _process_id(request)
    client = app.rocklet(body.sandbox_id, "kill_process")
    return await client.kill_process(process_id, signal=body.signal, wait=body.wait)


async def process_output(app: AdminApp, request: Request, query: ProcessOutputQuery) -> Response:
    """``GET /processes/{process_id}/output`` (rock addition): raw bytes."""
    process_id = _process_id(request)
    client = app.rocklet(query.sandbox_id, "process_output")
    data = await client.process_output(process_id, offset=query.offset, limit=query.limit)
    return Response(data, media_type=BYTES)
