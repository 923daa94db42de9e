"""envd's plain HTTP ``/files``: ``GET ?path=`` answers a file's bytes (the rocklet's
``download``, streamed), ``POST`` writes one file (``application/octet-stream``, ``?path=``) or
several (``multipart/form-data``, each part's file name its path) with the rocklet's ``upload``.
Errors in E2B's shape, ``{"code", "message"}``: 404 for a path that is not there, 400 for a
bad request, 403 for one the sandbox may not read."""

from __future__ import annotations

import email.parser
import email.policy
import os.path
from collections.abc import AsyncIterator
from typing import Any

from rock_core.errors import RockError
from rock_core.routes import RouteRequest, RouteStream
from rock_e2b.access import E2BError
from rock_e2b.dataplane import Target

__all__ = ["read", "write"]


def _error(path: str, exc: RockError) -> E2BError:
    text = exc.message
    if "No such file" in text or "not found" in text.lower():
        return E2BError(404, f"path {path!r} not found: {text}")
    if "Permission denied" in text:
        return E2BError(403, f"path {path!r}: {text}")
    if "directory" in text.lower():
        return E2BError(400, f"path {path!r}: {text}")
    return E2BError(500 if exc.code // 1000 == 5 else 400, f"path {path!r}: {text}")


def _check_user(where: Target) -> None:
    user = where.other_user()
    if user is not None:
        raise E2BError(
            400,
            f"username {user!r}: rock reads and writes a sandbox's files as its own user (root); "
            "acting as another user is not served",
        )


async def read(where: Target, request: RouteRequest) -> Any:
    _check_user(where)
    path = request.query.get("path", "")
    if not path:
        raise E2BError(400, "path: a file path is required")
    client = where.engine.rocklet(where.sandbox_id, "e2b files read")
    chunks = client.download(path)
    try:
        first = await anext(chunks, b"")
    except RockError as exc:
        raise _error(path, exc) from None

    async def body() -> AsyncIterator[bytes]:
        try:
            if first:
                yield first
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    return RouteStream(body(), media_type="application/octet-stream")


def _parts(request: RouteRequest) -> list[tuple[str, bytes]]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        head = f"Content-Type: {content_type}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
        files = []
        for part in message.iter_parts():
            name = part.get_filename() or request.query.get("path", "")
            payload = part.get_payload(decode=True)
            files.append((name, payload if isinstance(payload, bytes) else b""))
        if len(files) == 1 and request.query.get("path"):
            files = [(request.query["path"], files[0][1])]
        return files
    if request.headers.get("content-encoding"):
        raise E2BError(400, "Content-Encoding: rock takes uploads uncompressed")
    return [(request.query.get("path", ""), request.body)]


async def write(where: Target, request: RouteRequest) -> Any:
    _check_user(where)
    if any(k.startswith("x-metadata-") for k in request.headers):
        raise E2BError(400, "file metadata: rock does not keep E2B's file metadata")
    client = where.engine.rocklet(where.sandbox_id, "e2b files write")
    written = []
    for path, data in _parts(request):
        if not path:
            raise E2BError(400, "path: a file path is required")
        try:
            await client.upload(path, data)
        except RockError as exc:
            raise _error(path, exc) from None
        written.append({"name": os.path.basename(path), "type": "file", "path": path})
    return written
