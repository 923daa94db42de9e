"""ROCK's commit on a :class:`~rock.sdk.sandbox.client.Sandbox`: :meth:`~SandboxCommits.commit`,
:meth:`~SandboxCommits.commit_async` and :meth:`~SandboxCommits.get_commit_status`, with rl-rock
1.11's signatures and answers (:class:`~rock_core.actions.CommitStatusResponse`).

A commit keeps the sandbox's files (not its processes) as the image ``image_tag`` on the
sandbox's node, in the background; ``commit`` polls until it is done and answers the last status
(``phase`` ``SUCCEEDED`` or ``FAILED``, with ``failed_stage``, ``error_code``,
``error_message``), as ROCK's does. A tag naming a registry (``registry.example.com/repo:tag``)
is pushed there with ``username`` and ``password`` only when the engine's ``commit_registries``
lists that registry; otherwise ``commit_async`` is refused at once, naming the setting.
"""

from __future__ import annotations

import asyncio

from rock.sdk.sandbox._handle import SandboxHandle
from rock_core.actions import CommitPhase, CommitStatusResponse

__all__ = ["SandboxCommits"]


class SandboxCommits(SandboxHandle):
    """ROCK's :meth:`commit`, :meth:`commit_async` and :meth:`get_commit_status`."""

    async def commit(
        self,
        image_tag: str,
        username: str,
        password: str,
        timeout: float = 180,
        interval: float = 2,
    ) -> CommitStatusResponse | None:
        """Commit this sandbox's files as ``image_tag`` and wait (at most ``timeout`` seconds,
        asking every ``interval``) until it is done; the last status (``None``: not started).

        :raises InvalidParameter: a bad ``image_tag`` (named), or a push to a registry that is
            not configured (the answer names ``commit_registries``).
        :raises TimeoutError: still running after ``timeout`` seconds.
        """

        async def wait_for_completion() -> CommitStatusResponse | None:
            status = await self.commit_async(image_tag, username, password)
            while status is not None and status.phase is CommitPhase.RUNNING:
                await asyncio.sleep(interval)
                status = await self.get_commit_status()
            return status

        return await asyncio.wait_for(wait_for_completion(), timeout=timeout)

    async def commit_async(
        self, image_tag: str, username: str, password: str
    ) -> CommitStatusResponse | None:
        """Begin committing this sandbox's files as ``image_tag``; its ``RUNNING`` status
        (``None`` when this sandbox has no id yet, as ROCK's)."""
        if not self.sandbox_id:
            return None
        return await self._get_driver().commit(self.sandbox_id, image_tag, username, password)

    async def get_commit_status(self) -> CommitStatusResponse | None:
        """The last commit's status of this sandbox (``None`` when it has no id yet).

        :raises BadRequestRockError: ``STATUS_NOT_FOUND``: no commit of it is known.
        """
        if not self.sandbox_id:
            return None
        return await self._get_driver().get_commit_status(self.sandbox_id)
