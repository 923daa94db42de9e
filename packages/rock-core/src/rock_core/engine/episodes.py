"""What a sandbox's episode state is made of, as the engine's facade offers it: snapshots and
forks (:mod:`~rock_core.engine.snapshots`) and pause and resume
(:mod:`~rock_core.engine.pausing`), issue #25.

:class:`EpisodeState` is a part of :class:`~rock_core.engine.manager.SandboxManager` (which
inherits it): one facade, written in two modules so that neither grows past what one reads at
once. Its methods pass the engine's core to their job module, as the rest of the facade does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rock_core.engine import pausing, resetting, snapshots
from rock_core.engine.commits import commit_status, start_commit
from rock_core.engine.following import leader_only_call

if TYPE_CHECKING:
    from rock_core.actions import CommitStatusResponse, SnapshotInfo
    from rock_core.engine.core import EngineCore
    from rock_core.models import SandboxRecord
    from rock_core.tenancy import Quota

__all__ = ["EpisodeState"]


class EpisodeState:
    """Snapshots, forks, pause and resume of :class:`~rock_core.engine.manager.SandboxManager`."""

    _core: EngineCore

    # -- snapshots and forks (engine/snapshots.py) -------------------------------------------------

    @leader_only_call
    async def snapshot(
        self,
        sandbox_id: str,
        name: str | None = None,
        *,
        tenant: str | None = None,
        quota: Quota | None = None,
        archive: bool = False,
    ) -> SnapshotInfo:
        """Keep a sandbox's files, not its processes, as a snapshot of its tenant (``tenant``:
        the caller's; ``quota``: its ``max_snapshots``; ``archive``: in the archive store as
        well) (:func:`rock_core.engine.snapshots.snapshot`: what it raises)."""
        return await snapshots.snapshot(
            self._core, sandbox_id, name, tenant=tenant, quota=quota, archive=archive
        )

    async def list_snapshots(self, tenant: str | None = None) -> list[SnapshotInfo]:
        """The snapshots of ``tenant`` (default: this engine's owner), oldest first."""
        return await snapshots.list_snapshots(self._core, tenant)

    async def snapshot_counts(self) -> dict[str, int]:
        """How many snapshots each tenant keeps, on the node or only in the archive store (what
        ``max_snapshots`` counts)."""
        return await snapshots.snapshot_counts(self._core)

    @leader_only_call
    async def delete_snapshot(self, name: str, *, tenant: str | None = None) -> None:
        """Delete a snapshot of ``tenant`` (:func:`rock_core.engine.snapshots.delete_snapshot`)."""
        await snapshots.delete_snapshot(self._core, name, tenant)

    @leader_only_call
    async def fork(
        self, sandbox_id: str, count: int, *, tenant: str | None = None, quota: Quota | None = None
    ) -> tuple[SnapshotInfo, list[SandboxRecord]]:
        """Snapshot a sandbox, accept ``count`` starts from it (:func:`rock_core.engine.snapshots.fork`)."""
        return await snapshots.fork(self._core, sandbox_id, count, tenant=tenant, quota=quota)

    # -- pause and resume (engine/pausing.py) ---------------------------------------------------

    @leader_only_call
    async def pause(self, sandbox_id: str) -> SandboxRecord:
        """Freeze a running sandbox (memory and processes kept; it stays ``running``, paused).

        :raises BadRequestRockError: the sandbox is not running (naming its state).
        :raises NotSupported: the runtime cannot pause (its capability ``pause``).
        """
        return await pausing.pause(self._core, sandbox_id)

    @leader_only_call
    async def resume(self, sandbox_id: str) -> SandboxRecord:
        """Thaw a paused sandbox: its processes go on where they were (as :meth:`pause`)."""
        return await pausing.resume(self._core, sandbox_id)

    # -- reset (engine/resetting.py) ------------------------------------------------------------

    @leader_only_call
    async def reset(
        self, sandbox_id: str, snapshot: str | None = None, *, tenant: str | None = None
    ) -> SandboxRecord:
        """Put a running sandbox back to its image's files, or to the snapshot ``snapshot`` of
        its tenant: a new unit, its processes and sessions gone; its id, limits, ports and
        secret kept (:func:`rock_core.engine.resetting.reset`: what it raises)."""
        return await resetting.reset(self._core, sandbox_id, snapshot, tenant=tenant)

    # -- ROCK's commit (engine/commits.py) -------------------------------------------------------

    @leader_only_call
    async def commit(
        self,
        sandbox_id: str,
        image_tag: str,
        username: str = "",
        password: str = "",
        *,
        tenant: str | None = None,
    ) -> CommitStatusResponse:
        """Begin ROCK's commit of a sandbox's files as ``image_tag``, pushed when it names a
        configured registry (:func:`rock_core.engine.commits.commit`: what it raises)."""
        return await start_commit(
            self._core, sandbox_id, image_tag, username, password, tenant=tenant
        )

    @leader_only_call
    async def get_commit_status(
        self, sandbox_id: str, *, tenant: str | None = None
    ) -> CommitStatusResponse:
        """The last commit's status of a sandbox (:func:`rock_core.engine.commits.commit_status`)."""
        return commit_status(self._core, sandbox_id, tenant=tenant)
