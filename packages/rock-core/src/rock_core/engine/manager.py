"""The engine: :class:`SandboxManager`, the only code that changes a sandbox's state.

Use it as an async context manager; its background work runs in its own task group::

    async with SandboxManager(EngineConfig(), runtime=DockerRuntime()) as engine:
        started = await engine.start_async(SandboxStartRequest(image="python:3.11"))
        status = await engine.wait_until_running(started.sandbox_id)
        client = engine.rocklet(started.sandbox_id, "execute")
        ...
        await engine.stop(started.sandbox_id)

:class:`SandboxManager` is the one facade; it holds the engine's state (the records in a
:class:`~rock_core.records.RecordStore`, a :class:`~rock_core.engine.live.LiveSandbox` per
sandbox not deleted, the fair :class:`~rock_core.engine.start_queue.StartQueue`, the warm pools)
and the one path by which a record changes (:meth:`EngineCore.apply
<rock_core.engine.core.EngineCore.apply>`: the state machine of :mod:`rock_core.states`, written
to the store at once, announced to plugins with ``rock_sandbox_transition``) live in the
engine's core, :class:`~rock_core.engine.core.EngineCore`, which this facade builds and hands
to each job. A job is a module of functions that receive the core; no job imports this module.

Its jobs: :mod:`~rock_core.engine.admission` (what a start may ask for, the unit's spec),
:mod:`~rock_core.engine.bringup` (a unit made, started, ready), :mod:`~rock_core.engine.starting`
(the start pipeline, ``wait_until_running``, ``restart``), :mod:`~rock_core.engine.claims` (warm
pools, claims), :mod:`~rock_core.engine.stopping` (``stop``, ``delete``, the post-stop policy),
:mod:`~rock_core.engine.archiving` (``archive``, restore), :mod:`~rock_core.engine.crash_restarts`
(by restart policy), :mod:`~rock_core.engine.recovery` (taking sandboxes back),
:mod:`~rock_core.engine.pausing` (``pause``, ``resume``),
:mod:`~rock_core.engine.reaping` and :mod:`~rock_core.engine.owners` (orphans, removal at
close), :mod:`~rock_core.engine.timers` (idle stop, auto-delete, the disk watch),
:mod:`~rock_core.engine.reconcile` (the records against the runtime),
:mod:`~rock_core.engine.monitoring` (resource use), :mod:`~rock_core.engine.extensions` (parts
built from plugins), and in a cluster :mod:`~rock_core.engine.leadership` (background work only
while leader) and :mod:`~rock_core.engine.following` (what a member serves while another leads).

It answers with its own types, :class:`~rock_core.models.SandboxRecord` and
:class:`~rock_core.models.SandboxStatus`; the admin and the SDK build ROCK's wire models from them
(:mod:`rock_core.responses`). Commands, files and sessions do not pass through here:
:meth:`SandboxManager.rocklet` hands out a :class:`~rock_core.rocklet_client.RockletClient`
for the sandbox (and counts the call as activity for the idle timer).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx

from rock_core.actions import SandboxStartRequest, WarmPoolStatus
from rock_core.engine import (
    archiving,
    claims,
    commits,
    egress,
    extensions,
    following,
    leadership,
    monitoring,
    pausing,
    reaping,
    reconcile,
    recovery,
    snapshots,
    starting,
    stopping,
    timers,
)
from rock_core.engine.config import EngineConfig
from rock_core.engine.core import Call, EngineCore
from rock_core.engine.episodes import EpisodeState
from rock_core.engine.following import leader_only_call
from rock_core.engine.live import (
    LABEL_ENGINE,
    LABEL_ENGINE_ID,
    LABEL_OWNER,
    LABEL_SANDBOX_ID,
    new_rocklet_token,
    not_running_error,
)
from rock_core.engine.owners import process_owner
from rock_core.engine.settle_waits import SettleWatch
from rock_core.errors import SandboxNotFound
from rock_core.models import RuntimeStatus, SandboxRecord, SandboxStatus, SandboxUsage
from rock_core.rocklet_client import RockletClient
from rock_core.rocklet_delivery import RockletDelivery
from rock_core.runtime import Runtime
from rock_core.states import LIVE_STATES, State
from rock_core.tenancy import Quota, Usage, check_image_by_name, usage_by_tenant

if TYPE_CHECKING:
    from rock_core.envs import Environment, EnvProvider
    from rock_core.plugins import Plugins

__all__ = [
    "LABEL_ENGINE",
    "LABEL_ENGINE_ID",
    "LABEL_OWNER",
    "LABEL_SANDBOX_ID",
    "SandboxManager",
    "new_rocklet_token",
    "process_owner",
]


class SandboxManager(EpisodeState):
    """The engine. See the module docstring.

    :param config: the engine's settings.
    :param runtime: the runtime instance to place sandboxes with (else built from the plugin
        registered under ``config.runtime``).
    :param plugins: the :class:`~rock_core.plugins.Plugins` to announce transitions to and to
        find the runtime in (default: the installed ones).
    :param configured: whether the caller already handed the plugins their tables
        (``rock_configure``); by default the engine does it, from ``config.plugin_options`` and
        ``ROCK_PLUGIN_*`` variables, before it builds the runtime.
    :param owner: the ``rock.owner`` label of the units this engine makes (default: this process).
    """

    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        runtime: Runtime | None = None,
        plugins: Plugins | None = None,
        owner: str | None = None,
        configured: bool = False,
    ) -> None:
        config = config or EngineConfig()
        if plugins is None:
            from rock_core.plugins import Plugins

            plugins = Plugins.load()
        from rock_core.plugins import plugin_tables

        # Each plugin's table, variables on top: what rock_configure got, and what builds the
        # archive store and the environment providers a plugin registered.
        tables = plugin_tables(config.plugin_options, os.environ, plugins.names())
        if not configured:
            plugins.configure(tables)
        archive_store = extensions.build_archive_store(config, plugins, tables)
        self._core = core = EngineCore(
            config,
            runtime=runtime if runtime is not None else extensions.build_runtime(config, plugins),
            plugins=plugins,
            archive_store=archive_store,
            store=extensions.build_record_store(config, plugins, tables),
            owner=owner or process_owner(),
        )
        # The core's parts, as the engine's public attributes (the same objects).
        self.config = core.config
        self.plugins = core.plugins
        self.archive_store = core.archive_store
        self.runtime = core.runtime
        self.owner = core.owner
        #: Tells this engine's units from those of another engine in the same process.
        self.engine_id = core.engine_id
        self.store = core.store
        self.queue = core.queue
        #: Host ports the engine serves for sandboxes' ports (see rock_core.engine.forwarding).
        self.forwards = core.forwards
        self.removals = core.removals
        #: Called with the seconds from request to running of every start (the admin's histogram).
        self.start_observers = core.start_observers
        #: The resource-use sampler's state (engine/monitoring.py).
        self.sampler = monitoring.Sampler()
        self._envs = extensions.EnvProviders(plugins, tables, self)
        self._sweep_done: anyio.Event | None = None  # set once the start-up sweep has finished
        self.role: leadership.Role | None = None  # in config.cluster, while open

    async def make_env(self, env_id: str, **kwargs: Any) -> Environment:
        """Make the environment ``env_id`` with the first registered provider that accepts it
        (``rock_register_env_providers``); providers are built once, as ``cls(engine, **table)``.

        :raises InvalidParameter: no provider serves ``env_id`` (``field="env_id"``).
        """
        return await self._envs.make(env_id, **kwargs)

    @property
    def _env_providers(self) -> dict[str, EnvProvider] | None:
        """The environment providers, once the first :meth:`make_env` built them (for tests)."""
        return self._envs.built

    # -- lifecycle of the engine itself -----------------------------------------------------

    async def __aenter__(self) -> SandboxManager:
        core = self._core
        tg = await core.open()
        tg.start_soon(core.removals.run)
        if core.lease is None:
            await self._background(tg)
        else:  # only while this engine leads its cluster (engine/leadership.py)
            self.role = core.role = leadership.Role(core.lease)
            forget = functools.partial(following.forget, core)
            tg.start_soon(leadership.lead, self.role, self._background, forget)
            tg.start_soon(following.report_loop, core)
        return self

    async def _background(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the background work in ``tg``: the sweep, recovery, warm pools, the loops."""
        core = self._core
        # Orphans and stale pool members go in the background: the first start does not wait.
        self._sweep_done = done = anyio.Event()
        tg.start_soon(reaping.background_sweep, core, done)
        await self.recover()
        if self.role is not None:  # the calls only a leader makes may go on now
            self.role.recovered.set()
        for pool in self.config.warm_pools:
            await self.set_warm_pool(pool.request, pool.size)
        for loop in (timers.timer_loop, reconcile.reconcile_loop, reconcile.watch_loop):
            tg.start_soon(loop, core)
        tg.start_soon(timers.disk_loop, core)
        tg.start_soon(monitoring.monitor_loop, core, self.sampler)

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self, *, remove_sandboxes: bool | None = None) -> None:
        """Stop background work; with ``remove_on_close`` (or ``remove_sandboxes``, which wins
        over it: ``rock admin stop --remove-sandboxes``), remove this engine's sandboxes.
        Idempotent."""
        core = self._core
        if core.closed:
            return
        core.closed = True
        if core.opened:
            # A sweep under way finishes (bounded): what it found should not wait for the next run.
            if self._sweep_done is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                    await self._sweep_done.wait()
            await core.cancel_tasks()
        with anyio.CancelScope(shield=True):
            if self.config.remove_on_close if remove_sandboxes is None else remove_sandboxes:
                await reaping.remove_all_owned(core)
            else:
                await reaping.hand_over_removals(core)
                if core.pools:  # sandboxes outlive the engine; idle pool members do not
                    await claims.remove_members(core)
            await core.close_parts()

    @property
    def http(self) -> httpx.AsyncClient:
        """The pooled HTTP client for rocklets (only while the engine is open)."""
        return self._core.http

    @property
    def rocklet_delivery(self) -> RockletDelivery | None:
        """The rocklet the runtime brings into its units (made when the engine opens; the admin
        serves it)."""
        return self._core.rocklet_delivery

    # -- start (engine/starting.py) ------------------------------------------------------------

    @leader_only_call
    async def start_async(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
        tenant: str | None = None,
        quota: Quota | None = None,
        idempotency_key: str | None = None,
    ) -> SandboxRecord:
        """Accept a start: record it ``pending``, queue it, return at once (see
        :func:`rock_core.engine.starting.start_async`; ``request.snapshot``: from the tenant's
        snapshot, :func:`rock_core.engine.snapshots.resolve_start`).

        :raises InvalidParameter: a bad field, a spec above the maximum, an unknown snapshot.
        :raises SandboxAlreadyExists: / :raises QuotaExceeded: (the tenant's ``quota``).
        """
        if request.snapshot is None:
            check_image_by_name(request.image, tenant)
            await commits.check_commit_tenant(self._core, request.image, tenant)
        request = await snapshots.resolve_start(self._core, request, tenant)
        return await starting.start_async(
            self._core, request, user_id=user_id, experiment_id=experiment_id,
            namespace=namespace, cluster=cluster, tenant=tenant, quota=quota,
            idempotency_key=idempotency_key,
        )  # fmt: skip

    async def start(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
        tenant: str | None = None,
        quota: Quota | None = None,
        idempotency_key: str | None = None,
    ) -> SandboxStatus:
        """:meth:`start_async`, then wait until the sandbox runs (or its start fails)."""
        started = await self.start_async(
            request, user_id=user_id, experiment_id=experiment_id, namespace=namespace,
            cluster=cluster, tenant=tenant, quota=quota, idempotency_key=idempotency_key,
        )  # fmt: skip
        assert started.sandbox_id is not None
        return await self.wait_until_running(started.sandbox_id)

    async def wait_until_running(
        self, sandbox_id: str, timeout: float | None = None
    ) -> SandboxStatus:
        """Wait for the current start of ``sandbox_id`` to finish; return its running status
        (:func:`rock_core.engine.starting.wait_until_running`: what it raises)."""
        return await starting.wait_until_running(self._core, sandbox_id, timeout)

    async def wait_any(
        self, sandbox_ids: Sequence[str], timeout: float, *, watch: SettleWatch | None = None
    ) -> list[str]:
        """The ids among ``sandbox_ids`` whose start has settled, as soon as one has, or ``[]``
        after ``timeout`` seconds: one wait for many sandboxes; ``watch``: also its ids, kept
        between calls (:func:`rock_core.engine.starting.wait_any`)."""
        return await starting.wait_any(self._core, sandbox_ids, timeout, watch=watch)

    @leader_only_call
    async def restart(self, sandbox_id: str, quota: Quota | None = None) -> SandboxRecord:
        """Start a stopped sandbox again in its own unit (files kept, sessions gone), or restore
        an archived one (:func:`rock_core.engine.starting.restart`: what it raises)."""
        return await starting.restart(self._core, sandbox_id, quota)

    # -- archive and restore (engine/archiving.py) ---------------------------------------------

    @leader_only_call
    async def archive(self, sandbox_id: str) -> None:
        """Start archiving a stopped sandbox into the engine's archive store; return at once
        (the steps and failures: :func:`rock_core.engine.archiving.archive`). :meth:`restart`
        restores it; :meth:`delete` deletes its archive.

        :raises SandboxNotFound: unknown id.
        :raises BadRequestRockError: the sandbox is not stopped, or its unit is gone.
        :raises NotSupported: no archive store is configured, or the runtime cannot snapshot.
        """
        await archiving.archive(self._core, sandbox_id)

    # -- warm pools (engine/claims.py) ---------------------------------------------------------

    @leader_only_call
    async def set_warm_pool(
        self, request: SandboxStartRequest, size: int, *, tenant: str | None = None
    ) -> str:
        """Keep ``size`` started sandboxes of the kind ``request`` asks for (0 removes the pool);
        return the pool's key (:func:`rock_core.engine.claims.set_warm_pool`: what it raises)."""
        request = await snapshots.resolve_start(self._core, request, tenant)
        return await claims.set_warm_pool(self._core, request, size, tenant)

    @leader_only_call
    async def warmup(
        self, request: SandboxStartRequest, size: int | None = None, *, tenant: str | None = None
    ) -> str | None:
        """ROCK's warm-up: pull the image of ``request`` in the background; with ``size`` (rock)
        keep a warm pool instead (:func:`rock_core.engine.claims.warmup`: what it raises)."""
        request = await snapshots.resolve_start(self._core, request, tenant)
        return await claims.warmup(self._core, request, size, tenant)

    def warm_pools(self) -> list[WarmPoolStatus]:
        """The status of every warm pool: target size, ready members, claims, failures."""
        return claims.warm_pools(self._core)

    async def wait_warm(self, timeout: float | None = None) -> list[WarmPoolStatus]:
        """Wait until every pool holds its target size, or has failed to make a member; return their status.

        :raises StartupTimeout: ``timeout`` seconds passed first (the pools go on filling).
        """
        return await claims.wait_warm(self._core, timeout)

    @leader_only_call
    async def update_egress(self, sandbox_id: str, policy: Any) -> SandboxRecord:
        """Replace a running sandbox's egress policy (``None``: none), enforced before this
        returns (:func:`rock_core.engine.egress.update_egress`: what it raises)."""
        return await egress.update_egress(self._core, sandbox_id, policy)

    # -- stop and delete (engine/stopping.py) --------------------------------------------------

    @leader_only_call
    async def stop(self, sandbox_id: str, reason: str = "manual") -> None:
        """Stop a sandbox (ROCK: unknown id and already stopped are not errors).

        Then, as its post-stop policy says: deleted at once (the default, ROCK's ``--rm``),
        or kept for ``restart`` until its ``auto_delete_time``.
        """
        await stopping.stop(self._core, sandbox_id, reason)

    @leader_only_call
    async def delete(self, sandbox_id: str) -> None:
        """Delete a stopped or archived sandbox and its unit or archive (unknown or deleted:
        no-op); an archive under way is cancelled first (its partial objects deleted).

        :raises InvalidTransition: the sandbox is pending or running: stop it first.
        :raises InternalServerRockError: the archive store failed to delete an archive (the
            sandbox stays archived, nothing lost).
        """
        await stopping.delete(self._core, sandbox_id)

    # -- recovery and reaping (engine/recovery.py, engine/reaping.py) --------------------------

    async def recover(self) -> int:
        """Take back the sandboxes this owner's store lists as not deleted (after a restart of
        the process, or on taking a cluster's lease); return how many. See
        :mod:`~rock_core.engine.recovery`: nothing is left pending or unknown."""
        return await recovery.recover(self._core)

    async def reap_orphans(self) -> int:
        """Remove units of this engine's kind whose owning process has died; return how many."""
        return await reaping.reap_orphans(self._core)

    # -- timers, reconcile, disk (engine/timers.py, engine/reconcile.py) -----------------------

    async def run_timers(self, at: float | None = None) -> None:
        """Stop idle sandboxes and delete stopped ones whose deadline passed, all at once (a
        burst of expiries does not wait on one another's container).

        :param at: the moment (``time.time()``) the deadlines are judged at (default: now).
        """
        await timers.run_timers(self._core, at)

    async def reconcile(self) -> None:
        """Record as stopped every running sandbox whose unit died (one ``list`` per call)."""
        await reconcile.reconcile(self._core)

    async def unit_gone(self, sandbox_id: str, status: RuntimeStatus) -> None:
        """Record that a live sandbox's unit stopped or vanished behind rock's back."""
        await reconcile.unit_gone(self._core, sandbox_id, status)

    async def check_disk(self) -> list[str]:
        """Stop the running sandboxes past a disk limit the runtime cannot enforce, files kept
        (:func:`rock_core.engine.timers.check_disk`); their ids. :raises NotSupported:"""
        return await timers.check_disk(self._core)

    # -- resource use (engine/monitoring.py) ----------------------------------------------------

    async def sample_usage(self) -> int:
        """Sample every running sandbox's resource use now (as the monitor does every
        ``stats_interval``); how many were measured. :raises NotSupported: no ``stats``."""
        return await monitoring.sample(self._core, self.sampler)

    def usages(self) -> dict[str, SandboxUsage]:
        """The last sampled resource use of every running sandbox that has one, by sandbox id."""
        return {
            sandbox_id: live.usage
            for sandbox_id, live in self._core.live.items()
            if live.usage is not None and live.record.state is State.RUNNING
        }

    # -- units ---------------------------------------------------------------------------------

    def claimed_units(self) -> set[str]:
        """The unit ids sandboxes hold, by the records and in memory (claimed pool units too)."""
        return self._core.claimed_units()

    def sandbox_of_unit(self, unit_id: str, hint: str | None = None) -> str | None:
        """The sandbox whose unit is ``unit_id`` (``None``: none); ``hint``, the sandbox its
        label names, is tried first (:meth:`EngineCore.sandbox_of_unit`)."""
        return self._core.sandbox_of_unit(unit_id, hint)

    # -- records and status ----------------------------------------------------------------------

    def get_record(self, sandbox_id: str) -> SandboxRecord:
        """The current record of ``sandbox_id`` (any state).

        :raises SandboxNotFound: no sandbox has ever had this id here.
        """
        return self._core.get_record(sandbox_id)

    def status_of(self, record: SandboxRecord) -> SandboxStatus:
        """What the engine knows of ``record``'s sandbox now: its queue position and idle deadline."""
        return self._core.status_of(record)

    def statuses_of(self, records: Iterable[SandboxRecord]) -> list[SandboxStatus]:
        """:meth:`status_of` of each record, the start queue walked once for all (a listing)."""
        positions = self.queue.positions()
        return [self._core.status(r, positions.get(r.sandbox_id)) for r in records]

    async def get_status(self, sandbox_id: str, include_all_states: bool = False) -> SandboxStatus:
        """ROCK's ``get_status``: a pending or running sandbox's status and phases.

        Without ``include_all_states``, a sandbox that is stopped, archived or deleted is
        reported as not found (ROCK's backward-compatible behaviour); with it, every state is.
        One that crashed and waits out its restart policy's back-off is pending, its reason
        saying so (:mod:`rock_core.engine.crash_restarts`).

        :raises SandboxNotFound: unknown id (or not live, without ``include_all_states``).
        """
        record = self.get_record(sandbox_id)
        status = self.status_of(record)  # a crash restart's back-off shows as pending
        if not include_all_states and status.state not in LIVE_STATES:
            raise SandboxNotFound(
                f"Sandbox {sandbox_id} not found (it is {record.state.value}"
                + (f": {record.reason}" if record.reason else "")
                + "; pass include_all_states=True to see it)",
                sandbox_id=sandbox_id,
                attempted="get_status",
            )
        # A read is not activity (ROCK's get_status refreshes the idle timer): polling a
        # sandbox's status must not keep an idle sandbox, and the machine, busy for ever.
        return status

    def list_records(
        self,
        *,
        states: list[State] | None = None,
        filters: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[SandboxRecord]:
        """Records from the store, restricted to ``states`` and exact-match ``filters``; a live
        sandbox's is the current one the engine holds (not read back from the store)."""
        return self.store.list(
            states=states, filters=filters, limit=limit, offset=offset, known=self._core.known
        )

    def count_records(
        self, *, states: list[State] | None = None, filters: Mapping[str, str] | None = None
    ) -> int:
        """How many records :meth:`list_records` would return without a limit."""
        return self.store.count(states=states, filters=filters)

    def count_by_state(self) -> dict[State, int]:
        """Number of known sandboxes in each state (states with none are left out)."""
        return self.store.count_by_state()

    def usage_by_tenant(self) -> dict[str, Usage]:
        """What each tenant's pending and running sandboxes hold (count, memory, CPUs): what
        quotas are checked against (:mod:`rock_core.tenancy`)."""
        return usage_by_tenant(live.record for live in self._core.live.values())

    # -- calls to sandboxes ------------------------------------------------------------------

    def rocklet(
        self, sandbox_id: str, attempted: str = "call", *, activity: bool = True
    ) -> RockletClient:
        """The rocklet client of a running sandbox; counts as activity for its idle timer unless
        ``activity`` is false (a read of its liveness or figures: reads never keep a sandbox
        alive).

        :raises SandboxNotFound: unknown id, or the sandbox is not running (with its state and reason).
        :raises BadRequestRockError: the sandbox is still starting.
        """
        live = self._core.live.get(sandbox_id)
        if live is None and self._core.role is not None:  # a sandbox of the cluster's leader
            client = following.client(self._core, sandbox_id, attempted)
            if activity:
                self._core.touch(sandbox_id)
            return client
        if live is None or live.client is None or live.record.state is not State.RUNNING:
            record = live.record if live is not None else self.get_record(sandbox_id)
            # as its status shows it: a crash restart's back-off is "not running yet (pending)"
            raise not_running_error(self._core.status_of(record).record, attempted)
        if live.record.paused:
            raise pausing.paused_error(live.record, attempted)
        if activity:
            live.activity = time.time()
        return live.client

    def call(self, sandbox_id: str) -> Call:
        """``async with engine.call(sandbox_id):`` (or plain ``with``) around a call to the sandbox:
        while it runs, the sandbox is never idle-stopped, and its end counts as activity.

        Safe from any thread (embedded callers call rocklets from their own event loops).
        """
        return Call(self._core, sandbox_id)

    def touch(self, sandbox_id: str) -> None:
        """Count activity on ``sandbox_id`` (resets its idle timer); unknown ids are ignored."""
        self._core.touch(sandbox_id)
