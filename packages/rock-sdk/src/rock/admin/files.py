"""The admin's hand-written file routes: ``/upload`` (multipart) and ``/download`` (raw bytes,
streamed), each through the sandbox's rocklet.

``/read_file``, ``/write_file``, ``/list_dir`` (and every other operation of kind ``call``)
are served by the one handler of :mod:`rock.admin.operations`. Each handler takes the
:class:`~rock.admin.app.AdminApp` first; the route table binds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from rock.admin.body_limit import BodyTooLarge
from rock.admin.envelope import BYTES, BadInput
from rock.admin.key_gate import unknown_sandbox
from rock.admin.models import SandboxPathRequest
from rock_core.actions import UploadResponse
from rock_core.errors import InvalidParameter

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["upload", "download", "UPLOAD_FORM"]

#: The JSON schema of ``/upload``'s multipart body (for the OpenAPI document).
UPLOAD_FORM = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "contentMediaType": BYTES},
        "target_path": {"type": "string"},
        "sandbox_id": {"type": "string"},
        "unzip": {"enum": ["true", "false"], "default": "false"},
    },
    "required": ["file", "target_path", "sandbox_id"],
    "additionalProperties": False,
}


async def upload(app: AdminApp, request: Request, _data: None) -> UploadResponse:
    """``POST /upload``: multipart ``file``, ``target_path``, ``sandbox_id`` (and rock's
    optional ``unzip``: ``true`` extracts a zip archive at ``target_path``).

    At most ``max_concurrent_uploads`` bodies are read at once; the others wait their turn with
    their body unread (the client's connection holds it). The file part is spooled to disk past
    1 MiB (Starlette's parser) and streamed to the rocklet from there, never held whole.
    """
    async with app.upload_slots:
        return await _upload(app, request)


async def _upload(app: AdminApp, request: Request) -> UploadResponse:
    try:
        form = await request.form(max_files=1, max_fields=4)
    except BodyTooLarge:
        raise
    except Exception as exc:  # the multipart parser's own errors: the caller's fault
        raise BadInput(
            InvalidParameter(
                f"invalid parameter: body: not a valid multipart form: {exc}", field="body"
            )
        ) from None
    try:
        problems = []
        unknown = sorted(set(form.keys()) - {"file", "target_path", "sandbox_id", "unzip"})
        problems += [f"extra field {name!r} not allowed" for name in unknown]
        sandbox_id = form.get("sandbox_id")
        target_path = form.get("target_path")
        upload = form.get("file")
        if not isinstance(sandbox_id, str) or not sandbox_id.strip():
            problems.append(
                "sandbox_id: "
                + ("required field missing" if sandbox_id is None else "must be a non-blank string")
            )
        if not isinstance(target_path, str) or not target_path.strip():
            problems.append(
                "target_path: "
                + (
                    "required field missing"
                    if target_path is None
                    else "must be a non-blank string"
                )
            )
        if upload is None or isinstance(upload, str):
            problems.append(
                "file: " + ("required field missing" if upload is None else "must be a file part")
            )
        unzip_text = form.get("unzip", "false")
        unzip = str(unzip_text).strip().lower() if isinstance(unzip_text, str) else ""
        if unzip not in ("true", "false"):
            problems.append(f"unzip: expected true or false, got {unzip_text!r}")
        if problems:
            fields = [p.split(":")[0] for p in problems if not p.startswith("extra")]
            raise BadInput(
                InvalidParameter(
                    "invalid parameter: " + "; ".join(problems), field=", ".join(fields) or None
                )
            )
        assert (
            isinstance(sandbox_id, str)
            and isinstance(target_path, str)
            and upload is not None
            and not isinstance(upload, str)
        )
        if not app.owns(request, sandbox_id.strip()):
            raise unknown_sandbox(sandbox_id.strip(), "upload")
        client = app.rocklet(sandbox_id.strip(), "upload")
        await upload.seek(0)
        async with app.manager.call(sandbox_id.strip()):  # a form, so the endpoint could not
            return await client.upload(target_path, upload.file, unzip=unzip == "true")
    finally:
        await form.close()


async def download(app: AdminApp, _request: Request, body: SandboxPathRequest) -> Response:
    """``POST /download`` (rock addition): the file's raw bytes."""
    client = app.rocklet(body.sandbox_id, "download")
    upstream = await client.open_stream("/download", {"path": body.path}, "download")
    headers = {}
    if "content-length" in upstream.headers:
        headers["content-length"] = upstream.headers["content-length"]

    manager = app.manager

    async def chunks() -> AsyncIterator[bytes]:
        async with manager.call(body.sandbox_id):  # a long download is activity until it ends
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

    return StreamingResponse(chunks(), media_type=BYTES, headers=headers)
