"""Engines of one cluster on one PostgreSQL database (issue #24 points 2 and 3): real engines
(:class:`~rock_core.engine.manager.SandboxManager` with ``[engine] cluster``), one
:class:`~rock_core.testing.ScriptedRuntime` they share (as admins share one Docker) with one real
rocklet, and the lease of rock-postgres. Exactly one engine leads and runs the background work;
when it closes, the other takes over and runs it, for sandboxes the first started; a leader whose
renewals are held (as in ``SIGSTOP``) stops its background work when its lease runs out, and a
write under its stale epoch does nothing. Waits are for events, each with a generous guard."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import anyio
import anyio.abc
import attrs
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine import fencing
from rock_core.engine.config import EngineConfig
from rock_core.engine.leadership import LEASE_TTL
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter
from rock_core.models import UnitState
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, eventually_async, rocklet_in_thread
from rock_core.testing.record_conformance import sample_record
from rock_postgres.lease import Lease
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_url, run_sql  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 120  # a guard against a hang (the engine regressed); nothing waits for it to pass
REQUEST = SandboxStartRequest(image="scripted:1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


def _config(store: str, cluster: str) -> EngineConfig:
    return EngineConfig(
        store=store,
        cluster=cluster,
        timer_interval=0.2,
        reconcile_interval=0.2,
        remove_on_close=False,
    )


def _engine(url: str, cluster: str, runtime: ScriptedRuntime) -> SandboxManager:
    return SandboxManager(_config(url, cluster), runtime=runtime, owner="ha")


class _Serving:
    """An engine open in a task of its own, as in an admin process: closed by :meth:`close`
    in any order with the others."""

    def __init__(self, engine: SandboxManager, tg: anyio.abc.TaskGroup) -> None:
        self.engine = engine
        self._opened = anyio.Event()
        self._close = anyio.Event()
        self._closed = anyio.Event()
        tg.start_soon(self._serve)

    async def _serve(self) -> None:
        try:
            async with self.engine:
                self._opened.set()
                await self._close.wait()
        finally:
            self._closed.set()

    async def opened(self) -> SandboxManager:
        await self._opened.wait()
        return self.engine

    async def close(self) -> None:
        self._close.set()
        await self._closed.wait()


def _leading(engine: SandboxManager) -> bool:
    return engine.role is not None and engine.role.leading


def _stored_state(url: str, sandbox_id: str) -> str:
    [[state]] = run_sql(url, "SELECT state FROM rock_sandbox WHERE sandbox_id = $1", sandbox_id)
    return str(state)


async def _one_leader_at_most(a: SandboxManager, b: SandboxManager, times: int) -> None:
    """Look ``times`` times, a tenth of a renewal apart, that they never lead both at once."""
    for _ in range(times):
        assert not (_leading(a) and _leading(b))
        await anyio.sleep(0.1)


async def _kill_unit(runtime: ScriptedRuntime, engine: SandboxManager, sandbox_id: str) -> None:
    """The sandbox's unit exits behind rock's back (only reconcile notices)."""
    unit_id = engine.get_record(sandbox_id).unit_id
    assert unit_id is not None
    runtime.units[unit_id].state = UnitState.EXITED


def test_a_cluster_needs_a_store_that_holds_a_lease() -> None:
    async def main() -> None:
        config = EngineConfig(cluster="c", remove_on_close=False)  # SQLite in memory
        with pytest.raises(InvalidParameter) as caught:
            async with SandboxManager(config, runtime=ScriptedRuntime(("127.0.0.1", 1))):
                pass
        assert caught.value.field == "cluster" and "'c'" in str(caught.value)

    anyio.run(main)


def test_a_cluster_needs_remove_on_close_off() -> None:
    with pytest.raises(InvalidParameter) as caught:
        EngineConfig(cluster="c", store="postgresql://x/y")
    assert caught.value.field == "cluster" and "remove_on_close" in str(caught.value)


async def test_one_leader_runs_the_background_work_and_the_other_takes_over_when_it_closes(
    postgres_url: str, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            serving_a = _Serving(_engine(postgres_url, "close", runtime), tg)
            a = await serving_a.opened()
            await eventually_async(lambda: _leading(a), what="a leads")
            serving_b = _Serving(_engine(postgres_url, "close", runtime), tg)
            b = await serving_b.opened()
            await _one_leader_at_most(a, b, 30)
            assert _leading(a) and not _leading(b)
            assert b.role is not None and b.role.terms == 0
            sandbox_id = (await a.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await a.wait_until_running(sandbox_id)
            await serving_a.close()  # the lease is handed over at once
            await eventually_async(lambda: _leading(b), what="b takes over")
            # b runs the background work, for a sandbox a started: its reconcile sees the
            # unit exit and records the sandbox stopped.
            await eventually_async(lambda: sandbox_id in b._core.live, what="b took it in")
            await _kill_unit(runtime, b, sandbox_id)
            await eventually_async(
                lambda: _stored_state(postgres_url, sandbox_id) == State.STOPPED.value,
                what="b's reconcile records the sandbox stopped",
            )
            await serving_b.close()


async def test_a_leader_whose_renewals_are_held_stops_and_its_stale_writes_do_nothing(
    postgres_url: str, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    gate = threading.Event()
    with anyio.fail_after(HANG):
        async with _engine(postgres_url, "held", runtime) as a:
            await eventually_async(lambda: _leading(a), what="a leads")
            async with _engine(postgres_url, "held", runtime) as b:
                sandbox_id = (await a.start_async(REQUEST)).sandbox_id
                assert sandbox_id is not None
                await a.wait_until_running(sandbox_id)
                assert a.role is not None and b.role is not None
                lease = a.role.leadership
                assert isinstance(lease, Lease)
                fence = a.role.fence
                assert fence is not None
                renew, acquire = lease.renew, lease.acquire

                def held_renew(epoch: int) -> bool:  # a's lease calls hang, as in a pause
                    gate.wait(HANG)
                    return renew(epoch)

                def held_acquire() -> int | None:
                    gate.wait(HANG)
                    return acquire()

                lease.renew = held_renew  # type: ignore[method-assign]
                lease.acquire = held_acquire  # type: ignore[method-assign]
                try:
                    # Its lease runs out by its own clock: its background work is stopped.
                    await eventually_async(lambda: a.role.fence is None, what="a stops leading")
                    assert not _leading(a) and a.role.terms == 1
                    await eventually_async(lambda: _leading(b), what="b takes over")
                    await _one_leader_at_most(a, b, 10)
                    # A write of a's background work now: fenced off, in memory and in the store.
                    record = a.get_record(sandbox_id)
                    stale = attrs.evolve(record, state=State.STOPPED)
                    token = fencing.entered(fence)
                    try:
                        assert not a._core.save(stale)
                    finally:
                        fencing.left(token)
                    assert not lease.put_fenced(stale, fence.epoch)  # even past the local check
                    assert _stored_state(postgres_url, sandbox_id) == State.RUNNING.value
                    assert a.get_record(sandbox_id).state is State.RUNNING
                    # The background work is b's now: the unit's exit is recorded by b alone.
                    await eventually_async(
                        lambda: sandbox_id in b._core.live, what="b took the sandbox in"
                    )
                    await _kill_unit(runtime, b, sandbox_id)
                    await eventually_async(
                        lambda: _stored_state(postgres_url, sandbox_id) == State.STOPPED.value,
                        what="b's reconcile records the sandbox stopped",
                    )
                    # a did not act: it dropped what it held on losing the lease, and reads
                    # the sandbox from the store as every follower does (b's record).
                    assert sandbox_id not in a._core.live
                    assert a.get_record(sandbox_id).state is State.STOPPED
                finally:
                    gate.set()


def test_a_fenced_write_goes_in_under_the_current_epoch_only(postgres_url: str) -> None:
    store = PostgresRecordStore(postgres_url)
    store.open()
    try:
        one = store.leadership("fenced", "one", 60.0)
        two = store.leadership("fenced", "two", 60.0)
        epoch = one.acquire()
        assert epoch is not None
        record = sample_record("fenced-1")
        assert one.put_fenced(record, epoch)  # a new row
        assert store.get(record.sandbox_id) == record
        assert not two.put_fenced(attrs.evolve(record, state=State.STOPPED), epoch)
        run_sql(postgres_url, "UPDATE rock_lease SET expires_at = now() WHERE name = 'fenced'")
        newer = two.acquire()
        assert newer is not None and newer > epoch
        assert not one.put_fenced(attrs.evolve(record, state=State.STOPPED), epoch)
        assert not one.put_fenced(sample_record("other"), epoch)
        assert store.get("other") is None
        stored = store.get(record.sandbox_id)
        assert stored is not None and stored.state is State.RUNNING
        assert two.put_fenced(attrs.evolve(record, state=State.STOPPED), newer)
        stored = store.get(record.sandbox_id)
        assert stored is not None and stored.state is State.STOPPED
    finally:
        store.close()


class _Witness(ScriptedRuntime):
    """A scripted runtime that notes every call made under a fence that had lapsed."""

    def __init__(self, rocklet: tuple[str, int]) -> None:
        super().__init__(rocklet)
        self.lapsed_calls: list[str] = []
        self.calls_under_fence = 0

    def _note(self, name: str) -> None:
        fence = fencing.current()
        if fence is not None:
            self.calls_under_fence += 1
            if not fence.valid():
                self.lapsed_calls.append(name)

    async def list(self, labels):  # type: ignore[no-untyped-def]
        self._note("list")
        return await super().list(labels)

    async def inspect(self, handle):  # type: ignore[no-untyped-def]
        self._note("inspect")
        return await super().inspect(handle)


async def test_a_leader_whose_loop_was_paused_past_its_lease_does_nothing_on_the_runtime(
    postgres_url: str, rocklet: tuple[str, int]
) -> None:
    """The whole event loop stops (as in SIGSTOP) past the lease's end while a background loop
    is due; when it runs again, no call of the background work reaches the runtime under the
    lapsed lease: the work is refused, then cancelled, and the engine leads again under a
    new epoch."""
    runtime = _Witness(rocklet)
    with anyio.fail_after(HANG):
        async with _engine(postgres_url, "paused", runtime) as a:
            await eventually_async(lambda: _leading(a), what="a leads")
            sandbox_id = (await a.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await a.wait_until_running(sandbox_id)
            await eventually_async(
                lambda: runtime.calls_under_fence > 0, what="the background work reaches it"
            )
            assert a.role is not None
            fence = a.role.fence
            assert fence is not None
            await _kill_unit(runtime, a, sandbox_id)  # due for the next reconcile
            time.sleep(LEASE_TTL + 1)  # the loop is paused past the lease's end
            await eventually_async(
                lambda: a.role is not None and a.role.terms == 2, what="a leads again"
            )
            assert a.role.fence is not None and a.role.fence.epoch > fence.epoch
            assert runtime.lapsed_calls == []
            # Under the new epoch the reconcile records the unit's exit.
            await eventually_async(
                lambda: _stored_state(postgres_url, sandbox_id) == State.STOPPED.value,
                what="the sandbox recorded stopped under the new lease",
            )
