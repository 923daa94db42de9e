"""Following: what an engine of a cluster does for its clients while another engine leads
(issue #24 point 2).

Every engine of a cluster serves calls into any sandbox of the cluster. The leader holds its
sandboxes in memory (:attr:`EngineCore.live <rock_core.engine.core.EngineCore.live>`); a
follower holds none: it reads each sandbox's record from the shared store when it is called,
and reaches a running sandbox's rocklet at the address and with the secret its record keeps
(:func:`client`). So a sandbox the leader started is driven through any follower, and a
follower never answers from a stale copy: the record it reads is the one the leader wrote.

What only the leader may do (starts, stops, deletions, restarts, archives, pools) never runs
on a follower: its host hands such calls to the leader (the admin forwards them), and the
engine refuses them itself (:func:`leader_only`) when one reaches it anyway.

Calls a follower serves are activity of their sandboxes, which the leader's idle timers count:
:func:`report_loop` reports them through the lease (:meth:`Leadership.report_activity
<rock_core.leadership.Leadership.report_activity>`) every :data:`REPORT_INTERVAL` seconds,
with the sandboxes a call is still running in counted as active now; the leader reads them
back before it stops a sandbox as idle (:func:`reported_activity`).

When a leader loses its lease, :func:`forget` drops what it held in memory: from then on it
reads the store as every follower does, and takes the sandboxes back by recovery if it leads
again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar

import anyio

from rock_core.engine import fencing, pausing
from rock_core.engine.core import EngineCore
from rock_core.engine.live import not_running_error
from rock_core.errors import InternalServerRockError, RockError, SandboxNotFound
from rock_core.rocklet_client import RockletClient
from rock_core.states import State

__all__ = [
    "REPORT_INTERVAL",
    "leader_only_call",
    "NotLeader",
    "client",
    "forget",
    "leader_only",
    "report_loop",
    "reported_activity",
]

log = logging.getLogger("rock.engine")

#: Seconds between a member's reports of the calls it served.
REPORT_INTERVAL = 1.0
#: The most rocklet clients a follower keeps (cheap to make again: the HTTP pool is the
#: engine's).
MAX_FOLLOWED = 4096
#: Seconds a call only the leader makes waits for a new leader's recovery.
RECOVERY_WAIT = 60.0


class NotLeader(InternalServerRockError):
    """A call only the cluster's leader makes reached an engine that does not lead now."""


def client(core: EngineCore, sandbox_id: str, attempted: str) -> RockletClient:
    """The rocklet client of a running sandbox of the cluster, by its record in the store.

    :raises SandboxNotFound: unknown id, or not running (with its state and reason).
    :raises BadRequestRockError: still starting.
    """
    record = core.store.get(sandbox_id)
    if record is None:
        raise SandboxNotFound(
            f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted=attempted
        )
    address, token = record.rocklet_address, record.rocklet_token
    if record.state is not State.RUNNING or address is None:
        core.followed.pop(sandbox_id, None)
        raise not_running_error(record, attempted)
    if record.paused:
        raise pausing.paused_error(record, attempted)
    known = core.followed.get(sandbox_id)
    if known is not None and (known.host, known.port, known.token) == (*address, token):
        return known
    if len(core.followed) >= MAX_FOLLOWED:  # sandboxes gone without a last call: start afresh
        core.followed.clear()
    found = core.followed[sandbox_id] = RockletClient(core.http, *address, sandbox_id, token=token)
    return found


@contextlib.asynccontextmanager
async def leader_only(core: EngineCore, attempted: str) -> AsyncIterator[None]:
    """Around a call only the leader makes: outside a cluster, nothing; in one, refused unless
    this engine leads now, held until this term's recovery took the cluster's sandboxes back
    (a stop right after a takeover must find its sandbox), and made under the leader's fence
    (its runtime calls and writes, and those of the tasks it starts, stop once the lease
    lapses)."""
    role = core.role
    if role is None:
        yield
        return
    fence = role.fence
    if fence is not None and fence.valid() and not role.recovered.is_set():
        with anyio.move_on_after(RECOVERY_WAIT):
            await role.recovered.wait()
    if fence is None or not fence.valid() or role.fence is not fence or not role.recovered.is_set():
        raise NotLeader(
            f"this admin does not lead cluster {core.config.cluster!r} now: send {attempted} "
            f"to the leader (any admin of the cluster forwards it)",
            attempted=attempted,
        )
    token = fencing.entered(fence)
    try:
        yield
    finally:
        fencing.left(token)


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def leader_only_call(method: F) -> F:
    """A facade method only the leader makes (``self._core``: the engine's core): in a cluster
    it is refused unless this engine leads, and runs under its fence (:func:`leader_only`)."""

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        async with leader_only(self._core, method.__name__):
            return await method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


def forget(core: EngineCore) -> None:
    """A leader lost its lease: cancel what it was doing for its sandboxes and drop them from
    memory (the new leader took them over through the store)."""
    for live in core.live.values():
        for scope in (live.start_scope, live.restart_scope, live.archive_scope):
            if scope is not None:
                scope.cancel()
        live.settled.set()
        live.start_done.set()
    dropped = len(core.live)
    core.live.clear()
    core.pools.clear()
    core.followed.clear()
    log.warning("no longer the leader: %d sandboxes left to the new one", dropped)


async def report_loop(core: EngineCore) -> None:
    """For the engine's life in a cluster: report the calls it served every
    :data:`REPORT_INTERVAL` seconds (a store that fails is tried again on the next round)."""
    lease = core.lease
    assert lease is not None
    while True:
        await anyio.sleep(REPORT_INTERVAL)
        now = time.time()
        activity = core.take_unreported()
        for sandbox_id in core.calls_in_flight():
            activity[sandbox_id] = now  # a long call is activity until it ends
        if not activity:
            continue
        try:
            await anyio.to_thread.run_sync(lease.report_activity, activity)
        except RockError as exc:
            log.warning("could not report the activity of %d sandboxes: %s", len(activity), exc)
            core.unreport(activity)


async def reported_activity(core: EngineCore, sandbox_ids: Collection[str]) -> dict[str, float]:
    """The activity other members reported of ``sandbox_ids`` (none outside a cluster, or
    when the store fails: the engine's own count stands)."""
    lease = core.lease
    if lease is None or not sandbox_ids:
        return {}
    try:
        return await anyio.to_thread.run_sync(lease.activity, list(sandbox_ids))
    except RockError as exc:
        log.warning("could not read the reported activity of sandboxes: %s", exc)
        return {}
