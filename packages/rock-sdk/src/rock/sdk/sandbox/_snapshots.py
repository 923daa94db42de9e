"""(rock) A :class:`~rock.sdk.sandbox.client.Sandbox`'s filesystem snapshots and forks.

A snapshot keeps the sandbox's files over its image (deletions, owners, modes, symlinks), never
its processes, sessions or memory; ``SandboxConfig(snapshot=name)`` starts a sandbox from it.
Snapshots belong to the caller's tenant (with API keys: the key's), which alone sees and uses them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs

from rock.sdk.sandbox._handle import SandboxHandle
from rock_core.actions import SandboxStatusResponse, SnapshotInfo

if TYPE_CHECKING:
    from rock.sdk.sandbox.client import Sandbox


class SandboxSnapshots(SandboxHandle):
    """:meth:`snapshot`, :meth:`fork`, :meth:`reset`, :meth:`snapshots`, :meth:`delete_snapshot`."""

    async def snapshot(self, name: str | None = None, *, archive: bool = False) -> SnapshotInfo:
        """Keep this sandbox's files as the snapshot ``name`` (default: one is made up).

        The sandbox may be running (its container is paused for the copy only: the answer's
        ``frozen_seconds``) or stopped with its container kept. Processes are not captured.
        With ``archive``, the snapshot is kept in the engine's archive store as well (the call
        returns once it is stored): another node sharing the store, or this one after the image
        is gone, starts from it (``SandboxConfig(snapshot=name)``), made an image there once.

        :raises InvalidParameter: a bad name, or one the tenant already uses.
        :raises NotSupported: the runtime cannot (capability ``snapshot_image``; Nomad).
        """
        return await self._get_driver().snapshot(self._require_id("snapshot"), name, archive)

    async def fork(self, n: int) -> list[Sandbox]:
        """Snapshot this sandbox and start ``n`` sandboxes from it, with this sandbox's settings
        and priority (through the start queue); return them running. Their files equal this
        sandbox's at the call; each is independent of the others and of this one. The snapshot
        stays listed (:meth:`snapshots`); delete it once the forks are gone.

        :raises QuotaExceeded: ``n`` more sandboxes would take the tenant past its quota.
        :raises NotSupported: the runtime cannot (capability ``snapshot_image``).
        """
        from rock.sdk.sandbox.client import Sandbox

        driver = self._get_driver()
        forked = await driver.fork(self._require_id("fork"), n)
        children: list[Sandbox] = []
        for started in forked.sandboxes:
            config = attrs.evolve(
                self.config, sandbox_id=started.sandbox_id, snapshot=forked.snapshot.name
            )
            child = Sandbox(config, engine=driver)
            child._sandbox_id = started.sandbox_id
            child._host_name = started.host_name
            child._host_ip = started.host_ip
            children.append(child)
        results = await asyncio.gather(
            *(child._wait_running("fork") for child in children), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await asyncio.gather(*(child.stop() for child in children), return_exceptions=True)
            raise failed[0]
        return children

    async def reset(self, snapshot: str | None = None) -> SandboxStatusResponse:
        """Put this sandbox back to its image's files, or to the snapshot ``snapshot``'s (one of
        the caller's), faster than a stop and a new start. Its processes and sessions end; its
        id, limits, ports (``port_mapping``) and secret stay. A sandbox started from a snapshot
        (or reset to one) goes back to that snapshot's files. Returns its status (the phase
        ``reset`` says to what, and how long it took). After a reset the engine starts the next
        one's container in the background, so later resets take tens of milliseconds.

        :raises BadRequestRockError: it is not running (naming its state), or it is paused.
        :raises InvalidParameter: ``unknown snapshot``.
        :raises NotSupported: the runtime cannot (Nomad: capability ``assign``).
        """
        return await self._get_driver().reset(self._require_id("reset"), snapshot)

    async def snapshots(self) -> list[SnapshotInfo]:
        """The caller's snapshots (name, source sandbox, size in bytes, creation time), oldest first."""
        return await self._get_driver().list_snapshots()

    async def delete_snapshot(self, name: str) -> None:
        """Delete one of the caller's snapshots.

        :raises InvalidParameter: ``unknown snapshot``.
        :raises BadRequestRockError: sandboxes started from it still exist.
        """
        await self._get_driver().delete_snapshot(name)
