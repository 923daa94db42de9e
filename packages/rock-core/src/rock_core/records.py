"""The seam for the engine's records: where every sandbox's :class:`~rock_core.models.SandboxRecord`
is kept.

:class:`RecordStore` is the contract. rock-core's own implementation is SQLite
(:class:`rock_core.engine.store.SqliteRecordStore`: a file, ``store_path``, or memory); a plugin
adds others with the ``rock_register_record_stores`` hook, each under the scheme of the URL that
selects it (``[engine] store = "postgresql://..."``: rock-postgres). The conformance suite
:class:`rock_core.testing.RecordStoreConformance` checks a store against this contract.

The calls are synchronous: the engine writes a record through on its event loop at every
change, so a store's call must be short (a local database: tens of microseconds; a server over
a socket: a round trip). A store that needs an event loop of its own runs it on a thread of its
own (rock-postgres does).

Besides the class, this module holds what every store's errors share: the URL with its password
masked (:func:`mask_url`), the refusal of a newer schema (:func:`newer_schema`) and the error of
a store that cannot be reached (:class:`StoreUnavailable`).
"""

from __future__ import annotations

import abc
import builtins
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.models import SandboxRecord
from rock_core.states import State

if TYPE_CHECKING:
    from rock_core.leadership import Leadership

__all__ = [
    "FILTER_FIELDS",
    "RecordStore",
    "StoreUnavailable",
    "check_filters",
    "mask_url",
    "newer_schema",
    "store_scheme",
]

#: Fields a listing can filter on (exact match), as ROCK's ``GET /sandboxes``.
FILTER_FIELDS = ("user_id", "experiment_id", "namespace", "cluster", "image", "state", "owner")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_PASSWORD = re.compile(r"([^/:@]*):[^/@]*@")
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)


class RecordStore(abc.ABC):
    """Where the engine keeps its sandbox records. The contract every store keeps:

    - **Write-through.** :meth:`put` returns once the record is durable as far as the store
      promises (:attr:`persistent`): a process killed right after loses nothing it was told was
      written, and a second store opened on the same place reads it at once. (With
      :attr:`group_commits` set, a put on an event loop is durable at its turn's end, or at
      :meth:`commit`.)
    - **One row per sandbox**, replaced whole by each :meth:`put`; rows are never deleted by the
      lifecycle (a deleted sandbox keeps its row in state ``deleted``), only by
      :meth:`purge_deleted`.
    - **Everything kept**, the rocklet's secret (``rocklet_token``) included: the store is as
      private as the engine (its file 0600, its server's credentials the operator's).
    - **Forward-readable.** A stored record is read with rock-core's ``store`` converter
      (:func:`rock_core.converters.structure_store`), which skips keys it does not know: an
      older rock reads what a newer one wrote, as long as the schema version allows.
    - **A schema version** recorded in the store itself (:attr:`schema_version`); opening a
      store whose version is newer than the class knows refuses (:func:`newer_schema`).
    - **Thread-safe.** The engine calls from its event loop's thread, the admin's and SDK's
      callers from theirs; concurrent calls from threads must neither fail nor lose a write.

    A plugin's store is built as ``cls(url, **table)``: ``url`` the engine's ``store`` setting,
    ``table`` its plugin's configuration table (``[plugins.<name>]``). Building must not do I/O;
    :meth:`open` connects, and is called once, off the event loop, before any other call.
    """

    #: The version of the layout this class writes and reads; stored in the store.
    schema_version: ClassVar[int] = 1
    #: Whether the store can group its commits (:attr:`group_commits`, :meth:`commit`).
    can_group_commits: ClassVar[bool] = False
    #: Set by the caller (the admin) on a store that :attr:`can_group_commits`: a put made on an
    #: event loop is then written with the other puts of the loop's turn, at its end, in one
    #: write (a record put several times in the turn written once, as last put), and the caller
    #: calls :meth:`commit` before it tells anyone a put was made (the admin: before every
    #: answer), so nothing acknowledged is lost still. A put made off a loop is written at once,
    #: and never undone by an older pending one; a read sees every put. A store hands its write
    #: to :class:`rock_core.record_grouping.GroupedPuts`, which keeps all this.
    group_commits: bool = False

    @property
    @abc.abstractmethod
    def persistent(self) -> bool:
        """Whether the records outlive this process (a file or a server, not memory)."""

    def open(self) -> None:
        """Connect and check the store's schema (make it when new). Called once, off the event
        loop, before any other call; within a bounded time.

        :raises StoreUnavailable: the store cannot be reached (naming the setting, where, why).
        :raises InvalidParameter: naming the setting: the store's schema is newer than this
            rock knows (:func:`newer_schema`), or it is unusable as configured.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store (connections, threads). Idempotent."""

    @abc.abstractmethod
    def put(self, record: SandboxRecord) -> None:
        """Insert or replace ``record`` (keyed by its ``sandbox_id``), durably (write-through)."""

    def put_progress(self, record: SandboxRecord) -> None:
        """:meth:`put` of a step of a start within ``pending`` that a restart finds again
        without it (the rows of progress: the image being pulled, the unit made and starting,
        which recovery finds by its labels). A store that groups its commits may keep it only
        in memory (a read here sees it) until a later put of the record, a listing or a count,
        or :meth:`close` writes it: a crash may lose it, never a put that is not progress.
        The default: :meth:`put`."""
        self.put(record)

    def commit(self) -> None:
        """Write and commit the puts a group has pending (see :attr:`group_commits`); nothing
        when none is (the default: every put is written through).

        :raises StoreUnavailable: the store cannot be reached; the puts stay pending.
        """

    @abc.abstractmethod
    def get(self, sandbox_id: str) -> SandboxRecord | None:
        """The record of ``sandbox_id``, or ``None``."""

    @abc.abstractmethod
    def list(
        self,
        *,
        states: Iterable[State] | None = None,
        filters: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        known: Callable[[str], SandboxRecord | None] | None = None,
    ) -> builtins.list[SandboxRecord]:
        """Records in creation order (``create_time``, then ``sandbox_id``), restricted to
        ``states`` (any of them; an empty iterable: none) and exact-match ``filters``, from
        ``offset``, at most ``limit``.

        :param known: the caller's own copy of a record by id, or ``None``: taken instead of
            reading the stored one (reading it is most of a listing's cost; the engine holds
            every live sandbox's current record in memory).
        :raises ValueError: a filter names a field not in :data:`FILTER_FIELDS`.
        """

    @abc.abstractmethod
    def count(
        self, *, states: Iterable[State] | None = None, filters: Mapping[str, str] | None = None
    ) -> int:
        """How many records :meth:`list` would return without a limit."""

    @abc.abstractmethod
    def count_by_state(self) -> dict[State, int]:
        """Number of records in each state (states with none are left out)."""

    @abc.abstractmethod
    def purge_deleted(self, before: datetime) -> int:
        """Drop the rows of sandboxes deleted (``delete_time``) before ``before``; return how
        many."""

    def leadership(
        self, name: str, holder: str, ttl: float, address: str | None = None
    ) -> Leadership | None:
        """The lease ``name`` (a cluster of engines sharing this store) as ``holder`` sees it,
        each taking or renewal lasting ``ttl`` seconds, ``address`` where the others reach the
        holder while it leads; ``None``: this store holds no lease
        (the default: one engine per store). See :mod:`rock_core.leadership`. Called after
        :meth:`open`, off the event loop; a store that offers it makes what it needs then.
        """
        return None


def check_filters(filters: Mapping[str, str] | None) -> None:
    """Raise the :meth:`RecordStore.list` error for a filter not in :data:`FILTER_FIELDS`."""
    for field in filters or {}:
        if field not in FILTER_FIELDS:
            raise ValueError(
                f"cannot filter sandboxes on {field!r}; filters: {', '.join(FILTER_FIELDS)}"
            )


def mask_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for errors and logs); also in a
    malformed URL (``user:password@`` anywhere), and a ``password=`` parameter."""
    return _PASSWORD_PARAMETER.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))


def store_scheme(url: str) -> str:
    """The scheme of a ``store`` URL (``postgresql``), which names the store that serves it.

    :raises InvalidParameter: naming ``store``: not a URL (``scheme://...``); the value shown
        with its password masked.
    """
    found = _SCHEME.match(url)
    if found is None:
        raise InvalidParameter(
            f"store: {mask_url(url)!r} is not a store URL (scheme://...: "
            f"postgresql://user@host:port/database); leave store unset for SQLite (store_path)",
            field="store",
            value=mask_url(url),
        )
    return found.group(1).lower()


def newer_schema(setting: str, where: str, found: int, known: int) -> InvalidParameter:
    """The refusal of a store whose schema version ``found`` is newer than ``known``.

    :param setting: the setting that chose the store (``store``, ``store_path``).
    :param where: the store, as the user named it (a path, a URL with its password masked).
    """
    return InvalidParameter(
        f"{setting}: the records at {where} have schema version {found}, and this rock knows "
        f"versions up to {known}: a newer rock wrote them; upgrade rock to use them",
        field=setting,
        value=where,
    )


class StoreUnavailable(InternalServerRockError):
    """The record store cannot be reached or answered an error; the message names the setting
    (``store``), where (host and port, or socket) and the reason."""

    def __init__(
        self, message: str, *, setting: str = "store", attempted: str | None = None
    ) -> None:
        super().__init__(message, attempted=attempted)
        self.setting = setting
