"""The contract an archive store plugin implements: :class:`ArchiveStore`.

When a stopped sandbox is archived, the engine streams what it keeps of it (the runtime's
filesystem snapshot, the log directory) into an archive store, one named *part* per stream, and
removes the unit. Restoring streams the parts back. Plugins register store classes with the
``rock_register_archive_stores`` hook.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable, AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ArchiveStore"]


class ArchiveStore(abc.ABC):
    """Abstract base of every archive store: where archived sandboxes are kept.

    An archive is addressed by sandbox id and holds named parts (the engine uses ``"rootfs"`` for
    the runtime's snapshot and ``"logs"`` for the log directory). The store treats the bytes as
    opaque. The engine builds a store with keyword arguments taken from its configuration
    section (``cls(**settings)``) and closes it with :meth:`aclose`.

    A missing archive or part raises :class:`~rock_core.errors.SandboxNotFound`; a failure of the
    storage backend raises :class:`~rock_core.errors.InternalServerRockError` (or a subclass),
    raised ``from`` the backend's exception.
    """

    #: The name the store is registered and configured under (``"s3"``).
    name: ClassVar[str]

    @abc.abstractmethod
    async def put(self, sandbox_id: str, part: str, data: AsyncIterable[bytes]) -> None:
        """Store the stream ``data`` as ``part`` of the sandbox's archive, replacing any previous one.

        Nothing is visible under that name until the whole stream is stored: a failed ``put``
        leaves no partial part behind.
        """

    @abc.abstractmethod
    async def get(self, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        """Return a stream of the bytes stored as ``part`` of the sandbox's archive."""

    @abc.abstractmethod
    async def exists(self, sandbox_id: str, part: str) -> bool:
        """Whether ``part`` of the sandbox's archive is stored."""

    @abc.abstractmethod
    async def delete(self, sandbox_id: str) -> None:
        """Delete every part of the sandbox's archive; deleting what is not there is not an error."""

    async def aclose(self) -> None:
        """Release the store's clients and connections. Idempotent; the default holds nothing."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
