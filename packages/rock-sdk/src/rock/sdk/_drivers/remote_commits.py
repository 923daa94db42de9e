"""ROCK's commit over the admin's HTTP API (``POST /commit``, ``GET /commit/{sandbox_id}``): the
remote driver's base, so :mod:`rock.sdk._drivers.remote` stays one module's read."""

from __future__ import annotations

import urllib.parse

from rock.sdk._drivers.remote_transport import RemoteTransport
from rock_core.actions import CommitStatusResponse
from rock_core.converters import structure_wire

__all__ = ["RemoteCommits"]


class RemoteCommits(RemoteTransport):
    """:meth:`commit` and :meth:`get_commit_status` of :class:`~rock.sdk._drivers.remote.RemoteDriver`."""

    async def commit(
        self, sandbox_id: str, image_tag: str, username: str, password: str
    ) -> CommitStatusResponse:
        """``POST /commit``: begin committing the sandbox's files as ``image_tag``."""
        body = {
            "sandbox_id": sandbox_id,
            "image_tag": image_tag,
            "username": username,
            "password": password,
        }
        result = await self._call("POST", "/commit", "commit", sandbox_id, json=body)
        return structure_wire(result, CommitStatusResponse, forbid_extra_keys=False)

    async def get_commit_status(self, sandbox_id: str) -> CommitStatusResponse:
        """``GET /commit/{sandbox_id}``: the sandbox's last commit's status."""
        quoted = urllib.parse.quote(sandbox_id, safe="")
        result = await self._call("GET", f"/commit/{quoted}", "get_commit_status", sandbox_id)
        return structure_wire(result, CommitStatusResponse, forbid_extra_keys=False)
