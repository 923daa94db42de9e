"""The seam for high availability: which one of several engines sharing a record store is the
leader, the one that runs the engine's background work (issue #24 points 2 and 3).

A record store that can hold a lease offers it (a capability): :meth:`RecordStore.leadership
<rock_core.records.RecordStore.leadership>` answers a :class:`Leadership`, or ``None`` when the
store cannot (SQLite, memory: one engine per store). The engine takes it when its ``cluster``
setting names one (:mod:`rock_core.engine.leadership`).

A lease has a **fencing epoch**: each new holder takes it under a greater epoch, renewing keeps
it. A write made for the leader's background work carries its epoch (:meth:`Leadership.
put_fenced`) and does nothing once another holder took the lease: an old leader that was paused
(``SIGSTOP``) past its lease cannot overwrite what the new leader wrote.

Every engine of a cluster serves clients (issue #24 point 2); what only the leader may do
(starts, stops, deletions, pools) a follower's host hands to the leader's, at the address the
leader put in the lease (:meth:`Leadership.leader`). Calls into a sandbox served by a follower
count as its activity for the leader's idle timers through :meth:`Leadership.report_activity`
and :meth:`Leadership.activity`.

The calls are synchronous and short, like the record store's (the engine runs
:meth:`~Leadership.acquire` and :meth:`~Leadership.renew` off its event loop).
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping

from rock_core.models import SandboxRecord

__all__ = ["Leadership"]


class Leadership(abc.ABC):
    """The lease of one cluster's leader, as seen by one holder (one engine), in a store.

    The contract: at most one holder holds the lease at a time, by the store's clock; a holder
    that takes a free or expired lease gets a greater epoch than any before; a renewal extends
    the lease by :attr:`ttl` seconds only while it is held under the same epoch.
    """

    #: Seconds a taking or renewal lasts.
    ttl: float
    #: Where this holder's peers reach it (an admin's URL), kept with the lease while it holds
    #: it; ``None``: it names none (a cluster of engines without servers).
    address: str | None

    @abc.abstractmethod
    def acquire(self) -> int | None:
        """Take the lease (free, expired, or already this holder's): its epoch, or ``None``
        while another holder's lease has not expired."""

    @abc.abstractmethod
    def renew(self, epoch: int) -> bool:
        """Extend the lease held under ``epoch``; false when it was lost (expired, taken)."""

    @abc.abstractmethod
    def release(self, epoch: int) -> None:
        """Give the lease up at once if held under ``epoch`` (a clean close: no wait for its
        expiry)."""

    @abc.abstractmethod
    def put_fenced(self, record: SandboxRecord, epoch: int) -> bool:
        """Write ``record`` as :meth:`RecordStore.put <rock_core.records.RecordStore.put>` does,
        in one statement with the check that this holder still holds the lease under ``epoch``
        (unexpired): true when written, false (nothing written) when it does not."""

    @abc.abstractmethod
    def leader(self) -> str | None:
        """The address of the holder of the unexpired lease; ``None``: nobody holds it now, or
        its holder named no address."""

    @abc.abstractmethod
    def report_activity(self, activity: Mapping[str, float]) -> None:
        """Record calls into sandboxes this holder served: sandbox id -> the time
        (``time.time()``) of the last; a later report of a sandbox wins over an earlier one."""

    @abc.abstractmethod
    def activity(self, sandbox_ids: Collection[str]) -> dict[str, float]:
        """The latest activity any holder reported of each of ``sandbox_ids`` (those with none
        are left out)."""
