"""The engine: :class:`SandboxManager`, the only code that changes a sandbox's state.

It owns the records (a :class:`~rock_core.engine.store.SandboxStore`), the fair
:class:`~rock_core.engine.start_queue.StartQueue`, the idle and auto-delete timers and the
reconciler that compares records with what the runtime reports. Every change goes through the
state machine of :mod:`rock_core.states`; every transition is written to the store at once and
announced to plugins (``rock_sandbox_transition``).

Use it as an async context manager; its background work runs in its own task group::

    async with SandboxManager(EngineConfig(), runtime=DockerRuntime()) as engine:
        started = await engine.start_async(SandboxStartRequest(image="python:3.11"))
        status = await engine.wait_until_running(started.sandbox_id)
        client = engine.rocklet(started.sandbox_id, "execute")
        ...
        await engine.stop(started.sandbox_id)

Commands, files and sessions do not pass through here: :meth:`SandboxManager.rocklet` hands out
a :class:`~rock_core.engine.rocklet_client.RockletClient` for the sandbox (and counts the call as
activity for the idle timer).
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import attrs
import httpx

from rock_core.actions import (
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    WarmPoolStatus,
)
from rock_core.converters import spec_from_start_request
from rock_core.responses import start_response, status_response
from rock_core.engine.config import EngineConfig
from rock_core.engine.owners import owner_is_dead, process_owner
from rock_core.engine.pool import Member, WarmPool, is_unclaimed_member, pool_key
from rock_core.engine.rocklet_client import RockletClient, new_http_client
from rock_core.engine.start_queue import StartQueue
from rock_core.engine.store import SandboxStore
from rock_core.errors import (
    BadRequestRockError,
    ImagePullFailed,
    InternalServerRockError,
    InvalidParameter,
    NotSupported,
    RockError,
    SandboxAlreadyExists,
    SandboxNotFound,
    StartupTimeout,
)
from rock_core.models import (
    PHASE_DOCKER_RUN,
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    Phase,
    PhaseStatus,
    PullPolicy,
    RuntimeStatus,
    SandboxRecord,
    SandboxSpec,
    UnitState,
)
from rock_core.runtime import Runtime, UnitHandle
from rock_core.states import LIVE_STATES, Event, State
from rock_core.units import format_bytes, format_size

__all__ = ["SandboxManager", "LABEL_SANDBOX_ID", "LABEL_ENGINE", "LABEL_ENGINE_ID", "LABEL_OWNER", "process_owner"]

log = logging.getLogger("rock.engine")

LABEL_SANDBOX_ID = "rock.sandbox_id"
LABEL_ENGINE = "rock.engine"
LABEL_OWNER = "rock.owner"
LABEL_ENGINE_ID = "rock.engine_id"


# Units removed at once by the sweep of orphans and stale pool members (the rest wait their turn).
_SWEEP_CONCURRENCY = 8

# A sandbox whose container died unexpectedly stays visible as stopped at least this long, so
# its reason can be read, even when its policy deletes stopped sandboxes at once.
_DEATH_GRACE_SECONDS = 60


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_rocklet_token() -> str:
    """A fresh random secret for one sandbox's rocklet (256 bits)."""
    return secrets.token_urlsafe(32)


def _describe_exit(status: RuntimeStatus) -> str:
    if status.state is UnitState.MISSING:
        return "container was removed outside rock"
    text = f"container exited with code {status.exit_code}"
    if status.oom_killed:
        text += " (OOM killed: the sandbox used more than its memory limit)"
    if status.error:
        text += f": {status.error}"
    return text


@attrs.define
class _Live:
    """What the engine holds in memory for a sandbox that is not deleted."""

    record: SandboxRecord
    lock: anyio.Lock = attrs.field(factory=anyio.Lock)
    handle: UnitHandle | None = None
    client: RockletClient | None = None
    activity: float = attrs.field(factory=time.time)  # last call, for the idle timer
    settled: anyio.Event = attrs.field(factory=anyio.Event)  # the current start finished
    start_done: anyio.Event = attrs.field(factory=anyio.Event)  # its task has returned
    start_error: RockError | None = None
    start_scope: anyio.CancelScope | None = None
    removing: bool = False  # the unit is being removed in the background; then deleted


class _Call:
    """What :meth:`SandboxManager.call` returns: a context manager, sync or async."""

    __slots__ = ("_engine", "_sandbox_id")

    def __init__(self, engine: SandboxManager, sandbox_id: str) -> None:
        self._engine = engine
        self._sandbox_id = sandbox_id

    def __enter__(self) -> None:
        self._engine._call_began(self._sandbox_id)

    def __exit__(self, *exc_info: Any) -> None:
        self._engine._call_ended(self._sandbox_id)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)


class SandboxManager:
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
        plugins: Any = None,
        owner: str | None = None,
        configured: bool = False,
    ) -> None:
        self.config = config or EngineConfig()
        if plugins is None:
            from rock_core.plugins import Plugins

            plugins = Plugins.load()
        self.plugins = plugins
        from rock_core.plugins import plugin_tables

        # Each plugin's table, variables on top: what rock_configure got, and what builds the
        # archive store and the environment providers a plugin registered.
        self._tables = plugin_tables(self.config.plugin_options, os.environ, plugins.names())
        if not configured:
            plugins.configure(self._tables)
        self.archive_store = self._build_archive_store(plugins)
        self._env_providers: dict[str, Any] | None = None
        if runtime is None:
            runtimes = plugins.runtimes()
            if self.config.runtime not in runtimes:
                known = ", ".join(sorted(runtimes)) or "none installed"
                raise InvalidParameter(
                    f"runtime: no runtime named {self.config.runtime!r} (installed: {known}); "
                    f"install the plugin that provides it (`rock plugins` lists what is installed)",
                    field="runtime",
                    value=self.config.runtime,
                )
            runtime = runtimes[self.config.runtime](**dict(self.config.runtime_options))
        self.runtime = runtime
        self.owner = owner or process_owner()
        # Tells this engine's units from those of another engine in the same process.
        self.engine_id = uuid.uuid4().hex
        self.store = SandboxStore(self.config.store_path)
        self.queue = StartQueue(self.config.max_concurrent_starts)
        self._live: dict[str, _Live] = {}
        self._in_flight: dict[str, int] = {}  # calls running now, per sandbox (no idle stop)
        self._in_flight_lock = threading.Lock()  # calls begin and end in callers' threads too
        self._pools: dict[str, WarmPool] = {}
        self._pool_scopes: dict[str, anyio.CancelScope] = {}
        self._http: httpx.AsyncClient | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._sweep_done: anyio.Event | None = None  # set once the start-up sweep has finished
        #: Called with the seconds from request to running of every start (the admin's histogram).
        self.start_observers: list[Callable[[float], None]] = []

    def _build_archive_store(self, plugins: Any) -> Any:
        """The configured archive store (``config.archive_store``), or ``None`` when archiving is off."""
        name = self.config.archive_store
        if name is None:
            return None
        stores = plugins.archive_stores()
        if name not in stores:
            known = ", ".join(sorted(stores)) or "none installed"
            raise InvalidParameter(
                f"archive_store: no archive store named {name!r} (installed: {known}); for S3, pip install rock-archive-s3",
                field="archive_store", value=name,
            )
        owner = plugins.registered_by("rock_register_archive_stores").get(name, name)
        return stores[name](**self._tables.get(owner, {}))

    async def make_env(self, env_id: str, **kwargs: Any) -> Any:
        """Make the environment ``env_id`` with the first registered provider that accepts it
        (``rock_register_env_providers``); providers are built once, as ``cls(engine, **table)``.

        :raises InvalidParameter: no provider serves ``env_id`` (``field="env_id"``).
        """
        if self._env_providers is None:
            classes = self.plugins.env_providers()
            owners = self.plugins.registered_by("rock_register_env_providers")
            self._env_providers = {
                name: cls(self, **self._tables.get(owners.get(name, name), {})) for name, cls in classes.items()
            }
        for provider in self._env_providers.values():
            if provider.accepts(env_id):
                return await provider.make(env_id, **kwargs)
        known = ", ".join(sorted(self._env_providers)) or "none installed"
        raise InvalidParameter(
            f"env_id: no environment provider serves {env_id!r} (providers: {known}; for GEM, pip install rock-gem)",
            field="env_id", value=env_id,
        )

    # -- lifecycle of the engine itself -----------------------------------------------------

    async def __aenter__(self) -> SandboxManager:
        self._http = new_http_client()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        # Orphans and stale pool members go in the background: the first start does not wait.
        self._sweep_done = anyio.Event()
        self._tg.start_soon(self._background_sweep)
        await self.recover()
        for pool in self.config.warm_pools:
            await self.set_warm_pool(pool.request, pool.size)
        self._tg.start_soon(self._timer_loop)
        self._tg.start_soon(self._reconcile_loop)
        self._tg.start_soon(self._watch_loop)
        self._tg.start_soon(self._disk_loop)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop background work; with ``remove_on_close``, remove this engine's sandboxes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._tg is not None:
            # A sweep under way finishes (bounded): what it found should not wait for the next run.
            if self._sweep_done is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                    await self._sweep_done.wait()
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            if self.config.remove_on_close:
                await self._remove_all_owned()
            elif self._pools:
                await self._remove_members()  # sandboxes outlive the engine; idle pool members do not
            if self._http is not None:
                await self._http.aclose()
            if self.archive_store is not None:
                await self.archive_store.aclose()
            await self.runtime.aclose()
        self.store.close()

    @property
    def http(self) -> httpx.AsyncClient:
        """The pooled HTTP client for rocklets (only while the engine is open)."""
        if self._http is None:
            raise RuntimeError("the engine is not open: use `async with SandboxManager(...)`")
        return self._http

    def _labels(self, sandbox_id: str | None) -> dict[str, str]:
        labels = {
            LABEL_ENGINE: self.config.engine_label,
            LABEL_OWNER: self.owner,
            LABEL_ENGINE_ID: self.engine_id,
        }
        if sandbox_id is not None:
            labels[LABEL_SANDBOX_ID] = sandbox_id
        return labels

    # -- warm pools ----------------------------------------------------------------------------

    async def set_warm_pool(self, request: SandboxStartRequest, size: int) -> str:
        """Keep ``size`` started sandboxes of the kind ``request`` asks for; return the pool's key.

        Starts of that kind (same image, pull policy, sizes, CPUs, environment and runtime
        options) are then served from the pool: renamed and checked in one round trip. Calling
        again with another size resizes the pool (surplus members are removed); ``size`` 0
        removes it. Filling happens in the background, only while no ordinary start waits.

        :raises InvalidParameter: a bad request, a spec above the engine's maximum, or a size
            below 0.
        :raises NotSupported: the runtime cannot hand started units to sandboxes (its capability ``assign``).
        """
        if self._tg is None or self._closed:
            raise RuntimeError("the engine is not open: use `async with SandboxManager(...)`")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidParameter(f"size: expected a whole number >= 0, got {size!r}", field="size", value=size)
        spec = spec_from_start_request(request)
        self._validate(spec)
        if spec.pull is PullPolicy.ALWAYS and size:
            raise InvalidParameter(
                "pull: 'always' asks for a fresh pull at every start, which sandboxes started ahead of "
                "time cannot honour; keep warm pools with pull 'missing' or 'never'",
                field="pull", value=spec.pull.value, attempted="set_warm_pool",
            )
        key = pool_key(spec)
        others = sum(p.size for k, p in self._pools.items() if k != key)
        if others + size > self.config.max_warm_pool_members:
            raise InvalidParameter(
                f"size: {size} would keep {others + size} sandboxes ready in warm pools, above the engine's "
                f"maximum of {self.config.max_warm_pool_members} (max_warm_pool_members)",
                field="size", value=size, attempted="set_warm_pool",
            )
        pool = self._pools.get(key)
        if pool is not None:
            if size == 0:
                del self._pools[key]
                self._pool_scopes.pop(key).cancel()
                surplus = pool.drain()
            else:
                surplus = pool.resize(size)
            for member in surplus:
                self._tg.start_soon(self._remove_quietly, member.handle)
            return key
        if size == 0:
            return key
        if not self.runtime.can_assign:
            raise NotSupported(self.runtime.capabilities.missing("assign", self.runtime.name), attempted="set_warm_pool")
        pool = WarmPool(
            self._with_defaults(spec), size, key=key,
            runtime=self.runtime, labels=self._labels(None), http=self.http, queue=self.queue,
            startup_timeout=self._startup_timeout(spec),
        )
        self._pools[key] = pool
        scope = anyio.CancelScope()
        self._pool_scopes[key] = scope

        async def run() -> None:
            with scope:
                await pool.run(self._remove_quietly)

        self._tg.start_soon(run)
        return key

    async def warmup(self, request: SandboxStartRequest, size: int | None = None) -> str | None:
        """ROCK's warm-up: get the image of ``request`` pulled in the background, ahead of starts.

        With ``size`` (rock), keep a warm pool of that many sandboxes of the kind ``request``
        describes instead (``0`` removes it), and return the pool's key. A pull that fails is
        logged; it fails again, with its reason, at the start that needs the image.

        :raises InvalidParameter: a bad request or size, or a spec above the engine's maximum.
        """
        if self._tg is None or self._closed:
            raise RuntimeError("the engine is not open: use `async with SandboxManager(...)`")
        if size is not None:
            return await self.set_warm_pool(request, size)
        spec = spec_from_start_request(request)
        self._validate(spec)

        async def pull() -> None:
            try:
                await self.runtime.prepare(spec)
                log.info("warm-up: image %s is ready", spec.image)
            except RockError as exc:
                log.warning("warm-up of image %s failed: %s", spec.image, exc.message)

        self._tg.start_soon(pull)
        return None

    def warm_pools(self) -> list[WarmPoolStatus]:
        """The status of every warm pool: target size, ready members, claims, failures."""
        return [pool.status() for pool in self._pools.values()]

    async def wait_warm(self, timeout: float | None = None) -> list[WarmPoolStatus]:
        """Wait until every pool holds its target size, or has failed to make a member; return their status.

        :raises StartupTimeout: ``timeout`` seconds passed first (the pools go on filling).
        """
        with anyio.move_on_after(timeout) as scope:
            while True:
                pending = [p for p in self._pools.values() if not p.full and p.last_error is None]
                if not pending:
                    break
                await pending[0].wait_changed()
        if scope.cancelled_caught:
            raise StartupTimeout(f"warm pools not full within {timeout:g}s: {self.warm_pools()}", attempted="wait_warm")
        return self.warm_pools()

    async def _remove_members(self) -> None:
        """Remove this engine's unclaimed pool members (those in a pool and those still starting)."""
        try:
            units = await self.runtime.list({LABEL_ENGINE_ID: self.engine_id})
        except RockError as exc:
            log.warning("could not list this engine's pool members at close: %s", exc)
            return
        async with anyio.create_task_group() as tg:
            for handle in units:
                if is_unclaimed_member(handle):
                    tg.start_soon(self._remove_quietly, handle)

    async def _claim_warm(self, live: _Live) -> bool:
        """Serve a start from its warm pool, if one has a live member; whether it was served."""
        pool = self._pools.get(pool_key(live.record.spec))
        if pool is None:
            return False
        sandbox_id = live.record.sandbox_id
        while (member := pool.take()) is not None:
            if not await self._claim(live, pool, member):
                continue
            return True
        log.debug("warm pool %s is empty: starting sandbox %s the ordinary way", pool.key, sandbox_id)
        return False

    async def _claim(self, live: _Live, pool: WarmPool, member: Member) -> bool:
        sandbox_id = live.record.sandbox_id
        assert self._tg is not None
        try:
            # Shielded: a stop arriving now must find the unit in live.handle, not lose it halfway.
            with anyio.CancelScope(shield=True):
                handle = await self.runtime.assign(member.handle, sandbox_id)
        except RockError as exc:
            log.warning("could not claim pool member %s for %s: %s", member.handle.sandbox_id, sandbox_id, exc)
            self._tg.start_soon(self._remove_quietly, member.handle)
            return False
        live.handle = handle
        assert member.status.rocklet_address is not None
        # The member's secret was made for it alone and never handed out: it becomes the sandbox's.
        self._save(attrs.evolve(live.record, rocklet_token=member.token))
        client = RockletClient(self.http, *member.status.rocklet_address, sandbox_id, token=member.token)
        if not await client.is_alive(timeout=2.0):
            log.warning("pool member claimed for %s did not answer; starting it the ordinary way", sandbox_id)
            live.handle = None
            # Removed before the ordinary start, which needs the name the member now has.
            with anyio.CancelScope(shield=True):
                await self._remove_quietly(handle)
            return False
        message = f"warm pool {pool.key}: image present"
        self._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, message)
        self._note_unit(live, attrs.evolve(handle, security=member.handle.security))
        await self._became_ready(live, client, member.status, f"claimed from warm pool {pool.key}")
        return True

    async def reap_orphans(self) -> int:
        """Remove units of this engine's kind whose owning process has died; return how many."""
        return await self._sweep(reap=True)

    async def _sweep(self, *, reap: bool) -> int:
        """One look at this engine's kind of units: with ``reap``, remove those whose owning process
        died; always remove the unclaimed pool members an earlier run of this owner left (an
        admin restart). Return how many orphans were reaped."""
        try:
            handles = await self.runtime.list({LABEL_ENGINE: self.config.engine_label})
        except RockError as exc:
            log.warning("could not list units to reap orphans and stale pool members: %s", exc)
            return 0
        stale = [
            h for h in handles
            if h.labels.get(LABEL_OWNER, "") == self.owner
            and is_unclaimed_member(h) and h.labels.get(LABEL_ENGINE_ID) != self.engine_id
        ]
        orphans = [
            h for h in handles
            if reap and h.labels.get(LABEL_OWNER, "") != self.owner and owner_is_dead(h.labels.get(LABEL_OWNER, ""))
        ]
        if orphans:
            log.info("removing %d sandbox(es) whose owner has died", len(orphans))
        limiter = anyio.CapacityLimiter(_SWEEP_CONCURRENCY)

        async def remove(handle: UnitHandle) -> None:
            async with limiter:
                await self._remove_quietly(handle)

        async with anyio.create_task_group() as tg:
            for handle in (*stale, *orphans):
                tg.start_soon(remove, handle)
        return len(orphans)

    async def _background_sweep(self) -> None:
        try:
            await self._sweep(reap=self.config.reap_orphans)
        finally:
            assert self._sweep_done is not None
            self._sweep_done.set()

    async def recover(self) -> int:
        """Take back the sandboxes this owner's store lists as not deleted; return how many.

        After a restart of the process (an admin killed with ``kill -9``), each record is
        matched with its unit by label: a running sandbox whose rocklet answers is usable again;
        one whose unit died or vanished meanwhile, and one whose start the restart interrupted,
        is recorded as stopped with that reason. Nothing is left pending or unknown.
        """
        records = [
            r for r in self.store.list(states=[State.PENDING, State.RUNNING, State.STOPPED])
            if r.owner == self.owner and r.sandbox_id not in self._live
        ]
        if not records:
            return 0
        try:
            units = await self.runtime.list({LABEL_OWNER: self.owner})
        except RockError as exc:
            log.warning("could not list units to recover sandboxes: %s", exc)
            units = []
        by_id = {h.labels.get(LABEL_SANDBOX_ID, h.sandbox_id): h for h in units}
        for record in records:
            live = _Live(record=record, handle=by_id.get(record.sandbox_id))
            live.start_done.set()
            self._live[record.sandbox_id] = live
            if record.state is State.STOPPED:
                live.settled.set()
                continue
            reason = await self._adopt(live)
            live.settled.set()
            if reason is not None:
                async with live.lock:
                    await self._stop_locked(live, reason, unexpected=True)
        return len(records)

    async def _adopt(self, live: _Live) -> str | None:
        """Reconnect a recovered live sandbox to its rocklet; the reason to stop it, if it can't be."""
        record = live.record
        if live.handle is None:
            return "container was removed while rock was not running"
        try:
            status = await self.runtime.inspect(live.handle)
        except RockError as exc:
            return f"could not inspect its container after a restart: {exc.message}"
        if status.state is not UnitState.RUNNING or status.rocklet_address is None:
            return _describe_exit(status) + " while rock was not running"
        client = RockletClient(self.http, *status.rocklet_address, record.sandbox_id, token=record.rocklet_token)
        if not await client.is_alive(timeout=5.0):
            return "its rocklet did not answer after rock restarted"
        live.client = client
        live.activity = time.time()
        self._save(attrs.evolve(record, port_mapping=dict(status.port_mapping) or dict(record.port_mapping)))
        if record.state is State.PENDING:  # its start was cut short just before the end: finish it
            self._set_phase(record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.SUCCESS, "docker run success (recovered)")
            self._apply(live.record, Event.ALIVE, start_time=_now(), reason=None)
        return None

    async def _remove_all_owned(self) -> None:
        for live in list(self._live.values()):
            if live.start_scope is not None:
                live.start_scope.cancel()
        handles = [live.handle for live in self._live.values() if live.handle is not None]
        try:
            handles += [
                h for h in await self.runtime.list({LABEL_ENGINE_ID: self.engine_id})
                if all(h.unit_id != known.unit_id for known in handles)
            ]
        except RockError as exc:
            log.warning("could not list this engine's units at close: %s", exc)
        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(self._remove_quietly, handle)
        now = _now()
        for live in list(self._live.values()):
            if live.record.state is not State.DELETED:
                record = live.record
                if record.state in LIVE_STATES:
                    record = self._apply(record, Event.STOP, reason="engine closed", stop_time=now)
                if record.state in (State.STOPPED, State.ARCHIVED):
                    record = self._apply(record, Event.DELETE, delete_time=now)
        self._live.clear()

    async def _remove_quietly(self, handle: UnitHandle) -> None:
        try:
            await self.runtime.remove(handle)
        except RockError as exc:
            log.warning("could not remove unit of sandbox %s: %s", handle.sandbox_id, exc)

    # -- records and transitions -------------------------------------------------------------

    def _apply(self, record: SandboxRecord, event: Event, **changes: Any) -> SandboxRecord:
        """Fire ``event`` on ``record``, save the result, announce it; a no-op changes nothing."""
        old = record.state
        lifecycle = record.lifecycle.apply(event, at=_now(), sandbox_id=record.sandbox_id)
        if lifecycle is record.lifecycle:
            return record
        new = attrs.evolve(record, state=lifecycle.state, state_history=lifecycle.history, **changes)
        self._save(new)
        self.plugins.notify_transition(new, event, old, new.state)
        return new

    def _save(self, record: SandboxRecord) -> None:
        self.store.put(record)
        live = self._live.get(record.sandbox_id)
        if record.state is State.DELETED:
            self._live.pop(record.sandbox_id, None)
        elif live is not None:
            live.record = record

    def _set_phase(self, sandbox_id: str, name: str, status: PhaseStatus, message: str = "") -> None:
        live = self._live.get(sandbox_id)
        if live is None:
            return
        phases = dict(live.record.phases)
        old = phases.get(name)
        now = _now()
        started = old.started_at if old is not None and old.started_at is not None else None
        if status is PhaseStatus.RUNNING or (started is None and status is not PhaseStatus.WAITING):
            started = started or now
        completed = now if status in (PhaseStatus.SUCCESS, PhaseStatus.FAILED, PhaseStatus.TIMEOUT) else None
        phases[name] = Phase(status=status, message=message, started_at=started, completed_at=completed)
        self._save(attrs.evolve(live.record, phases=phases))

    def get_record(self, sandbox_id: str) -> SandboxRecord:
        """The current record of ``sandbox_id`` (any state).

        :raises SandboxNotFound: no sandbox has ever had this id here.
        """
        live = self._live.get(sandbox_id)
        if live is not None:
            return live.record
        record = self.store.get(sandbox_id)
        if record is None:
            raise SandboxNotFound(f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted="get_status")
        return record

    # -- start ------------------------------------------------------------------------------

    def _with_defaults(self, spec: SandboxSpec) -> SandboxSpec:
        """What the runtime gets: ``spec`` with the engine's defaults where the request left a
        unit-shaping field unset. (The record keeps the request's ``None``, so the warm pool a
        client names by its request is the pool its starts are served from.)"""
        if spec.pids_limit is None:
            spec = attrs.evolve(spec, pids_limit=self.config.default_pids_limit)
        return spec

    def _validate(self, spec: SandboxSpec) -> None:
        c = self.config
        problems = []
        if spec.cpus > c.max_cpus:
            problems.append(("cpus", f"cpus: {spec.cpus:g} is above the maximum of {c.max_cpus:g}", spec.cpus))
        if spec.limit_cpus is not None and spec.limit_cpus > c.max_cpus:
            problems.append(("limit_cpus", f"limit_cpus: {spec.limit_cpus:g} is above the maximum of {c.max_cpus:g}", spec.limit_cpus))
        if spec.memory > c.max_memory:
            problems.append(("memory", f"memory: {format_size(spec.memory)} is above the maximum of {format_size(c.max_memory)}", spec.memory))
        if spec.disk is not None and spec.disk > c.max_disk:
            problems.append(("disk", f"disk: {format_size(spec.disk)} is above the maximum of {format_size(c.max_disk)}", spec.disk))
        network = spec.runtime_options.get("network")
        modes = self.runtime.network_modes
        if network is not None and network not in modes:
            problems.append((
                "network",
                f"network: expected one of {', '.join(modes)}, got {network!r} (what runtime {self.runtime.name!r} offers)",
                network,
            ))
        if spec.pids_limit is not None and spec.pids_limit > c.max_pids_limit:
            problems.append(("pids_limit", f"pids_limit: {spec.pids_limit} is above the maximum of {c.max_pids_limit}", spec.pids_limit))
        refused = [name for name in spec.cap_add if name not in c.allowed_cap_add]
        if refused:
            allowed = ", ".join(c.allowed_cap_add) or "none"
            problems.append((
                "cap_add",
                f"cap_add: {', '.join(refused)} may not be added here (allowed: {allowed}; see docs/security.md)",
                list(spec.cap_add),
            ))
        if spec.auto_archive_seconds is not None and (self.archive_store is None or not self.runtime.can_snapshot):
            why = (
                "no archive store is configured (archive_store; rock-archive-s3)"
                if self.archive_store is None
                else f"the runtime {self.runtime.name!r} cannot snapshot sandboxes"
            )
            problems.append((
                "auto_archive_seconds",
                f"auto_archive_seconds: sandboxes cannot be archived here: {why}; unset it",
                spec.auto_archive_seconds,
            ))
        if problems:
            field = ", ".join(p[0] for p in problems)
            raise InvalidParameter("; ".join(p[1] for p in problems), field=field, value=problems[0][2], attempted="start")

    async def start_async(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
    ) -> SandboxStartResponse:
        """Accept a start: record it as ``pending``, queue it, and return at once.

        The keyword arguments are ROCK's identity headers. Poll :meth:`get_status` or await
        :meth:`wait_until_running` to see it become ``running``.

        :raises InvalidParameter: a bad size, CPU count, id, or a spec above the configured maximum.
        :raises SandboxAlreadyExists: a sandbox that is not deleted already has the requested id.
        """
        if self._tg is None or self._closed:
            raise RuntimeError("the engine is not open: use `async with SandboxManager(...)`")
        spec = spec_from_start_request(
            request, user_id=user_id, experiment_id=experiment_id, namespace=namespace, cluster=cluster
        )
        self._validate(spec)
        sandbox_id = spec.sandbox_id or uuid.uuid4().hex
        why = self.runtime.sandbox_id_problem(sandbox_id)
        if why is not None:
            raise InvalidParameter(
                f"sandbox_id: {sandbox_id!r} is not a valid id ({why})",
                field="sandbox_id", value=sandbox_id, attempted="start",
            )
        if sandbox_id in self._live or (
            (old := self.store.get(sandbox_id)) is not None and old.state is not State.DELETED
        ):
            raise SandboxAlreadyExists(f"Sandbox {sandbox_id} already exists", sandbox_id=sandbox_id, attempted="start")
        if spec.auto_clear_seconds is None:
            spec = attrs.evolve(spec, auto_clear_seconds=self.config.default_auto_clear_seconds)
        spec = attrs.evolve(spec, sandbox_id=sandbox_id)
        now = _now()
        record = SandboxRecord(
            sandbox_id=sandbox_id,
            spec=spec,
            create_time=now,
            state=State.PENDING,
            phases={
                PHASE_IMAGE_PULL: Phase(status=PhaseStatus.WAITING),
                PHASE_DOCKER_RUN: Phase(status=PhaseStatus.WAITING),
            },
            host_name=socket.gethostname(),
            host_ip="127.0.0.1",
            owner=self.owner,
            runtime=self.runtime.name,
            rocklet_token=new_rocklet_token(),
        )
        live = _Live(record=record)
        self._live[sandbox_id] = live
        self._save(record)
        self._tg.start_soon(self._run_start, sandbox_id, time.monotonic(), False)
        return start_response(record)

    async def start(self, request: SandboxStartRequest, **identity: str | None) -> SandboxStatusResponse:
        """:meth:`start_async`, then wait until the sandbox runs (or its start fails)."""
        started = await self.start_async(request, **identity)
        assert started.sandbox_id is not None
        return await self.wait_until_running(started.sandbox_id)

    def _startup_timeout(self, spec: SandboxSpec) -> float:
        return float(spec.startup_timeout or self.config.default_startup_timeout)

    async def _run_start(self, sandbox_id: str, t0: float, reuse: bool) -> None:
        live = self._live.get(sandbox_id)
        if live is None:
            return
        spec = live.record.spec
        budget = self._startup_timeout(spec)
        key = spec.experiment_id or spec.user_id or "default"
        error: RockError | None = None
        with anyio.CancelScope() as scope:
            live.start_scope = scope
            try:
                with anyio.fail_after(budget):
                    claimed = not reuse and await self._claim_warm(live)
                if not claimed:
                    # The startup budget starts when the start leaves the queue: a burst waits,
                    # it does not time out for want of a slot.
                    async with self.queue.slot(key, sandbox_id):
                        with anyio.fail_after(budget):
                            await self._bring_up(live, reuse)
            except TimeoutError:
                error = StartupTimeout(
                    f"Failed to start sandbox within {budget:g}s", sandbox_id=sandbox_id, attempted="start"
                )
                phase = self._first_unfinished_phase(live)
                self._set_phase(sandbox_id, phase, PhaseStatus.TIMEOUT, f"did not finish within {budget:g}s")
            except RockError as exc:
                error = exc
            except Exception as exc:  # a runtime bug must not leave the sandbox pending forever
                log.exception("start of sandbox %s failed", sandbox_id)
                error = InternalServerRockError(f"start failed: {exc!r}", sandbox_id=sandbox_id, attempted="start")
        live.start_scope = None
        live.start_done.set()
        if scope.cancelled_caught:
            live.settled.set()
            return
        if error is None:
            seconds = time.monotonic() - t0
            for observe in self.start_observers:
                observe(seconds)
            live.settled.set()
            return
        live.start_error = error
        with anyio.CancelScope(shield=True):
            async with live.lock:
                if live.record.state in LIVE_STATES:
                    await self._stop_locked(live, f"start failed: {error.message}", unexpected=True)
        live.settled.set()

    @staticmethod
    def _first_unfinished_phase(live: _Live) -> str:
        for name in (PHASE_IMAGE_PULL, PHASE_DOCKER_RUN):
            phase = live.record.phases.get(name)
            if phase is None or phase.status in (PhaseStatus.WAITING, PhaseStatus.RUNNING):
                return name
        return PHASE_DOCKER_RUN

    async def _bring_up(self, live: _Live, reuse: bool) -> None:
        sandbox_id = live.record.sandbox_id
        spec = live.record.spec

        def on_phase(name: str, phase: Phase) -> None:
            self._set_phase(sandbox_id, name, phase.status, phase.message)

        if reuse and live.handle is not None:
            self._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, "restart: reuse the existing container")
            handle = live.handle
        else:
            self._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.RUNNING, "")
            try:
                handle = await self.runtime.create(
                    self._with_defaults(spec),
                    labels=self._labels(sandbox_id),
                    rocklet_token=self._token_of(live),
                    on_phase=on_phase,
                )
            except ImagePullFailed as exc:
                self._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, exc.message)
                raise
            except RockError as exc:
                self._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
                raise
            if live.record.phases[PHASE_IMAGE_PULL].status is not PhaseStatus.SUCCESS:
                self._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, "image ready")
            live.handle = handle
            self._note_unit(live, handle)
        self._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.RUNNING, "starting the container")
        try:
            await self.runtime.start(handle)
            status = await self.runtime.inspect(handle)
        except RockError as exc:
            self._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
            raise
        if status.rocklet_address is None:
            message = _describe_exit(status) if status.state is not UnitState.RUNNING else "the runtime reported no rocklet address"
            self._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message)
            raise InternalServerRockError(f"Failed to start sandbox because docker_run: {message}", sandbox_id=sandbox_id, attempted="start")
        client = RockletClient(self.http, *status.rocklet_address, sandbox_id, token=live.record.rocklet_token)
        await self._wait_for_rocklet(live, handle, client)
        await self._became_ready(live, client, status, "docker run success")

    def _token_of(self, live: _Live) -> str:
        """The sandbox's rocklet secret (made now for a record that predates secrets)."""
        if live.record.rocklet_token is None:
            self._save(attrs.evolve(live.record, rocklet_token=new_rocklet_token()))
        assert live.record.rocklet_token is not None
        return live.record.rocklet_token

    def _note_unit(self, live: _Live, handle: UnitHandle) -> None:
        """Record what the runtime said of a new unit: notes, and the hardening it applied."""
        notes = tuple(dict.fromkeys((*live.record.notes, *handle.notes)))
        security = dict(handle.security) or dict(live.record.security)
        if notes != live.record.notes or security != live.record.security:
            self._save(attrs.evolve(live.record, notes=notes, security=security))

    async def _became_ready(self, live: _Live, client: RockletClient, status: RuntimeStatus, message: str) -> None:
        """A started sandbox's rocklet answered: record its ports and make it running."""
        assert status.rocklet_address is not None
        port = status.rocklet_address[1]
        mapping = dict(status.port_mapping) or ({ROCKLET_PORT: port} if port else {})  # no port: a unix socket
        self._save(attrs.evolve(live.record, port_mapping=mapping))
        live.client = client
        live.activity = time.time()
        async with live.lock:
            if live.record.state is not State.PENDING:
                return  # stopped meanwhile
            self._set_phase(live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.SUCCESS, message)
            now = _now()
            self._apply(
                live.record, Event.ALIVE,
                start_time=now,
                auto_transition_state=None, auto_transition_time=None, reason=None,
            )

    async def _wait_for_rocklet(self, live: _Live, handle: UnitHandle, client: RockletClient) -> None:
        """Poll the rocklet with a tight backoff (the caller's deadline bounds it); between polls,
        notice a container that died."""
        delay = 0.002
        checks = 0
        while True:
            if await client.probe(timeout=1.0):
                return
            checks += 1
            if checks % 10 == 0:  # every ~0.3 s at first, then every ~0.5 s: did it die?
                status = await self.runtime.inspect(handle)
                if status.state is not UnitState.RUNNING:
                    message = _describe_exit(status)
                    try:
                        tail = (await self.runtime.logs(handle, tail=5)).strip()
                    except RockError:
                        tail = ""
                    if tail and tail not in message:
                        message += f"; output: {tail}"
                    self._set_phase(live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message)
                    raise InternalServerRockError(
                        f"Failed to start sandbox because docker_run: {message}",
                        sandbox_id=live.record.sandbox_id, attempted="start",
                    )
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    async def wait_until_running(self, sandbox_id: str, timeout: float | None = None) -> SandboxStatusResponse:
        """Wait for the current start of ``sandbox_id`` to finish; return its running status.

        :raises InternalServerRockError: the start failed: ``"Failed to start sandbox because
            image_pull: Failed to pull image ..."`` (the phase and its message), or the
            sandbox was stopped before it ran.
        :raises StartupTimeout: ``timeout`` seconds passed first (the start goes on).
        """
        live = self._live.get(sandbox_id)
        if live is None:
            record = self.get_record(sandbox_id)
            raise self._not_running_error(record, "wait_until_running")
        with anyio.move_on_after(timeout) as scope:
            await live.settled.wait()
        if scope.cancelled_caught:
            raise StartupTimeout(f"Failed to start sandbox within {timeout:g}s", sandbox_id=sandbox_id, attempted="start")
        record = self.get_record(sandbox_id)
        if record.state is State.RUNNING:
            return self.status_of(record)
        error = live.start_error
        if error is not None:
            failed = [(n, p) for n, p in record.phases.items() if p.status in (PhaseStatus.FAILED, PhaseStatus.TIMEOUT)]
            if failed:
                name, phase = failed[0]
                message = f"Failed to start sandbox because {name}: {phase.message}"
            else:
                message = error.message
            raise type(error)(message, sandbox_id=sandbox_id, attempted="start") if isinstance(error, InternalServerRockError) else error
        raise self._not_running_error(record, "wait_until_running")

    # -- status ------------------------------------------------------------------------------

    def status_of(self, record: SandboxRecord) -> SandboxStatusResponse:
        """The ``get_status`` view of ``record`` (ROCK's fields, plus reason, notes and queue position),
        built by :func:`rock_core.responses.status_response` from what the engine knows of it now."""
        live = self._live.get(record.sandbox_id)
        position = self.queue.position(record.sandbox_id) if record.state is State.PENDING else None
        activity = live.activity if live is not None else time.time()
        return status_response(record, last_activity=activity, queue_position=position)

    async def get_status(self, sandbox_id: str, include_all_states: bool = False) -> SandboxStatusResponse:
        """ROCK's ``get_status``: a pending or running sandbox's status and phases.

        Without ``include_all_states``, a sandbox that is stopped, archived or deleted is
        reported as not found (ROCK's backward-compatible behaviour); with it, every state is.

        :raises SandboxNotFound: unknown id (or not live, without ``include_all_states``).
        """
        record = self.get_record(sandbox_id)
        if not include_all_states and record.state not in LIVE_STATES:
            raise SandboxNotFound(
                f"Sandbox {sandbox_id} not found (it is {record.state.value}"
                + (f": {record.reason}" if record.reason else "")
                + "; pass include_all_states=True to see it)",
                sandbox_id=sandbox_id,
                attempted="get_status",
            )
        live = self._live.get(sandbox_id)
        if live is not None and record.state in LIVE_STATES:
            live.activity = time.time()
        return self.status_of(record)

    def list_records(
        self,
        *,
        states: list[State] | None = None,
        filters: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[SandboxRecord]:
        """Records from the store, restricted to ``states`` and exact-match ``filters``."""
        return self.store.list(states=states, filters=filters, limit=limit, offset=offset)

    def count_records(self, *, states: list[State] | None = None, filters: Mapping[str, str] | None = None) -> int:
        """How many records :meth:`list_records` would return without a limit."""
        return self.store.count(states=states, filters=filters)

    def count_by_state(self) -> dict[State, int]:
        """Number of known sandboxes in each state (states with none are left out)."""
        return self.store.count_by_state()

    # -- runtime calls -----------------------------------------------------------------------

    def _not_running_error(self, record: SandboxRecord, attempted: str) -> RockError:
        if record.state is State.PENDING:
            return BadRequestRockError(
                f"sandbox {record.sandbox_id} is not running yet (pending); wait for it to start",
                sandbox_id=record.sandbox_id, attempted=attempted,
            )
        why = f": {record.reason}" if record.reason else ""
        return SandboxNotFound(
            f"sandbox {record.sandbox_id} is not running (it is {record.state.value}{why})",
            sandbox_id=record.sandbox_id, attempted=attempted,
        )

    def rocklet(self, sandbox_id: str, attempted: str = "call") -> RockletClient:
        """The rocklet client of a running sandbox; counts as activity for its idle timer.

        :raises SandboxNotFound: unknown id, or the sandbox is not running (with its state and reason).
        :raises BadRequestRockError: the sandbox is still starting.
        """
        live = self._live.get(sandbox_id)
        if live is None or live.client is None or live.record.state is not State.RUNNING:
            record = live.record if live is not None else self.get_record(sandbox_id)
            raise self._not_running_error(record, attempted)
        live.activity = time.time()
        return live.client

    def call(self, sandbox_id: str) -> _Call:
        """``async with engine.call(sandbox_id):`` (or plain ``with``) around a call to the sandbox:
        while it runs, the sandbox is never idle-stopped, and its end counts as activity.

        Safe from any thread (embedded callers call rocklets from their own event loops).
        """
        return _Call(self, sandbox_id)

    def _call_began(self, sandbox_id: str) -> None:
        with self._in_flight_lock:
            self._in_flight[sandbox_id] = self._in_flight.get(sandbox_id, 0) + 1
        self.touch(sandbox_id)

    def _call_ended(self, sandbox_id: str) -> None:
        with self._in_flight_lock:
            left = self._in_flight.get(sandbox_id, 1) - 1
            if left > 0:
                self._in_flight[sandbox_id] = left
            else:
                self._in_flight.pop(sandbox_id, None)
        self.touch(sandbox_id)

    def touch(self, sandbox_id: str) -> None:
        """Count activity on ``sandbox_id`` (resets its idle timer); unknown ids are ignored."""
        live = self._live.get(sandbox_id)
        if live is not None:
            live.activity = time.time()

    # -- stop, delete, restart ---------------------------------------------------------------

    def _post_stop_plan(self, spec: SandboxSpec) -> tuple[State, int]:
        """What happens after a stop: (``deleted`` or ``archived``, after how many seconds)."""
        delay = spec.auto_delete_seconds if spec.auto_delete_seconds is not None else self.config.default_auto_delete_seconds
        cap = self.config.max_auto_delete_seconds
        if cap is not None:
            delay = min(delay, cap)
        return State.DELETED, delay

    async def stop(self, sandbox_id: str, reason: str = "manual") -> None:
        """Stop a sandbox (ROCK: unknown id and already stopped are not errors).

        Then, as its post-stop policy says: deleted at once (the default, ROCK's ``--rm``),
        or kept for ``restart`` until its ``auto_delete_time``.
        """
        live = self._live.get(sandbox_id)
        if live is None:
            return
        if live.start_scope is not None:
            live.start_scope.cancel()
            # A unit created in a worker thread while we cancelled is only known once the
            # start task has returned; wait for it so the unit is found and not leaked.
            with anyio.CancelScope(shield=True):
                await live.start_done.wait()
        async with live.lock:
            if live.record.state in LIVE_STATES:
                await self._stop_locked(live, reason)

    async def _stop_locked(
        self, live: _Live, reason: str, *, unexpected: bool = False, keep_seconds: int = 0
    ) -> None:
        """Stop the sandbox; ``keep_seconds``: keep its unit at least that long (files for inspection)."""
        record = live.record
        target, delay = self._post_stop_plan(record.spec)
        if unexpected and delay == 0:
            delay = _DEATH_GRACE_SECONDS
        delay = max(delay, keep_seconds)
        now = _now()
        record = self._apply(
            record, Event.STOP,
            stop_time=now, reason=reason,
            auto_transition_state=target, auto_transition_time=now + timedelta(seconds=delay),
        )
        live.client = None
        live.settled.set()
        if live.handle is None:
            # Stopped while starting: find a unit the start may have made (by its labels).
            try:
                found = await self.runtime.list({LABEL_SANDBOX_ID: record.sandbox_id, LABEL_ENGINE_ID: self.engine_id})
            except RockError:
                found = []
            for handle in found:
                await self._remove_quietly(handle)
        if delay == 0:
            # Removing a container takes dockerd a few hundred milliseconds; the caller need not
            # wait for it. The record turns ``deleted`` once the unit is gone.
            handle, live.handle = live.handle, None
            live.removing = True
            if self._tg is not None and not self._closed:
                self._tg.start_soon(self._remove_then_delete, live, handle)
            else:
                await self._remove_then_delete(live, handle, locked=True)
        elif live.handle is not None:
            try:
                await self.runtime.stop(live.handle, timeout=self.config.stop_timeout)
            except RockError as exc:
                log.warning("could not stop the unit of sandbox %s: %s", record.sandbox_id, exc)

    async def _remove_then_delete(self, live: _Live, handle: UnitHandle | None, locked: bool = False) -> None:
        with anyio.CancelScope(shield=True):
            if handle is not None:
                await self._remove_quietly(handle)
            if locked:
                self._delete_record(live)
            else:
                async with live.lock:
                    self._delete_record(live)

    def _delete_record(self, live: _Live) -> None:
        if live.record.state is State.STOPPED:
            self._apply(live.record, Event.DELETE, delete_time=_now(), auto_transition_state=None, auto_transition_time=None)

    async def delete(self, sandbox_id: str) -> None:
        """Delete a stopped or archived sandbox and its unit (unknown or deleted: no-op).

        :raises InvalidTransition: the sandbox is pending or running: stop it first.
        """
        live = self._live.get(sandbox_id)
        if live is None:
            return
        if live.removing:
            return  # already on its way to deleted
        async with live.lock:
            record = live.record
            record.lifecycle.apply(Event.DELETE, at=_now(), sandbox_id=sandbox_id)  # raises if not allowed
            if live.handle is not None:
                await self._remove_quietly(live.handle)
            self._apply(record, Event.DELETE, delete_time=_now(), auto_transition_state=None, auto_transition_time=None)

    async def restart(self, sandbox_id: str) -> SandboxStartResponse:
        """Start a stopped sandbox again in its own unit: files kept, sessions gone.

        :raises SandboxNotFound: unknown id.
        :raises BadRequestRockError: ``"cannot be restarted: current state is ..."``.
        """
        live = self._live.get(sandbox_id)
        record = live.record if live is not None else self.get_record(sandbox_id)
        if record.state is State.STOPPED and not self.runtime.keeps_files_across_stop:
            raise BadRequestRockError(
                f"Sandbox {sandbox_id} cannot be restarted: "
                + self.runtime.capabilities.missing("keeps_files_across_stop", self.runtime.name),
                sandbox_id=sandbox_id, attempted="restart",
            )
        if live is None or record.state is not State.STOPPED or live.handle is None:
            why = f"current state is {record.state.value}"
            if record.state in (State.STOPPED, State.DELETED) and record.spec.auto_delete_seconds in (None, 0):
                why += (
                    " and its container is removed at stop (auto_delete_seconds=0, the default); "
                    "start it with auto_delete_seconds > 0 to keep it restartable"
                )
            raise BadRequestRockError(
                f"Sandbox {sandbox_id} cannot be restarted: {why}", sandbox_id=sandbox_id, attempted="restart"
            )
        async with live.lock:
            self._apply(
                live.record, Event.RESTART,
                start_time=None, stop_time=None, reason=None,
                auto_transition_state=None, auto_transition_time=None,
                phases={
                    PHASE_IMAGE_PULL: Phase(status=PhaseStatus.WAITING),
                    PHASE_DOCKER_RUN: Phase(status=PhaseStatus.WAITING),
                },
            )
            live.settled = anyio.Event()
            live.start_done = anyio.Event()
            live.start_error = None
            live.activity = time.time()
        assert self._tg is not None
        self._tg.start_soon(self._run_start, sandbox_id, time.monotonic(), True)
        return start_response(live.record)

    # -- timers and reconciliation -------------------------------------------------------------

    async def unit_gone(self, sandbox_id: str, status: RuntimeStatus) -> None:
        """Record that a live sandbox's unit stopped or vanished behind rock's back."""
        live = self._live.get(sandbox_id)
        if live is None or live.record.state not in LIVE_STATES:
            return
        if live.record.state is State.PENDING and live.client is None:
            return  # the start in progress sees it and reports it itself
        async with live.lock:
            if live.record.state in LIVE_STATES:
                reason = _describe_exit(status)
                log.info("sandbox %s stopped: %s", sandbox_id, reason)
                await self._stop_locked(live, reason, unexpected=True)

    async def _timer_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.timer_interval)
            await self.run_timers()

    async def run_timers(self) -> None:
        """Stop idle sandboxes and delete stopped ones whose deadline passed, all at once (a
        burst of expiries does not wait on one another's container)."""
        now_ts = time.time()
        now = _now()
        expired: list[str] = []
        due: list[str] = []
        for sandbox_id, live in list(self._live.items()):
            record = live.record
            clear = record.spec.auto_clear_seconds
            with self._in_flight_lock:
                busy = bool(self._in_flight.get(sandbox_id))
            if busy:
                live.activity = now_ts  # a long command is activity until it ends
            elif record.state in LIVE_STATES and clear and now_ts > live.activity + clear:
                expired.append(sandbox_id)
            elif (
                record.state is State.STOPPED
                and not live.removing
                and record.auto_transition_state is State.DELETED
                and record.auto_transition_time is not None
                and record.auto_transition_time <= now
            ):
                due.append(sandbox_id)

        async def auto_delete(sandbox_id: str) -> None:
            try:
                await self.delete(sandbox_id)
            except RockError as exc:
                log.warning("auto-delete of %s failed: %s", sandbox_id, exc)

        async with anyio.create_task_group() as tg:
            for sandbox_id in expired:
                tg.start_soon(functools.partial(self.stop, sandbox_id, reason="expired"))
            for sandbox_id in due:
                tg.start_soon(auto_delete, sandbox_id)

    async def _reconcile_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.reconcile_interval)
            await self.reconcile()

    async def reconcile(self) -> None:
        """Compare every running sandbox with its unit; one that died is recorded as stopped.

        One ``list`` of this owner's units per call; only units the listing does not show running
        (or whose state it does not give) are inspected, for their exit code and reason.
        """
        running = {
            live.handle.unit_id: (sandbox_id, live)
            for sandbox_id, live in list(self._live.items())
            if live.record.state is State.RUNNING and live.handle is not None
        }
        if not running:
            return
        try:
            listed = {h.unit_id: h.state for h in await self.runtime.list({LABEL_OWNER: self.owner})}
        except RockError as exc:
            log.warning("could not list units to reconcile: %s", exc)
            return
        for unit_id, (sandbox_id, live) in running.items():
            if unit_id in listed and listed[unit_id] is UnitState.RUNNING:
                continue
            assert live.handle is not None
            try:
                status = await self.runtime.inspect(live.handle)
            except RockError as exc:
                log.warning("could not inspect sandbox %s: %s", sandbox_id, exc)
                continue
            if status.state is not UnitState.RUNNING:
                await self.unit_gone(sandbox_id, status)

    async def _disk_loop(self) -> None:
        if not self.runtime.capabilities.disk_usage:
            return  # its notes say which disk limits stay unenforced
        while True:
            await anyio.sleep(self.config.disk_check_interval)
            try:
                await self.check_disk()
            except NotSupported:
                log.info("runtime %r cannot measure disk use: disk limits it cannot enforce stay unenforced", self.runtime.name)
                return

    async def check_disk(self) -> list[str]:
        """One look at the disk use of every running sandbox (one runtime call for all of them);
        stop those past their ``disk`` limit, keeping their files. Return the ids stopped.

        Only sandboxes whose limit the runtime cannot enforce itself are measured (see
        :meth:`~rock_core.runtime.Runtime.disk_usage`). Each is stopped with the reason
        ``"disk limit exceeded: ..."`` and its unit kept for ``disk_keep_seconds`` (or longer,
        as its own policy says), so its files can be inspected or the sandbox restarted.

        :raises NotSupported: the runtime cannot measure disk use.
        """
        watched = {
            live.handle.unit_id: live
            for live in self._live.values()
            if live.record.state is State.RUNNING and live.handle is not None and live.record.spec.disk is not None
        }
        if not watched:
            return []
        try:
            usage = await self.runtime.disk_usage({LABEL_OWNER: self.owner})
        except NotSupported:
            raise
        except RockError as exc:
            log.warning("could not measure the disk use of sandboxes: %s", exc)
            return []
        over = [
            (watched[unit_id], used) for unit_id, used in usage.items()
            if unit_id in watched and used > (watched[unit_id].record.spec.disk or 0)
        ]
        async with anyio.create_task_group() as tg:
            for live, used in over:
                tg.start_soon(self._stop_over_disk, live, used)
        return [live.record.sandbox_id for live, _ in over]

    async def _stop_over_disk(self, live: _Live, used: int) -> None:
        limit = live.record.spec.disk or 0
        keep = self.config.disk_keep_seconds
        reason = (
            f"disk limit exceeded: the sandbox wrote {format_bytes(used)}, its limit is {format_bytes(limit)}; "
            f"its files are kept for at least {keep} s for inspection"
        )
        log.warning("stopping sandbox %s: %s", live.record.sandbox_id, reason)
        async with live.lock:
            if live.record.state is State.RUNNING:
                await self._stop_locked(live, reason, keep_seconds=keep)

    async def _watch_loop(self) -> None:
        """Follow the runtime's unit events (when it has them); reconnect after a failure."""
        if not self.runtime.capabilities.watch:
            return  # the reconcile loop polls instead
        while True:
            try:
                # By owner, not engine id: units recovered from an earlier run of this owner count.
                async for handle, status in self.runtime.watch({LABEL_OWNER: self.owner}):
                    if status.state is not UnitState.RUNNING:
                        if any(pool.forget(handle.unit_id) for pool in self._pools.values()):
                            continue
                        await self.unit_gone(handle.sandbox_id, status)
            except NotSupported:
                return  # the reconcile loop polls instead
            except RockError as exc:
                log.warning("lost the runtime's event stream (%s); reconnecting", exc)
            await anyio.sleep(1.0)
