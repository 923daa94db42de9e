"""The contract an archive store plugin implements: :class:`ArchiveStore`.

When a stopped sandbox is archived, the engine streams what it keeps of it (the runtime's
filesystem snapshot, the log directory) into an archive store, one named *part* per stream, and
removes the unit. Restoring streams the parts back. Plugins register store classes with the
``rock_register_archive_stores`` hook.

:class:`rock_core.testing.ArchiveStoreConformance` checks a store against this contract;
:class:`rock_core.archive_fs.FilesystemArchiveStore` is rock-core's own store, on a local
filesystem.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable, AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar

from rock_core.errors import InvalidParameter

if TYPE_CHECKING:
    from typing import Self

__all__ = ["ArchiveStore", "check_archive_address"]


def check_archive_address(sandbox_id: str, part: str | None = None) -> None:
    """Refuse a sandbox id or part name that cannot name one archive on its own.

    Stores lay archives out as ``<sandbox_id>/<part>`` (a folder, an object key), so each must be
    one non-empty segment: no ``/`` or ``\\``, no NUL, not ``.`` or ``..``, and not starting
    with ``.`` (stores keep their unfinished writes under such names).

    :raises InvalidParameter: naming ``sandbox_id`` or ``part`` and the value.
    """
    for field, value in (("sandbox_id", sandbox_id), ("part", part)):
        if value is None and field == "part":
            continue
        if (
            not isinstance(value, str)
            or not value
            or value.startswith(".")
            or any(c in value for c in "/\\\0")
        ):
            raise InvalidParameter(
                f"{field}: {value!r} cannot name an archive: it must be one non-empty path segment, "
                "without '/', '\\' or NUL, not starting with '.'",
                field=field,
                value=value,
                sandbox_id=sandbox_id if field == "part" else None,
                attempted="archive",
            )


class ArchiveStore(abc.ABC):
    """Abstract base of every archive store: where archived sandboxes are kept.

    An archive is addressed by sandbox id and holds named parts (the engine uses ``"rootfs"`` for
    the runtime's snapshot and ``"logs"`` for the log directory). The store treats the bytes as
    opaque. The engine builds a store with keyword arguments taken from its configuration
    section (``cls(**settings)``) and closes it with :meth:`aclose`.

    A missing archive or part raises :class:`~rock_core.errors.SandboxNotFound`; a failure of the
    storage backend raises :class:`~rock_core.errors.InternalServerRockError` (or a subclass),
    raised ``from`` the backend's exception; a sandbox id or part that cannot name an archive
    raises :class:`~rock_core.errors.InvalidParameter` (:func:`check_archive_address`).

    What every store guarantees (:class:`rock_core.testing.ArchiveStoreConformance` checks it):

    - streams of any size pass in bounded memory, both ways;
    - a part is visible (``exists``, ``get``) only once its ``put`` has stored all of it; a
      ``put`` that fails or is cancelled before that, whatever the cause, leaves nothing, and
      leaves a part it was replacing as it was;
    - ``delete`` removes whatever is stored for the sandbox, parts and unfinished writes alike
      (those of a put that is in flight, or of a process that died while putting);
    - puts of different parts and sandboxes may run at once; of two puts of one part at once,
      the part ends up as one of them, whole.
    """

    #: The name the store is registered and configured under (``"s3"``).
    name: ClassVar[str]

    @abc.abstractmethod
    async def put(self, sandbox_id: str, part: str, data: AsyncIterable[bytes]) -> None:
        """Store the stream ``data`` as ``part`` of the sandbox's archive, replacing any previous one.

        Nothing is visible under that name until the whole stream is stored: a failed ``put``
        leaves no partial part behind, and the previous part, if any, as it was. An exception
        the stream ``data`` raises propagates unchanged (after the unfinished write is removed).
        """

    @abc.abstractmethod
    async def get(self, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        """Return a stream of the bytes stored as ``part`` of the sandbox's archive.

        :raises SandboxNotFound: here, not when the stream is read, when the part is not stored.
        """

    @abc.abstractmethod
    async def exists(self, sandbox_id: str, part: str) -> bool:
        """Whether ``part`` of the sandbox's archive is stored."""

    @abc.abstractmethod
    async def delete(self, sandbox_id: str) -> None:
        """Delete every part of the sandbox's archive, and any unfinished write of one (a put in
        flight then fails, or its part is visible once it returns); deleting what is not there
        is not an error."""

    async def names(self, prefix: str) -> list[str] | None:
        """The sandbox ids of the archives stored whose id starts with ``prefix`` (unfinished
        writes aside), sorted; ``None`` (the default) when the store cannot list them. The
        engine lists snapshots kept only in the store with it."""
        return None

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
