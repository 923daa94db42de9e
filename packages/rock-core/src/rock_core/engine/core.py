"""The engine's core: what every job of the engine stands on, and the one way a record changes.

:class:`EngineCore` holds the engine's state and its parts: the settings
(:class:`~rock_core.engine.config.EngineConfig`), the runtime, the plugins, the archive store,
the records (a :class:`~rock_core.records.RecordStore`: SQLite by default), a
:class:`~rock_core.engine.live.LiveSandbox` per sandbox not deleted, the fair start queue, the
warm pools, the port forwards, the removal queue, and, while the engine is open, its task group
and the HTTP client of the rocklets. Its methods are the phase changes (:meth:`EngineCore.apply`:
the state machine of :mod:`rock_core.states`, written to the store at once and announced to
plugins with ``rock_sandbox_transition``; :meth:`~EngineCore.save`; :meth:`~EngineCore.set_phase`),
the reads of a sandbox's record and status, and the bookkeeping of calls in flight.

Each job of the engine (:mod:`~rock_core.engine.starting`, :mod:`~rock_core.engine.stopping`,
...) is a set of functions that receive the core; the facade,
:class:`~rock_core.engine.manager.SandboxManager`, builds the core and calls the jobs. Nothing
here imports a job.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import attrs
import httpx

from rock_core._evolve import evolve
from rock_core.engine import fencing
from rock_core.engine.config import EngineConfig
from rock_core.engine.forwarding import PortForwards
from rock_core.engine.leadership import LEASE_TTL, Role
from rock_core.engine.live import (
    LABEL_ENGINE,
    LABEL_ENGINE_ID,
    LABEL_OWNER,
    LABEL_SANDBOX_ID,
    LiveSandbox,
    now,
    restart_reason,
)
from rock_core.engine.owners import LABEL_OWNER_HOST, host_identity
from rock_core.engine.pool import WarmPool
from rock_core.engine.removals import Removals
from rock_core.engine.settle_waits import Changes
from rock_core.engine.start_queue import StartQueue
from rock_core.errors import InvalidParameter, SandboxNotFound
from rock_core.models import Phase, PhaseStatus, SandboxRecord, SandboxStatus
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.rocklet_delivery import RockletDelivery, prepare_rocklet
from rock_core.runtime import Runtime
from rock_core.states import LIVE_STATES, Event, State

if TYPE_CHECKING:
    from rock_core.archive import ArchiveStore
    from rock_core.leadership import Leadership
    from rock_core.plugins import Plugins
    from rock_core.records import RecordStore

__all__ = ["Call", "EngineCore", "next_deadline", "with_phases"]


log = logging.getLogger(__name__)

_NOT_OPEN = "the engine is not open: use `async with SandboxManager(...)`"
_FINISHED = (PhaseStatus.SUCCESS, PhaseStatus.FAILED, PhaseStatus.TIMEOUT)


class EngineCore:
    """The engine's state and parts, shared by its jobs (see the module docstring).

    :param config: the engine's settings.
    :param runtime: where sandboxes' units run.
    :param plugins: whom transitions are announced to.
    :param archive_store: where archives go (``None``: archiving is off).
    :param store: where the records are kept (opened by :meth:`open`, closed last).
    :param owner: the ``rock.owner`` label of the units this engine makes.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        runtime: Runtime,
        plugins: Plugins,
        archive_store: ArchiveStore | None,
        store: RecordStore,
        owner: str,
    ) -> None:
        self.config = config
        # In a cluster, work of a leader whose lease lapsed cannot reach the runtime.
        self.runtime = runtime if config.cluster is None else fencing.guarded(runtime)
        self.plugins = plugins
        self.archive_store = archive_store
        self.owner = owner
        #: Tells this engine's units from those of another engine in the same process.
        self.engine_id = uuid.uuid4().hex
        self.store = store
        self.queue = StartQueue(
            config.max_concurrent_starts, aging_seconds=config.queue_aging_seconds
        )
        #: What is held in memory per sandbox not deleted, by sandbox id.
        self.live: dict[str, LiveSandbox] = {}
        #: The warm pools by key, and the scope that cancels each one's filling.
        self.pools: dict[str, WarmPool] = {}
        self.pool_scopes: dict[str, anyio.CancelScope] = {}
        #: Host ports the engine serves for sandboxes' ports (see rock_core.engine.forwarding).
        self.forwards = PortForwards()
        self.removals = Removals(
            runtime, self.queue, self.live, remove_on_close=config.remove_on_close
        )
        #: Held by an egress update and by the egress reconcile, one at a time: a reconcile
        #: that read the policies before an update would put the old one back after it.
        self.egress_changes = anyio.Lock()
        #: The rocklet the runtime brings into its units (made when the engine opens).
        self.rocklet_delivery: RockletDelivery | None = None
        #: Called with the seconds from request to running of every start (the admin's histogram).
        self.start_observers: list[Callable[[float], None]] = []
        #: The sandboxes that changed, for waits on many (engine/settle_waits.py).
        self.changes = Changes()
        #: The timers' heap (engine/timers.py): ``(when, sandbox_id)``, a moment no later than
        #: the sandbox's next deadline (idle stop, auto-delete, auto-archive), pushed at each
        #: change of its record (:meth:`watch`); entries outdated since are checked and dropped.
        self.deadlines: list[tuple[float, str]] = []
        #: The earliest entry each sandbox has in :attr:`deadlines`: a later one is not pushed
        #: (the earlier one finds it), so the heap holds about one entry per sandbox however
        #: often its record changes (a reset per episode).
        self.watched: dict[str, float] = {}
        #: Set once the engine begins to close: no new work is given to its task group.
        self.closed = False
        self._in_flight: dict[str, int] = {}  # calls running now, per sandbox (no idle stop)
        self._in_flight_lock = threading.Lock()  # calls begin and end in callers' threads too
        self._http: httpx.AsyncClient | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        #: The tasks of :meth:`start_soon` not ended yet, each with the cancel scope it runs in
        #: (cancelled and awaited with the task group at the close).
        self._tasks: dict[asyncio.Task[None], anyio.CancelScope] = {}
        self._tasks_cancelled = False
        #: The lease of this engine's cluster (``config.cluster``), once open; else ``None``.
        self.lease: Leadership | None = None
        #: What this engine is in its cluster (leader or follower), while open in one.
        self.role: Role | None = None
        #: A follower's clients of the sandboxes it called into (engine/following.py).
        self.followed: dict[str, RockletClient] = {}
        #: Calls into sandboxes this engine does not hold, not yet reported to the leader.
        self._unreported: dict[str, float] = {}

    # -- opening and closing ------------------------------------------------------------------

    async def open(self) -> anyio.abc.TaskGroup:
        """Open the record store (and take its lease's handle, in a cluster), make the rocklet
        delivery and the HTTP client, enter the task group; return it. A store that cannot be
        opened closes the engine's parts."""
        try:
            await anyio.to_thread.run_sync(self.store.open)
            self.lease = await anyio.to_thread.run_sync(self._lease)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close_parts()
            raise
        self.rocklet_delivery = await anyio.to_thread.run_sync(
            functools.partial(prepare_rocklet, url=self.config.rocklet_url)
        )
        self.runtime.use_rocklet(self.rocklet_delivery)
        self._http = new_http_client(max_answer=self.config.max_rocklet_answer)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self.forwards.serve_in(tg)
        return tg

    def _lease(self) -> Leadership | None:
        """The lease of ``config.cluster`` the store offers (``None``: no cluster).

        :raises InvalidParameter: naming ``cluster``: the record store holds no lease (SQLite).
        """
        cluster = self.config.cluster
        if cluster is None:
            return None
        lease = self.store.leadership(
            f"cluster:{cluster}", self.engine_id, LEASE_TTL, self.config.cluster_address
        )
        if lease is None:
            raise InvalidParameter(
                f"cluster: {cluster!r} needs a record store that holds a lease (store = "
                f'"postgresql://..."); {type(self.store).__name__} does not',
                field="cluster",
                value=cluster,
            )
        return lease

    async def cancel_tasks(self) -> None:
        """Cancel the task group's work and wait for it to end (at close)."""
        self.closed = True
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
            self._tasks_cancelled = True
            tasks = list(self._tasks)
            for scope in self._tasks.values():
                scope.cancel()
            await self._tg.__aexit__(None, None, None)
            if tasks:
                await asyncio.wait(tasks)

    async def close_parts(self) -> None:
        """Close the HTTP client, the archive store, the runtime and the records (last at close)."""
        if self._http is not None:
            await self._http.aclose()
        if self.archive_store is not None:
            await self.archive_store.aclose()
        await self.runtime.aclose()
        self.store.close()

    @property
    def is_open(self) -> bool:
        """Whether the task group takes work (the engine is open and not closing)."""
        return self._tg is not None and not self.closed

    @property
    def opened(self) -> bool:
        """Whether the engine was ever opened (its task group entered)."""
        return self._tg is not None

    @property
    def http(self) -> httpx.AsyncClient:
        """The pooled HTTP client for rocklets (only while the engine is open)."""
        if self._http is None:
            raise RuntimeError(_NOT_OPEN)
        return self._http

    def task_group(self, *, while_closing: bool = False) -> anyio.abc.TaskGroup:
        """The engine's task group, for work that outlives a call; raises unless the engine is
        open (``while_closing``: or closing, its task group not yet cancelled: the work of a
        transition already made then runs until the close cancels it)."""
        if self._tg is None or (self.closed and not while_closing):
            raise RuntimeError(_NOT_OPEN)
        return self._tg

    def start_soon(
        self,
        func: Callable[..., Coroutine[Any, Any, None]],
        *args: Any,
        while_closing: bool = False,
    ) -> None:
        """Run ``func(*args)`` as work of the engine's task group (:meth:`task_group`, which
        raises unless the engine is open): on asyncio as a plain task in a cancel scope of its
        own, which the close cancels with the task group and waits for (anyio's ``start_soon``
        costs several times asyncio's own task: about 5 % of the admin's CPU in a burst of
        starts); else in the task group. What escapes ``func`` is logged."""
        tg = self.task_group(while_closing=while_closing)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another async library
            loop = None
        if loop is None or self._tasks_cancelled:  # cancelled: the task group's own semantics
            tg.start_soon(func, *args)
            return
        scope = anyio.CancelScope()
        task = loop.create_task(_in_scope(scope, func, args))
        self._tasks[task] = scope
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        del self._tasks[task]
        if not task.cancelled() and task.exception() is not None:
            log.error("engine task %s failed", task.get_coro(), exc_info=task.exception())

    def labels(self, sandbox_id: str | None) -> dict[str, str]:
        """The labels of a unit this engine makes (for ``sandbox_id``; ``None``: a pool member)."""
        labels = {
            LABEL_ENGINE: self.config.engine_label,
            LABEL_OWNER: self.owner,
            LABEL_ENGINE_ID: self.engine_id,
            LABEL_OWNER_HOST: host_identity(),  # judges an admin's folder (engine.owners)
        }
        if sandbox_id is not None:
            labels[LABEL_SANDBOX_ID] = sandbox_id
        return labels

    # -- records and transitions --------------------------------------------------------------

    def apply(self, record: SandboxRecord, event: Event, **changes: Any) -> SandboxRecord:
        """Fire ``event`` on ``record``, save the result, announce it; a no-op changes nothing.

        :raises InvalidTransition: ``event`` is not allowed in the record's state.
        """
        old = record.state
        # ``record.lifecycle`` builds a new value on every read: keep the one applied to, which
        # a no-op (stop twice, delete twice) returns as it is.
        current = record.lifecycle
        lifecycle = current.apply(event, at=now(), sandbox_id=record.sandbox_id)
        if lifecycle is current:
            return record
        new = evolve(record, state=lifecycle.state, state_history=lifecycle.history, **changes)
        if not self.save(new):
            return record
        self.plugins.notify_transition(new, event, old, new.state)
        self.changes.note(new.sandbox_id)  # wakes the waits on many sandboxes
        return new

    def save(self, record: SandboxRecord, *, progress: bool = False) -> bool:
        """Write ``record`` to the store and to its live sandbox (forgotten once deleted).

        Work of a leader (:mod:`~rock_core.engine.fencing`) writes under its lease: once the
        lease is gone nothing is written, here or in the store; false then. ``progress``: a
        step of a fresh start within ``pending`` that recovery finds again by the unit's labels
        (:meth:`RecordStore.put_progress <rock_core.records.RecordStore.put_progress>`); under
        a lease it is written as any other."""
        fence = fencing.current()
        if fence is None:
            if progress and self.lease is None:  # a cluster's records: every step written
                self.store.put_progress(record)
            else:
                self.store.put(record)
        elif not fence.write(record):
            return False
        live = self.live.get(record.sandbox_id)
        if live is not None:
            live.record = record  # also once deleted: whoever holds it (a waiting delete) sees it
        if record.state is State.DELETED:
            self.live.pop(record.sandbox_id, None)
        elif live is not None:
            self.watch(live)
        return True

    def watch(self, live: LiveSandbox, not_before: float | None = None) -> None:
        """Put the sandbox's next deadline in the timers' heap (:attr:`deadlines`), if it has
        one: a running sandbox's idle stop (from its last activity; later activity only moves
        it later, which the timers find when they get there), a stopped one's auto-delete or
        auto-archive. A paused sandbox whose idle clock is held has none until it resumes (a
        record change). ``not_before``: the entry is no earlier than that (the timers' next look)."""
        at = next_deadline(live, self.config.idle_counts_paused)
        if at is None:
            return
        if not_before is not None:
            at = max(at, not_before)
        sandbox_id = live.record.sandbox_id
        held = self.watched.get(sandbox_id)
        if held is not None and held <= at:
            return  # an entry no later than this one is in the heap already
        self.watched[sandbox_id] = at
        heapq.heappush(self.deadlines, (at, sandbox_id))

    def set_phase(
        self,
        sandbox_id: str,
        name: str,
        status: PhaseStatus,
        message: str = "",
        *,
        progress: bool = False,
    ) -> None:
        """Record the phase ``name`` of a live sandbox's start as ``status`` (saved at once;
        ``progress``: as :meth:`save`'s)."""
        live = self.live.get(sandbox_id)
        if live is None:
            return
        phases = with_phases(live.record.phases, {name: (status, message)})
        self.save(evolve(live.record, phases=phases), progress=progress)

    def get_record(self, sandbox_id: str) -> SandboxRecord:
        """The current record of ``sandbox_id`` (any state).

        :raises SandboxNotFound: no sandbox has ever had this id here.
        """
        live = self.live.get(sandbox_id)
        if live is not None:
            return live.record
        record = self.store.get(sandbox_id)
        if record is None:
            raise SandboxNotFound(
                f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted="get_status"
            )
        return record

    def known(self, sandbox_id: str) -> SandboxRecord | None:
        """The record a live sandbox holds now (``None``: not live), for listings."""
        live = self.live.get(sandbox_id)
        return None if live is None else live.record

    def live_or_load(self, sandbox_id: str) -> LiveSandbox | None:
        """The sandbox's :class:`LiveSandbox`; an archived one only in the record store (archived by
        another process sharing it, or before a restart) is taken in. ``None``: unknown or deleted."""
        live = self.live.get(sandbox_id)
        if live is not None:
            return live
        record = self.store.get(sandbox_id)
        if record is None or record.state is not State.ARCHIVED:
            return None
        live = LiveSandbox(record=record)
        live.start_done.set()
        live.settled.set()
        self.live[sandbox_id] = live
        return live

    # -- status ---------------------------------------------------------------------------------

    def status_of(self, record: SandboxRecord) -> SandboxStatus:
        """What the engine knows of ``record``'s sandbox now: its queue position and idle deadline."""
        position = self.queue.position(record.sandbox_id) if record.state is State.PENDING else None
        return self.status(record, position)

    def status(self, record: SandboxRecord, position: int | None) -> SandboxStatus:
        """``record``'s status with its queue ``position`` given (a listing walks the queue once).
        A sandbox that crashed and waits out its restart policy's back-off is shown pending, its
        reason saying why (:mod:`rock_core.engine.crash_restarts`), not stopped: it is coming back."""
        if record.state is State.STOPPED:
            live = self.live.get(record.sandbox_id)
            # The engine that holds it knows at once (a stop cancels the restart); another
            # admin of a cluster reads the restart the record plans.
            why = live.coming_back if live is not None else restart_reason(record)
            if why is not None:
                record = attrs.evolve(record, state=State.PENDING, reason=why)
        deadline = usage = None
        clear = record.spec.auto_clear_seconds
        if (
            record.state in LIVE_STATES
            and clear
            and not (record.paused and not self.config.idle_counts_paused)
        ):
            live = self.live.get(record.sandbox_id)
            activity = live.activity if live is not None else time.time()
            if live is not None and self.busy(record.sandbox_id):
                activity = max(activity, time.time())  # a call in flight is activity until it ends
            deadline = datetime.fromtimestamp(activity + clear, UTC)
        if record.state is State.RUNNING:
            live = self.live.get(record.sandbox_id)
            usage = live.usage if live is not None else None
        return SandboxStatus(
            record=record, queue_position=position, idle_deadline=deadline, usage=usage
        )

    # -- units ----------------------------------------------------------------------------------

    def claimed_units(self) -> set[str]:
        """The unit ids sandboxes hold, by the records (of this owner, not deleted) and in memory:
        a warm-pool unit among them is claimed even where the runtime did not rename it."""
        held = {live.handle.unit_id for live in self.live.values() if live.handle is not None}
        states = [State.PENDING, State.RUNNING, State.STOPPED, State.ARCHIVING]
        held.update(
            r.unit_id
            for r in self.store.list(states=states, filters={"owner": self.owner})
            if r.unit_id
        )
        return held

    def sandbox_of_unit(self, unit_id: str, hint: str | None = None) -> str | None:
        """The sandbox whose unit is ``unit_id`` (``None``: none this engine holds).

        ``hint``: the sandbox the unit names (its label); when that sandbox holds it, the answer
        costs one lookup. Only a claimed warm-pool unit the runtime could not rename names
        another, and is found by a scan."""
        live = self.live.get(hint) if hint else None
        if live is not None and live.handle is not None and live.handle.unit_id == unit_id:
            return hint
        for sandbox_id, live in self.live.items():
            if live.handle is not None and live.handle.unit_id == unit_id:
                return sandbox_id
        return None

    # -- calls in flight ------------------------------------------------------------------------

    def call_began(self, sandbox_id: str) -> None:
        """A call to ``sandbox_id`` began (from any thread): no idle stop until it ends."""
        with self._in_flight_lock:
            self._in_flight[sandbox_id] = self._in_flight.get(sandbox_id, 0) + 1
        self.touch(sandbox_id)

    def call_ended(self, sandbox_id: str) -> None:
        """A call to ``sandbox_id`` ended (from any thread); its end counts as activity."""
        with self._in_flight_lock:
            left = self._in_flight.get(sandbox_id, 1) - 1
            if left > 0:
                self._in_flight[sandbox_id] = left
            else:
                self._in_flight.pop(sandbox_id, None)
        self.touch(sandbox_id)

    def busy(self, sandbox_id: str) -> bool:
        """Whether a call to ``sandbox_id`` is running now (the idle timer waits for its end)."""
        with self._in_flight_lock:
            return bool(self._in_flight.get(sandbox_id))

    def touch(self, sandbox_id: str) -> None:
        """Count activity on ``sandbox_id`` (resets its idle timer). In a cluster, a sandbox
        this engine does not hold is the leader's: its activity is reported to it
        (engine/following.py); elsewhere unknown ids are ignored."""
        live = self.live.get(sandbox_id)
        if live is not None:
            live.activity = time.time()
        elif self.lease is not None:
            with self._in_flight_lock:
                self._unreported[sandbox_id] = time.time()

    def take_unreported(self) -> dict[str, float]:
        """The activity of sandboxes this engine does not hold, since the last take."""
        with self._in_flight_lock:
            taken, self._unreported = self._unreported, {}
        return taken

    def unreport(self, activity: dict[str, float]) -> None:
        """Put back activity a report failed to deliver (newer activity wins)."""
        with self._in_flight_lock:
            for sandbox_id, at in activity.items():
                self._unreported[sandbox_id] = max(at, self._unreported.get(sandbox_id, at))

    def calls_in_flight(self) -> list[str]:
        """The sandboxes a call is running in now."""
        with self._in_flight_lock:
            return list(self._in_flight)


def next_deadline(live: LiveSandbox, idle_counts_paused: bool) -> float | None:
    """The moment (``time.time()``) the timers next look at ``live`` (see
    :meth:`EngineCore.watch`), or ``None``: nothing of its record is due to happen by itself."""
    record = live.record
    if record.state is State.RUNNING:
        clear = record.spec.auto_clear_seconds
        if not clear or (record.paused and not idle_counts_paused):
            return None
        return live.activity + clear
    if (
        record.state is State.STOPPED
        and record.auto_transition_state in (State.DELETED, State.ARCHIVED)
        and record.auto_transition_time is not None
    ):
        return record.auto_transition_time.timestamp()
    return None


def with_phases(
    phases: dict[str, Phase], changes: dict[str, tuple[PhaseStatus, str]]
) -> dict[str, Phase]:
    """``phases`` with each phase named in ``changes`` set to its ``(status, message)``, as
    :meth:`EngineCore.set_phase` records one: started when it first runs (or finishes without
    running), completed when it finishes. Several changes made at once are one record (one
    write) instead of one each."""
    phases = dict(phases)
    at = now()
    for name, (status, message) in changes.items():
        old = phases.get(name)
        started = old.started_at if old is not None and old.started_at is not None else None
        if status is PhaseStatus.RUNNING or (started is None and status is not PhaseStatus.WAITING):
            started = started or at
        completed = at if status in _FINISHED else None
        phases[name] = Phase(
            status=status, message=message, started_at=started, completed_at=completed
        )
    return phases


class Call:
    """What :meth:`SandboxManager.call <rock_core.engine.manager.SandboxManager.call>` returns:
    a context manager, sync or async, around one call to a sandbox (no idle stop while it runs)."""

    __slots__ = ("_core", "_sandbox_id")

    def __init__(self, core: EngineCore, sandbox_id: str) -> None:
        self._core = core
        self._sandbox_id = sandbox_id

    def __enter__(self) -> None:
        self._core.call_began(self._sandbox_id)

    def __exit__(self, *exc_info: object) -> None:
        self._core.call_ended(self._sandbox_id)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


async def _in_scope(
    scope: anyio.CancelScope, func: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]
) -> None:
    """``func(*args)`` within ``scope`` (the task of :meth:`EngineCore.start_soon`)."""
    with scope:
        await func(*args)
