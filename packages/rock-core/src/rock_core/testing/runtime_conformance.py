"""The runtime conformance suite: what every rock runtime must do, checked against the real thing.

Subclass :class:`RuntimeConformance` in a test module and provide two class-scoped fixtures,
``runtime`` (an instance of your runtime) and ``image`` (an image with ``python3``)::

    import pytest
    from rock_core.testing import RuntimeConformance

    class TestMyRuntime(RuntimeConformance):
        @pytest.fixture(scope="class")
        @classmethod
        async def runtime(cls):
            async with MyRuntime() as runtime:
                yield runtime

        @pytest.fixture(scope="class")
        @classmethod
        def image(cls):
            return "python:3.11"

Optional hooks make more of the suite run; without them, the checks that need them are skipped
with a message saying what to provide:

``image_without_python`` (fixture)
    an image without ``python3``, for the "clear error naming the fix" check;
``unknown_image`` (fixture)
    an image name no registry has (default: one on a closed port of 127.0.0.1);
``kill_behind_back(handle)`` / ``remove_behind_back(handle)`` (async methods)
    end the unit without the runtime (``docker kill`` / ``docker rm -f``), for the checks that
    the runtime then reports it ``exited`` / ``missing``, and that :meth:`Runtime.watch`, if
    supported, reports both.

Every test runs real units through the runtime and talks to their rocklet over HTTP. Units
carry a label unique to the test class, and are all removed when the class finishes, failed
tests' included. The tests are async (anyio, asyncio backend); class attributes tune the
sizes and time limits (:attr:`RuntimeConformance.spec_defaults`, ...).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import anyio
import pytest

from rock_core.errors import (
    ImagePullFailed,
    NotSupported,
    RockError,
    SandboxAlreadyExists,
    SandboxNotFound,
)
from rock_core.models import (
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    PhaseStatus,
    Port,
    PullPolicy,
    UnitState,
)
from rock_core.rocklet.server import TOKEN_ENV, TOKEN_HEADER
from rock_core.rocklet_client import new_http_client
from rock_core.runtime import Runtime, UnitHandle
from rock_core.sizes import MiB
from rock_core.testing.fixtures import (
    LABEL_RUN,
    PhaseLog,
    StartedUnit,
    Units,
    rocklet_call,
    unique_sandbox_id,
    wait_for_unit,
)

__all__ = ["RuntimeConformance"]


class RuntimeConformance:
    """The conformance tests for a :class:`~rock_core.runtime.Runtime`; subclass it as ``Test...``.

    Required fixtures (class-scoped): ``runtime``, ``image``. Optional: ``image_without_python``,
    ``unknown_image``, and the methods :meth:`kill_behind_back` and :meth:`remove_behind_back`.
    """

    pytestmark: ClassVar[Any] = pytest.mark.anyio

    #: SandboxSpec fields of every unit the suite creates (``image`` comes from the fixture).
    spec_defaults: ClassVar[dict[str, Any]] = {"memory": 256 * MiB, "cpus": 1.0, "disk": None}
    #: The memory limit of the OOM check, and how much its command tries to use.
    oom_limit: ClassVar[int] = 64 * MiB
    oom_attempt: ClassVar[int] = 256 * MiB
    #: The container ports every unit must publish, and the host they must be published on
    #: (``None``: any host).
    published_ports: ClassVar[tuple[int, ...]] = (ROCKLET_PORT, 8080)
    rocklet_host: ClassVar[str | None] = "127.0.0.1"
    #: Upper bounds that turn a hang into a failure (never timing goals).
    startup_timeout: ClassVar[float] = 60.0
    stop_timeout: ClassVar[float] = 10.0
    pull_failure_timeout: ClassVar[float] = 60.0

    # -- fixtures a subclass provides ----------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def anyio_backend(cls) -> str:
        """The suite runs on asyncio, one event loop per class (its fixtures are class-scoped)."""
        return "asyncio"

    @pytest.fixture(scope="class")
    @classmethod
    def runtime(cls) -> Runtime:
        """The runtime under test (class-scoped). Subclasses must override this fixture."""
        pytest.fail(
            f"{cls.__name__} must define a class-scoped `runtime` fixture returning the runtime to test"
        )

    @pytest.fixture(scope="class")
    @classmethod
    def image(cls) -> str:
        """An image with ``python3`` (>= 3.8) and ``/bin/sh``. Subclasses must override this fixture."""
        pytest.fail(
            f"{cls.__name__} must define a class-scoped `image` fixture naming an image with python3"
        )

    @pytest.fixture(scope="class")
    @classmethod
    def image_without_python(cls) -> str:
        """An image with ``/bin/sh`` but no ``python3``; override to run the check that needs it."""
        pytest.skip(
            "provide an `image_without_python` fixture to check the error for images without python3"
        )

    @pytest.fixture(scope="class")
    @classmethod
    def unknown_image(cls) -> str:
        """An image no registry can provide; the default names a registry on a closed local port."""
        return "127.0.0.1:9/rock-conformance/no-such-image:latest"

    async def kill_behind_back(self, handle: UnitHandle) -> None:
        """End the unit's process without the runtime (``docker kill``); the unit itself stays."""
        pytest.skip("override kill_behind_back() to check units killed behind the runtime's back")

    async def remove_behind_back(self, handle: UnitHandle) -> None:
        """Remove the unit without the runtime (``docker rm -f``)."""
        pytest.skip(
            "override remove_behind_back() to check units removed behind the runtime's back"
        )

    # -- the suite's own fixtures ----------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    async def units(cls, runtime: Runtime, image: str) -> AsyncIterator[Units]:
        """Makes units labelled for this class, and removes all of them when the class is done."""
        labels = {LABEL_RUN: uuid.uuid4().hex, "rock.engine": "conformance"}
        token = secrets.token_urlsafe(16)
        async with new_http_client() as http:
            http.headers[TOKEN_HEADER] = token
            made = Units(
                runtime,
                http,
                labels,
                {**cls.spec_defaults, "image": image},
                startup_timeout=cls.startup_timeout,
                token=token,
            )
            try:
                yield made
            finally:
                with anyio.CancelScope(shield=True):
                    await made.remove_all()

    @pytest.fixture(scope="class")
    @classmethod
    async def shared(cls, units: Units) -> StartedUnit:
        """One started unit, shared by the checks that only look at it."""
        return await units.launch()

    # -- create, start, inspect ------------------------------------------------------------------

    async def test_create_reports_image_pull_phases(self, shared: StartedUnit) -> None:
        """``create`` (or, on a runtime whose nodes pull the image when the unit is placed,
        ``start``) reports ``image_pull`` as running, then success; ``waiting`` before that is allowed."""
        statuses = [
            s for s in shared.phases.statuses(PHASE_IMAGE_PULL) if s is not PhaseStatus.WAITING
        ]
        assert statuses, f"no image_pull phase reported: {shared.phases.events!r}"
        assert statuses[0] is PhaseStatus.RUNNING
        assert statuses[-1] is PhaseStatus.SUCCESS
        last = shared.phases.last(PHASE_IMAGE_PULL)
        assert last is not None and last.message, "the final image_pull phase has no message"

    async def test_started_unit_runs_with_published_ports(
        self, runtime: Runtime, shared: StartedUnit
    ) -> None:
        """A started unit is ``running``, with each of its ports either published by the runtime
        or listed for the engine to forward, and the rocklet reachable: at its published port,
        or (when the engine forwards 22555) at a unix socket."""
        status = await runtime.inspect(shared.handle)
        assert status.state is UnitState.RUNNING
        assert status.exit_code is None
        for port in self.published_ports:
            assert port in status.port_mapping or port in status.forwarded_ports, (
                f"port {port} neither published nor forwarded: {status.port_mapping}, {status.forwarded_ports}"
            )
        if Port(ROCKLET_PORT) in status.forwarded_ports:
            assert status.rocklet_socket is not None or status.rocklet_port is not None
            return
        assert status.rocklet_port == status.port_mapping[Port(ROCKLET_PORT)]
        if self.rocklet_host is not None:
            assert status.rocklet_host == self.rocklet_host

    async def test_rocklet_answers_at_the_reported_address(
        self, units: Units, shared: StartedUnit
    ) -> None:
        """The rocklet answers ``GET /is_alive`` at the address ``inspect`` reports."""
        response = await units.http.get(f"{shared.url}/is_alive")
        assert response.status_code == 200
        assert response.json()["is_alive"] is True

    async def test_list_finds_units_by_their_labels(
        self, runtime: Runtime, units: Units, shared: StartedUnit
    ) -> None:
        """``list`` finds a unit by any subset of its labels, and nothing for labels it lacks."""
        found = await runtime.list(units.labels_for(shared.handle.sandbox_id))
        assert [(h.unit_id, h.sandbox_id, h.runtime) for h in found] == [
            (shared.handle.unit_id, shared.handle.sandbox_id, shared.handle.runtime)
        ]
        assert shared.handle.unit_id in {h.unit_id for h in await runtime.list(units.labels)}
        assert await runtime.list({**units.labels, LABEL_RUN: "no-such-run"}) == []

    async def test_logs_hold_the_rocklets_output(
        self, runtime: Runtime, shared: StartedUnit
    ) -> None:
        """``logs`` returns the unit's output (the rocklet writes a line when it listens); ``tail`` cuts it."""
        text = await runtime.logs(shared.handle)
        assert text.strip(), "the logs of a unit whose rocklet started are empty"
        assert len((await runtime.logs(shared.handle, tail=1)).splitlines()) <= 1

    # -- lifecycle -------------------------------------------------------------------------------

    async def test_stop_and_remove(self, runtime: Runtime, units: Units) -> None:
        """Every runtime: stop makes the unit exited (twice is fine), remove makes it ``missing``,
        and a gone unit cannot be started nor its logs read."""
        unit = await units.launch()
        handle = unit.handle
        await runtime.stop(handle, timeout=self.stop_timeout)
        stopped = await runtime.inspect(handle)
        assert stopped.state in (UnitState.EXITED, UnitState.MISSING)
        assert stopped.rocklet_address is None, "a stopped unit reports a rocklet address"
        await runtime.stop(
            handle, timeout=self.stop_timeout
        )  # stopping a stopped unit does nothing
        await runtime.remove(handle)
        assert (await runtime.inspect(handle)).state is UnitState.MISSING
        assert await runtime.list(units.labels_for(handle.sandbox_id)) == []
        # Gone: stop and remove do nothing, the others say so.
        await runtime.stop(handle, timeout=self.stop_timeout)
        await runtime.remove(handle)
        with pytest.raises(SandboxNotFound):
            await runtime.start(handle)
        with pytest.raises(SandboxNotFound):
            await runtime.logs(handle)

    async def test_a_stopped_unit_keeps_its_files_and_starts_again(
        self, runtime: Runtime, units: Units
    ) -> None:
        """Capability ``keeps_files_across_stop``: a stopped unit is ``exited`` with an exit code
        and, started again, has the files written before the stop (``restart()``)."""
        if not runtime.keeps_files_across_stop:
            pytest.skip(
                f"runtime {runtime.name!r} declares keeps_files_across_stop=False (no restart of stopped sandboxes)"
            )
        unit = await units.launch()
        handle = unit.handle
        content = f"written before the stop {uuid.uuid4().hex}"
        await rocklet_call(
            units.http,
            unit.url,
            "/write_file",
            {"path": "/tmp/rock-conformance.txt", "content": content},
        )

        await runtime.stop(handle, timeout=self.stop_timeout)
        stopped = await runtime.inspect(handle)
        assert stopped.state is UnitState.EXITED
        assert stopped.exit_code is not None

        status, url = await units.start_ready(handle)
        assert status.state is UnitState.RUNNING
        answer = await rocklet_call(
            units.http, url, "/read_file", {"path": "/tmp/rock-conformance.txt"}
        )
        assert answer["content"] == content
        await runtime.remove(handle)

    async def test_created_unit_is_not_running(self, runtime: Runtime, units: Units) -> None:
        """``create`` does not start the unit: it is ``created``, with no rocklet address."""
        handle = await units.create()
        try:
            status = await runtime.inspect(handle)
            assert status.state is UnitState.CREATED
            assert status.rocklet_address is None
        finally:
            await runtime.remove(handle)

    # -- failures --------------------------------------------------------------------------------

    async def test_unknown_image_fails_fast_with_the_reason(
        self, runtime: Runtime, units: Units, unknown_image: str
    ) -> None:
        """An image nobody has fails ``create`` (or ``start``, where the unit's node pulls it)
        with ImagePullFailed, phase ``failed``, no unit left."""
        phases = PhaseLog()
        spec = units.spec(image=unknown_image)
        assert spec.sandbox_id is not None
        # A runtime that retries until some timeout instead of failing on the first answer fails here.
        with anyio.fail_after(self.pull_failure_timeout):
            with pytest.raises(ImagePullFailed) as caught:
                handle = await units.create(spec, on_phase=phases)
                await runtime.start(handle, on_phase=phases)
        assert "Failed to pull image" in str(caught.value)
        assert unknown_image in str(caught.value)
        last = phases.last(PHASE_IMAGE_PULL)
        assert last is not None and last.status is PhaseStatus.FAILED
        assert "Failed to pull image" in last.message
        assert await runtime.list(units.labels_for(spec.sandbox_id)) == []

    async def test_image_without_python_names_the_fix(
        self, runtime: Runtime, units: Units, image_without_python: str
    ) -> None:
        """An image without python3 fails with an error that says python3 is needed."""
        handle = await units.create(units.spec(image=image_without_python))
        try:
            await runtime.start(handle)
        except RockError as exc:
            message = str(exc)
        else:
            status = await wait_for_unit(
                runtime,
                handle,
                lambda s: s.state is not UnitState.RUNNING and s.state is not UnitState.CREATED,
                what="exited",
                timeout=self.startup_timeout,
            )
            assert status.state is UnitState.EXITED
            message = status.error or ""
        assert "python3" in message, f"the error does not say python3 is needed: {message!r}"

    async def test_memory_limit_is_enforced(self, runtime: Runtime, units: Units) -> None:
        """A command using more memory than the limit is OOM-killed, and ``inspect`` says so."""
        unit = await units.launch(units.spec(memory=self.oom_limit))
        script = f"data = b'x' * {self.oom_attempt}; print(len(data))"
        answer = await rocklet_call(
            units.http,
            unit.url,
            "/execute",
            {"command": ["python3", "-c", script], "shell": False, "timeout": 120},
        )
        assert answer["exit_code"] in (-9, 137), f"the allocation was not killed: {answer!r}"
        await runtime.stop(unit.handle, timeout=self.stop_timeout)
        status = await runtime.inspect(unit.handle)
        assert status.state is UnitState.EXITED
        assert status.oom_killed is True

    async def test_unit_killed_behind_the_back_is_exited_then_missing(
        self, runtime: Runtime, units: Units
    ) -> None:
        """A unit killed outside the runtime is ``exited``; removed outside it, ``missing``."""
        unit = await units.launch()
        await self.kill_behind_back(unit.handle)
        status = await wait_for_unit(
            runtime, unit.handle, lambda s: s.state is UnitState.EXITED, what="exited"
        )
        assert status.exit_code is not None
        await self.remove_behind_back(unit.handle)
        await wait_for_unit(
            runtime, unit.handle, lambda s: s.state is UnitState.MISSING, what="missing"
        )

    async def test_assign_gives_a_running_unit_a_new_sandbox_id(
        self, runtime: Runtime, units: Units
    ) -> None:
        """``assign`` (when supported, for warm pools): the running unit is known by the new id
        (``list``, ``inspect``), its rocklet keeps answering at the same address, and a taken id
        is refused with :class:`~rock_core.errors.SandboxAlreadyExists`."""
        if not runtime.can_assign:
            pytest.skip(
                f"runtime {runtime.name!r} does not support assign() (claimed warm-pool units keep their names)"
            )
        unit = await units.launch()
        other = await units.launch()
        new_id = unique_sandbox_id()
        handle = await runtime.assign(unit.handle, new_id)
        assert (handle.sandbox_id, handle.unit_id) == (new_id, unit.handle.unit_id)
        found = {h.unit_id: h.sandbox_id for h in await runtime.list(units.labels)}
        assert found[unit.handle.unit_id] == new_id
        status = await runtime.inspect(handle)
        assert status.state is UnitState.RUNNING
        assert status.rocklet_address == unit.status.rocklet_address
        response = await units.http.get(f"{unit.url}/is_alive")
        assert response.status_code == 200
        with pytest.raises(SandboxAlreadyExists):
            await runtime.assign(other.handle, new_id)

    async def test_watch_reports_exit_and_removal(self, runtime: Runtime, units: Units) -> None:
        """``watch`` (when supported) reports a unit killed, then removed, behind the runtime's back."""
        handle = await units.create()
        try:
            watch = runtime.watch(units.labels_for(handle.sandbox_id))
        except NotSupported:
            await runtime.remove(handle)
            pytest.skip(f"runtime {runtime.name!r} does not support watch()")
        try:
            await units.start_ready(handle)
            await self.kill_behind_back(handle)
            exited = await _next_state(watch, handle, UnitState.EXITED, self.startup_timeout)
            assert exited.exit_code is not None
            await self.remove_behind_back(handle)
            await _next_state(watch, handle, UnitState.MISSING, self.startup_timeout)
        finally:
            aclose = getattr(watch, "aclose", None)
            if aclose is not None:
                await aclose()

    # -- archiving -------------------------------------------------------------------------------

    async def test_snapshot_and_restore_bring_back_a_sandboxs_files(
        self, runtime: Runtime, units: Units
    ) -> None:
        """Capability ``snapshot``: a stopped unit's snapshot, restored into a new unit of the
        same spec after the old one is removed, starts with the files it wrote and without the
        image's file it deleted; its ``logs`` part holds the unit's output."""
        if not runtime.can_snapshot:
            pytest.skip(f"runtime {runtime.name!r} cannot snapshot (no archiving)")
        spec = units.spec()
        assert spec.sandbox_id is not None
        unit = await units.launch(spec)
        content = f"kept across the archive {uuid.uuid4().hex}"
        await rocklet_call(
            units.http,
            unit.url,
            "/write_file",
            {"path": "/tmp/rock-archive/kept.txt", "content": content},
        )
        # A file of the image every sandbox image has: a module of python3's standard library.
        script = "import importlib.util, os; p = importlib.util.find_spec('this').origin; os.remove(p); print(p)"
        answer = await rocklet_call(
            units.http,
            unit.url,
            "/execute",
            {"command": ["python3", "-c", script], "shell": False, "timeout": 60},
        )
        assert answer["exit_code"] == 0, answer
        deleted = answer["stdout"].strip()
        await runtime.stop(unit.handle, timeout=self.stop_timeout)
        logs = b"".join([chunk async for chunk in await runtime.snapshot_logs(unit.handle)])
        assert logs.strip(), "the logs part of a unit whose rocklet ran is empty"
        snapshot = [chunk async for chunk in await runtime.snapshot(unit.handle)]
        await runtime.remove(unit.handle)

        async def replay() -> AsyncIterator[bytes]:
            for chunk in snapshot:
                yield chunk

        handle = await runtime.restore(
            spec, replay(), labels=units.labels_for(spec.sandbox_id), rocklet_token=units.token
        )
        assert (await runtime.inspect(handle)).state is UnitState.CREATED, (
            "restore started the unit"
        )
        _, url = await units.start_ready(handle)
        answer = await rocklet_call(
            units.http, url, "/read_file", {"path": "/tmp/rock-archive/kept.txt"}
        )
        assert answer["content"] == content
        answer = await rocklet_call(
            units.http,
            url,
            "/execute",
            {"command": ["test", "!", "-e", deleted], "shell": False, "timeout": 60},
        )
        assert answer["exit_code"] == 0, (
            f"{deleted}, deleted before the snapshot, is back after the restore"
        )
        await runtime.remove(handle)

    async def test_snapshot_image_keeps_a_running_units_files_for_new_units(
        self, runtime: Runtime, units: Units
    ) -> None:
        """Capability ``snapshot_image``: a running unit's files (one written, one of the image
        deleted) kept as an image, listed by its labels with a size; the unit runs on; a unit
        made from it has the files; deleted, it is listed no more (twice is fine)."""
        if not runtime.capabilities.snapshot_image:
            pytest.skip(f"runtime {runtime.name!r} cannot keep snapshot images")
        unit = await units.launch()
        content = f"kept in the snapshot {uuid.uuid4().hex}"
        await rocklet_call(
            units.http,
            unit.url,
            "/write_file",
            {"path": "/tmp/rock-snap/kept.txt", "content": content},
        )
        script = "import importlib.util, os; p = importlib.util.find_spec('this').origin; os.remove(p); print(p)"
        answer = await rocklet_call(
            units.http,
            unit.url,
            "/execute",
            {"command": ["python3", "-c", script], "shell": False, "timeout": 60},
        )
        deleted = answer["stdout"].strip()
        labels = {"rock.snapshot.conformance": uuid.uuid4().hex}
        snap = await runtime.snapshot_image(unit.handle, labels=labels, strip_env=[TOKEN_ENV])
        assert snap.size > 0 and snap.frozen_seconds is not None
        assert (await runtime.inspect(unit.handle)).state is UnitState.RUNNING
        assert [(s.image_id, s.size) for s in await runtime.snapshot_images(labels)] == [
            (snap.image_id, snap.size)
        ]
        child = await units.launch(units.spec(image=snap.reference, pull=PullPolicy.NEVER))
        answer = await rocklet_call(
            units.http, child.url, "/read_file", {"path": "/tmp/rock-snap/kept.txt"}
        )
        assert answer["content"] == content
        answer = await rocklet_call(
            units.http,
            child.url,
            "/execute",
            {"command": ["test", "!", "-e", deleted], "shell": False, "timeout": 60},
        )
        assert answer["exit_code"] == 0, f"{deleted}, deleted before the snapshot, is back"
        await runtime.remove(child.handle)
        await runtime.delete_snapshot_image(snap.image_id)
        await runtime.delete_snapshot_image(snap.image_id)
        assert await runtime.snapshot_images(labels) == []
        await runtime.remove(unit.handle)

    # -- pause -----------------------------------------------------------------------------------

    async def test_pause_keeps_a_units_processes_and_resume_goes_on(
        self, runtime: Runtime, units: Units
    ) -> None:
        """Capability ``pause``: a paused unit is still ``running`` to ``inspect`` (paused twice
        is fine); resumed (twice is fine), its rocklet answers and a process started before the
        pause runs on with the same pid."""
        if not runtime.can_pause:
            pytest.skip(f"runtime {runtime.name!r} cannot pause units")
        unit = await units.launch()
        script = "sleep 600 >/dev/null 2>&1 & echo $!"
        answer = await rocklet_call(
            units.http, unit.url, "/execute", {"command": script, "shell": True, "timeout": 60}
        )
        pid = answer["stdout"].strip()
        await runtime.pause(unit.handle)
        await runtime.pause(unit.handle)
        assert (await runtime.inspect(unit.handle)).state is UnitState.RUNNING
        await runtime.resume(unit.handle)
        await runtime.resume(unit.handle)
        response = await units.http.get(f"{unit.url}/is_alive")
        assert response.status_code == 200 and response.json()["is_alive"] is True
        answer = await rocklet_call(
            units.http,
            unit.url,
            "/execute",
            {"command": ["test", "-d", f"/proc/{pid}"], "shell": False, "timeout": 60},
        )
        assert answer["exit_code"] == 0, f"process {pid} did not survive the pause"
        await runtime.remove(unit.handle)


async def _next_state(watch: Any, handle: UnitHandle, state: UnitState, timeout: float) -> Any:
    """Read ``watch`` until it reports ``state`` for ``handle``'s sandbox; that status."""
    seen = []
    with anyio.move_on_after(timeout):
        async for got, status in watch:
            seen.append((got.sandbox_id, status.state.value))
            if got.sandbox_id == handle.sandbox_id and status.state is state:
                return status
    pytest.fail(
        f"watch() did not report sandbox {handle.sandbox_id} {state.value} within {timeout:.0f}s (saw {seen})"
    )
