"""A runtime in memory whose calls a test holds and lets through: races, scripted.

:class:`ScriptedRuntime` keeps its units in a dict; every unit's rocklet is one real rocklet
(:func:`rocklet_in_thread`, rock's own server on 127.0.0.1) so the engine's readiness checks and
claims talk HTTP to a rocklet as they do with Docker. A test holds a method with
:meth:`ScriptedRuntime.hold`; the calls to it then wait at a :class:`Gate` until the test
releases them, one by one (:meth:`Gate.release`) or all (:meth:`Gate.open`). The test waits on
the gate's arrivals (:meth:`Gate.arrivals`), never on a clock, so an order of events is forced,
not hoped for::

    runtime = ScriptedRuntime(rocklet)
    create = runtime.hold("create")
    started = await engine.start_async(request)
    await create.arrivals(1)          # the start is inside runtime.create now
    await engine.stop(started.sandbox_id)  # ... and the stop races it

It is for the engine's own tests (no Docker, no sleeps); the same behaviours are checked
against Docker by the tests that use the real runtime.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import tempfile
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from rock_core.errors import RuntimeFailure
from rock_core.models import Port, RuntimeStatus, SandboxSpec, UnitState
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle

__all__ = ["SNAPSHOT_SIZE", "Gate", "ScriptedRuntime", "rocklet_in_thread"]

#: The size of a :class:`ScriptedRuntime` unit's snapshot.
SNAPSHOT_SIZE = 1024 * 1024
_SNAPSHOT_MAGIC = b"scripted-snapshot:"


@contextlib.contextmanager
def rocklet_in_thread() -> Iterator[tuple[str, int]]:
    """Serve a real rocklet (no secret asked) on 127.0.0.1 in a daemon thread; yield ``(host, port)``."""
    from rock_core.rocklet.api import Rocklet, build_router
    from rock_core.rocklet.server import RockletServer

    with tempfile.TemporaryDirectory(prefix="rock-scripted-rocklet-") as state_dir:
        server = RockletServer(build_router(Rocklet(state_dir)), "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, name="scripted-rocklet", daemon=True)
        thread.start()
        try:
            yield server.address
        finally:
            server.shutdown()
            thread.join(timeout=5)


class Gate:
    """Where the calls of one held method wait until the test lets them through.

    :attr:`arrived` lists the sandbox ids of the calls in the order they came (released or not);
    :attr:`waiting` those held now.
    """

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self._held: list[tuple[str, anyio.Event]] = []
        self._open = False
        self._changed = anyio.Event()

    @property
    def waiting(self) -> list[str]:
        """The sandbox ids of the calls held at the gate now, in order of arrival."""
        return [sandbox_id for sandbox_id, _ in self._held]

    async def arrivals(self, count: int) -> list[str]:
        """Return once ``count`` calls have come to the gate (the first ``count`` of :attr:`arrived`)."""
        while len(self.arrived) < count:
            await self._changed.wait()
        return self.arrived[:count]

    def release(self, sandbox_id: str | None = None) -> str:
        """Let one held call through: the first of ``sandbox_id`` (default: the first held); its id.

        :raises LookupError: no such call is held.
        """
        for i, (held_id, event) in enumerate(self._held):
            if sandbox_id is None or held_id == sandbox_id:
                del self._held[i]
                event.set()
                return held_id
        raise LookupError(f"no call for {sandbox_id!r} is held at this gate (held: {self.waiting})")

    def open(self) -> None:
        """Let every held call through, and every later one without holding it."""
        self._open = True
        for _, event in self._held:
            event.set()
        self._held.clear()

    async def enter(self, sandbox_id: str) -> None:
        """Called by the runtime: note the arrival and wait until released (a cancelled call leaves)."""
        self.arrived.append(sandbox_id)
        self._changed.set()
        self._changed = anyio.Event()
        if self._open:
            return
        entry = (sandbox_id, anyio.Event())
        self._held.append(entry)
        try:
            await entry[1].wait()
        finally:
            if entry in self._held:
                self._held.remove(entry)


@attrs.define
class _Unit:
    sandbox_id: str
    labels: dict[str, str]
    state: UnitState = UnitState.CREATED


class ScriptedRuntime(Runtime):
    """A runtime holding its units in memory, each served by the rocklet at ``rocklet_address``:
    ``(host, port)``, or ``(path, 0)`` for a rocklet on the unix socket ``path`` (reached as
    rock-docker's sandboxes are by default, through :attr:`RuntimeStatus.rocklet_socket`).

    It declares ``assign`` (warm pools), ``keeps_files_across_stop`` and ``snapshot``; a stopped
    unit exits with code 0. A unit's snapshot is :data:`SNAPSHOT_SIZE` bytes that name its
    sandbox; :attr:`snapshot_failure`, when set, is raised by the snapshot stream half way;
    :attr:`remove_failures` makes that many removals fail. :attr:`units` is its state, for tests to look at.
    """

    name = "scripted"
    keeps_files_across_stop = True

    def __init__(self, rocklet_address: tuple[str, int]) -> None:
        self.rocklet_address = rocklet_address
        #: Every unit that exists, by unit id.
        self.units: dict[str, _Unit] = {}
        self._gates: dict[str, Gate] = {}
        self._ids = itertools.count(1)
        #: Raised by the next snapshot streams half way, when set (a disk or network failure).
        self.snapshot_failure: Exception | None = None
        #: How many of the next ``remove`` calls fail (a runtime that does not answer for a while).
        self.remove_failures = 0

    def hold(self, method: str) -> Gate:
        """Hold every later call of ``method`` (``create``, ``start``, ``stop``, ``remove``,
        ``assign``, ``snapshot``, ``restore``) at the gate returned, before it does anything."""
        if method not in ("create", "start", "stop", "remove", "assign", "snapshot", "restore"):
            raise ValueError(f"cannot hold {method!r}")
        gate = self._gates[method] = Gate()
        return gate

    def open_gates(self) -> None:
        """Let every held call through, now and later (before closing an engine, so that a
        failed test does not leave its clean-up held)."""
        for gate in self._gates.values():
            gate.open()

    async def _gate(self, method: str, sandbox_id: str) -> None:
        gate = self._gates.get(method)
        if gate is not None:
            await gate.enter(sandbox_id)

    def _handle(self, unit_id: str, unit: _Unit) -> UnitHandle:
        return UnitHandle(
            self.name, unit_id, unit.sandbox_id, labels=dict(unit.labels), state=unit.state
        )

    async def create(
        self,
        spec: SandboxSpec,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
    ) -> UnitHandle:
        """Make a unit (created, not started) for ``spec``."""
        assert spec.sandbox_id is not None
        await self._gate("create", spec.sandbox_id)
        unit_id = f"unit-{next(self._ids)}"
        unit = self.units[unit_id] = _Unit(spec.sandbox_id, dict(labels))
        return self._handle(unit_id, unit)

    async def start(self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None) -> None:
        """Mark the unit running (its rocklet is the shared one, already listening)."""
        await self._gate("start", handle.sandbox_id)
        self.units[handle.unit_id].state = UnitState.RUNNING

    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """Mark the unit exited (a missing unit: nothing to do)."""
        await self._gate("stop", handle.sandbox_id)
        unit = self.units.get(handle.unit_id)
        if unit is not None:
            unit.state = UnitState.EXITED

    async def remove(self, handle: UnitHandle) -> None:
        """Forget the unit (a missing unit: nothing to do)."""
        await self._gate("remove", handle.sandbox_id)
        if self.remove_failures > 0:
            self.remove_failures -= 1
            raise RuntimeFailure(
                "the runtime did not answer", sandbox_id=handle.sandbox_id, attempted="remove"
            )
        self.units.pop(handle.unit_id, None)

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """The unit's state; a running unit reports the shared rocklet."""
        unit = self.units.get(handle.unit_id)
        if unit is None:
            return RuntimeStatus(state=UnitState.MISSING)
        if unit.state is not UnitState.RUNNING:
            return RuntimeStatus(
                state=unit.state, exit_code=0 if unit.state is UnitState.EXITED else None
            )
        host, port = self.rocklet_address
        if host.startswith("/"):
            return RuntimeStatus(state=UnitState.RUNNING, rocklet_socket=host)
        return RuntimeStatus(state=UnitState.RUNNING, rocklet_host=host, rocklet_port=Port(port))

    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """The units carrying every one of ``labels``, with their labels and state."""
        return [
            self._handle(unit_id, unit)
            for unit_id, unit in self.units.items()
            if all(unit.labels.get(k) == v for k, v in labels.items())
        ]

    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """No output."""
        return ""

    async def assign(self, handle: UnitHandle, sandbox_id: str) -> UnitHandle:
        """Give a started pool member to ``sandbox_id`` (its labels stay as they were)."""
        await self._gate("assign", sandbox_id)
        unit = self.units[handle.unit_id]
        unit.sandbox_id = sandbox_id
        return self._handle(handle.unit_id, unit)

    async def snapshot(self, handle: UnitHandle) -> AsyncIterator[bytes]:
        """:data:`SNAPSHOT_SIZE` bytes naming the unit's sandbox, in 64 KiB chunks."""
        await self._gate("snapshot", handle.sandbox_id)
        if handle.unit_id not in self.units:
            raise RuntimeFailure(
                f"unit {handle.unit_id} is gone", sandbox_id=handle.sandbox_id, attempted="snapshot"
            )
        header = _SNAPSHOT_MAGIC + handle.sandbox_id.encode() + b"\n"
        failure = self.snapshot_failure

        async def chunks() -> AsyncIterator[bytes]:
            yield header
            left = SNAPSHOT_SIZE - len(header)
            while left > 0:
                if failure is not None and left < SNAPSHOT_SIZE // 2:
                    raise failure
                n = min(left, 64 * 1024)
                yield b"\0" * n
                left -= n
                await anyio.lowlevel.checkpoint()

        return chunks()

    async def restore(
        self,
        spec: SandboxSpec,
        snapshot: AsyncIterable[bytes],
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
    ) -> UnitHandle:
        """A created unit for ``spec``, if ``snapshot`` is a whole snapshot of its sandbox."""
        assert spec.sandbox_id is not None
        await self._gate("restore", spec.sandbox_id)
        size = 0
        head = b""
        async for chunk in snapshot:
            if len(head) < 256:
                head += chunk[:256]
            size += len(chunk)
        if (
            not head.startswith(_SNAPSHOT_MAGIC + spec.sandbox_id.encode() + b"\n")
            or size != SNAPSHOT_SIZE
        ):
            raise RuntimeFailure(
                f"snapshot of sandbox {spec.sandbox_id} is corrupt ({size} bytes, starting {head[:32]!r})",
                sandbox_id=spec.sandbox_id,
                attempted="restore",
            )
        unit_id = f"unit-{next(self._ids)}"
        unit = self.units[unit_id] = _Unit(spec.sandbox_id, dict(labels))
        return self._handle(unit_id, unit)

    def running(self) -> builtins.list[str]:
        """The sandbox ids of the running units."""
        return [u.sandbox_id for u in self.units.values() if u.state is UnitState.RUNNING]

    def __repr__(self) -> str:
        units: Any = {k: (u.sandbox_id, u.state.value) for k, u in self.units.items()}
        return f"ScriptedRuntime(units={units})"
