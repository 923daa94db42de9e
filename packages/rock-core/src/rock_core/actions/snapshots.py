"""(rock) Filesystem snapshots of sandboxes: the bodies of the snapshot, listing, deletion and
fork routes. A snapshot holds a sandbox's files over its image, never its processes."""

from __future__ import annotations

from datetime import datetime

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.actions.responses import SandboxResponse
from rock_core.actions.sandboxes import SandboxStartResponse
from rock_core.models import NonBlankStr, PositiveInt, constrained

__all__ = [
    "ForkRequest",
    "ForkResponse",
    "ResetRequest",
    "SnapshotInfo",
    "SnapshotListResponse",
    "SnapshotNameRequest",
    "SnapshotRequest",
]


@attrs.frozen(kw_only=True)
class SnapshotRequest:
    """``POST /sandboxes/{sandbox_id}/snapshot``: ``name`` (``None``: one is made up), unique
    among the tenant's snapshots; ``archive``: kept in the engine's archive store as well."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    name: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)
    archive: bool = False


@attrs.frozen(kw_only=True)
class SnapshotNameRequest:
    """``POST /snapshots/delete``: the snapshot's name."""

    name: NonBlankStr = constrained(NonBlankStr)


@attrs.frozen(kw_only=True)
class SnapshotInfo(SandboxResponse):
    """A snapshot: its ``name`` (what ``snapshot=`` of a start names), the sandbox it was made
    from, its ``size`` in bytes over its image, when it was made, the image it is kept as, and
    (on the snapshot call's answer only) how long the sandbox was frozen for the copy;
    ``archived``: it is in the archive store as well (another node or a later day can start
    from it); ``on_node``: false for one only the archive store has (its ``image`` is then
    empty: a start from it makes it an image on the node again)."""

    name: str
    sandbox_id: str
    size: int
    created_at: datetime
    image: str
    source_image: str | None = None
    frozen_seconds: float | None = None
    archived: bool = False
    on_node: bool = True


@attrs.frozen(kw_only=True)
class SnapshotListResponse(SandboxResponse):
    """``GET /snapshots``: the caller's snapshots, oldest first."""

    snapshots: list[SnapshotInfo] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class ForkRequest:
    """``POST /sandboxes/{sandbox_id}/fork``: ``count`` sandboxes started from a snapshot of it."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    count: PositiveInt = constrained(PositiveInt)


@attrs.frozen(kw_only=True)
class ForkResponse(SandboxResponse):
    """The snapshot a fork made and the starts it accepted (each ``pending``; poll their status)."""

    snapshot: SnapshotInfo
    sandboxes: list[SandboxStartResponse] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class ResetRequest:
    """``POST /sandboxes/{sandbox_id}/reset``: back to the sandbox's image's files, or to the
    snapshot ``snapshot`` (of the caller's tenant)."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    snapshot: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)
