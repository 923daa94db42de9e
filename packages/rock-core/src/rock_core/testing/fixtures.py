"""Helpers and fixtures for testing rock runtimes against real units and real rocklets.

The pieces the conformance suite (:mod:`rock_core.testing.runtime_conformance`) is built from,
usable on their own in a runtime's own tests:

- :class:`Units` creates units through a runtime (labelled so they can all be found again),
  starts them, waits for their rocklet, and removes every one of them at the end;
- :func:`wait_for_rocklet` polls ``GET /is_alive`` with a tight backoff;
- :func:`wait_for_unit` polls :meth:`~rock_core.runtime.Runtime.inspect` until a condition holds;
- :class:`PhaseLog` records the phases a runtime reports through ``on_phase``.

The module is also a pytest plugin (``pytest -p rock_core.testing.fixtures``, or
``pytest_plugins = ["rock_core.testing.fixtures"]`` in a root ``conftest.py`` or a test module)
that provides the fixtures :func:`rock_test_labels`, :func:`phase_log`, :func:`plugin_site` and
:func:`docker_client`. rock's root ``conftest.py`` loads it for every package's tests.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

from rock_core.models import Phase, PhaseStatus, RuntimeStatus, SandboxSpec, UnitState
from rock_core.plugins import ALLOW_ENV, DISABLE_ENV, TRACE_ENV
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle
from rock_core.testing.plugin_site import PluginSite

__all__ = [
    "LABEL_RUN",
    "TEST_IMAGES",
    "LABEL_SANDBOX_ID",
    "PhaseLog",
    "StartedUnit",
    "eventually_empty",
    "upper_echo_server",
    "Units",
    "bridge_gateway",
    "docker_client",
    "phase_log",
    "plugin_site",
    "rock_test_labels",
    "rocklet_call",
    "rocklet_url",
    "unique_sandbox_id",
    "wait_for_rocklet",
    "wait_for_unit",
]

#: The label that marks every unit one test run creates, so that all of them can be removed.
LABEL_RUN = "rock.test.run"
#: The label the engine puts on every unit (the sandbox id); the suite uses it the same way.
LABEL_SANDBOX_ID = "rock.sandbox_id"
#: The images rock's tests run, built offline by ``make test`` (scripts/ensure-test-images.sh).
TEST_IMAGES = ("python:3.11", "rock-test/python:3.11")


def unique_sandbox_id(prefix: str = "rockt") -> str:
    """A sandbox id no other test (in this process or another) will use: ``prefix-<12 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class PhaseLog:
    """An ``on_phase`` callback that records ``(name, Phase)`` in order.

    >>> log = PhaseLog()
    >>> log("image_pull", Phase(PhaseStatus.RUNNING))
    >>> log.statuses("image_pull")
    [<PhaseStatus.RUNNING: 'running'>]
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, Phase]] = []

    def __call__(self, name: str, phase: Phase) -> None:
        self.events.append((name, phase))

    def names(self) -> set[str]:
        """The names of all phases reported."""
        return {name for name, _ in self.events}

    def statuses(self, name: str) -> list[PhaseStatus]:
        """The statuses reported for phase ``name``, in order."""
        return [phase.status for n, phase in self.events if n == name]

    def last(self, name: str) -> Phase | None:
        """The latest report of phase ``name``, or ``None``."""
        found = [phase for n, phase in self.events if n == name]
        return found[-1] if found else None


def rocklet_url(status: RuntimeStatus) -> str:
    """``http://host:port`` of the rocklet a status reports; fails the test when it reports none.

    A rocklet on a unix socket gets the made-up host name that the engine's HTTP client
    (:func:`~rock_core.rocklet_client.new_http_client`) sends over that socket.
    """
    from rock_core.rocklet_client import RockletClient

    address = status.rocklet_address
    if address is None:
        pytest.fail(
            f"the runtime reports no rocklet address for a {status.state.value} unit: {status!r}"
        )
    host, port = address
    if host.startswith("/"):
        return RockletClient(None, host, port).base_url  # type: ignore[arg-type]
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


async def wait_for_rocklet(
    http: httpx.AsyncClient, url: str, *, timeout: float = 60.0
) -> dict[str, Any]:
    """Poll ``GET {url}/is_alive`` until it answers ``is_alive: true``; return the answer.

    The backoff starts at 5 ms and doubles up to 100 ms, so readiness is seen within moments of
    the rocklet listening. A refused or reset connection (a port published before anything
    listens behind it) counts as "not yet". Fails the test after ``timeout`` seconds.
    """
    delay = 0.005
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            response = await http.get(f"{url}/is_alive", timeout=2.0)
            if response.status_code == 200 and response.json().get("is_alive") is True:
                return dict(response.json())
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except (httpx.TransportError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            pytest.fail(
                f"the rocklet at {url} did not answer /is_alive within {timeout:.0f}s (last: {last!r})"
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.1)


async def rocklet_call(
    http: httpx.AsyncClient, url: str, endpoint: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """``POST {url}{endpoint}`` with a JSON body; the JSON answer (fails the test on a non-200)."""
    response = await http.post(f"{url}{endpoint}", json=dict(body), timeout=120.0)
    if response.status_code != 200:
        pytest.fail(
            f"rocklet {endpoint} answered HTTP {response.status_code}: {response.text[:500]}"
        )
    return dict(response.json())


async def wait_for_unit(
    runtime: Runtime,
    handle: UnitHandle,
    condition: Callable[[RuntimeStatus], bool],
    *,
    what: str,
    timeout: float = 60.0,
) -> RuntimeStatus:
    """Poll ``runtime.inspect(handle)`` until ``condition(status)``; return that status.

    ``what`` describes the condition for the failure message, which also shows the last status.
    """
    delay = 0.01
    deadline = time.monotonic() + timeout
    while True:
        status = await runtime.inspect(handle)
        if condition(status):
            return status
        if time.monotonic() > deadline:
            pytest.fail(
                f"unit of sandbox {handle.sandbox_id} never became {what} within {timeout:.0f}s: {status!r}"
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.2)


@attrs.frozen
class StartedUnit:
    """A unit :meth:`Units.launch` created and started, whose rocklet answers at :attr:`url`."""

    handle: UnitHandle
    status: RuntimeStatus
    phases: PhaseLog
    url: str


class Units:
    """Creates units through ``runtime`` for tests, and removes all of them in :meth:`remove_all`.

    Every unit carries ``labels`` (which should include a :data:`LABEL_RUN` unique to the test
    run) plus :data:`LABEL_SANDBOX_ID`, so :meth:`remove_all` finds even units whose handle a
    failing test never saw.

    :param spec_defaults: :class:`~rock_core.models.SandboxSpec` fields every unit gets unless
        :meth:`create` overrides them (``image``, ``memory``, ``cpus``, ...).
    :param token: the rocklet secret every unit is created with; ``http`` should send it
        (``X-Rock-Rocklet-Token``) for the rocklet calls of the tests to pass.
    """

    def __init__(
        self,
        runtime: Runtime,
        http: httpx.AsyncClient,
        labels: Mapping[str, str],
        spec_defaults: Mapping[str, Any],
        *,
        startup_timeout: float = 60.0,
        token: str = "rock-test-rocklet-token",
    ) -> None:
        self.runtime = runtime
        self.token = token
        self.http = http
        self.labels = dict(labels)
        self.spec_defaults = dict(spec_defaults)
        self.startup_timeout = startup_timeout

    def spec(self, **fields: Any) -> SandboxSpec:
        """A spec with the defaults, ``fields`` on top, and a fresh sandbox id unless given."""
        values = {**self.spec_defaults, **fields}
        values.setdefault("sandbox_id", unique_sandbox_id())
        return SandboxSpec(**values)

    def labels_for(self, sandbox_id: str) -> dict[str, str]:
        """The labels a unit of ``sandbox_id`` is created with."""
        return {**self.labels, LABEL_SANDBOX_ID: sandbox_id}

    async def create(
        self, spec: SandboxSpec | None = None, *, on_phase: PhaseCallback | None = None
    ) -> UnitHandle:
        """Create (not start) a unit for ``spec`` (default :meth:`spec`)."""
        spec = spec if spec is not None else self.spec()
        assert spec.sandbox_id is not None
        return await self.runtime.create(
            spec,
            labels=self.labels_for(spec.sandbox_id),
            rocklet_token=self.token,
            on_phase=on_phase,
        )

    async def start_ready(
        self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None
    ) -> tuple[RuntimeStatus, str]:
        """Start ``handle``'s unit and wait until it runs and its rocklet answers; ``(status, url)``.

        A status that ``start`` returns must say what ``inspect`` says of the rocklet's address
        and the ports (the engine uses it instead of an inspect). ``on_phase`` hears the phases
        ``start`` reports (a runtime that places units on other hosts pulls the image then)."""
        told = await self.runtime.start(handle, on_phase=on_phase)
        status = await wait_for_unit(
            self.runtime,
            handle,
            lambda s: s.state is UnitState.RUNNING and s.rocklet_address is not None,
            what="running with a rocklet address",
            timeout=self.startup_timeout,
        )
        if told is not None:
            said = (
                told.state,
                told.rocklet_address,
                dict(told.port_mapping),
                tuple(told.forwarded_ports),
            )
            seen = (
                status.state,
                status.rocklet_address,
                dict(status.port_mapping),
                tuple(status.forwarded_ports),
            )
            assert said == seen, (
                f"start() returned a status that inspect() contradicts: {said} != {seen}"
            )
        url = rocklet_url(status)
        await wait_for_rocklet(self.http, url, timeout=self.startup_timeout)
        return status, url

    async def launch(self, spec: SandboxSpec | None = None) -> StartedUnit:
        """Create and start a unit, and wait for its rocklet; ``phases`` holds what both reported."""
        phases = PhaseLog()
        handle = await self.create(spec, on_phase=phases)
        status, url = await self.start_ready(handle, on_phase=phases)
        return StartedUnit(handle=handle, status=status, phases=phases, url=url)

    async def remove_all(self) -> None:
        """Remove every unit carrying :attr:`labels` (those of failed tests too)."""
        for handle in await self.runtime.list(self.labels):
            await self.runtime.remove(handle)


def bridge_gateway(docker_client: Any, network: str = "bridge") -> str:
    """The host's address on Docker network ``network`` (its gateway, as a container on it sees
    the host). Docker leaves ``Gateway`` out of the network's IPAM config when its bridge
    interface already had an address as the engine started (a dockerd restarted on the same
    host): then it is read from that interface."""
    found = docker_client.api.inspect_network(network)
    for config in (found.get("IPAM") or {}).get("Config") or []:
        if config.get("Gateway"):
            return str(config["Gateway"])
    device = (found.get("Options") or {}).get("com.docker.network.bridge.name") or (
        "br-" + str(found["Id"])[:12]
    )
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", device], capture_output=True, text=True
    ).stdout.split()
    if "inet" not in shown:
        pytest.fail(f"Docker network {network!r} has no gateway, and interface {device} no address")
    return shown[shown.index("inet") + 1].split("/")[0]


# ---------------------------------------------------------------------------------------------
# pytest fixtures (this module as a plugin)


@pytest.fixture(scope="session")
def rock_test_labels() -> dict[str, str]:
    """Labels unique to this test session: ``{"rock.test.run": <uuid hex>}``."""
    return {LABEL_RUN: uuid.uuid4().hex}


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker SDK client for the local engine, once the engine answers and has
    :data:`TEST_IMAGES`; fails the test with the fix when either is missing."""
    try:
        import docker
        import docker.errors
    except ImportError:
        pytest.fail("the docker SDK is missing: it is a dev dependency (run `make test`)")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(
            f"no Docker engine answers ({exc}); `make test` starts one (scripts/ensure-docker.sh)"
        )
    for image in TEST_IMAGES:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            pytest.fail(
                f"image {image} is missing; `make test` builds it (scripts/ensure-test-images.sh)"
            )
    yield client
    client.close()


@pytest.fixture
def phase_log() -> PhaseLog:
    """A fresh :class:`PhaseLog` to pass as ``on_phase``."""
    return PhaseLog()


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    """An empty :class:`~rock_core.testing.plugin_site.PluginSite`, importable alone for one test.

    While the test runs, the distributions it installs there are the only ones announcing rock
    plugins (every ``site-packages`` folder is off ``sys.path``), and rock's plugin variables
    (``ROCK_DISABLE_PLUGINS``, ``ROCK_PLUGINS``, ``ROCK_TRACE_PLUGINS``) are unset.
    """
    for name in (DISABLE_ENV, ALLOW_ENV, TRACE_ENV):
        monkeypatch.delenv(name, raising=False)
    with PluginSite(tmp_path / "plugin-site").importable(alone=True) as site:
        yield site


def eventually_empty(
    probe: Callable[[], Sequence[Any]], timeout: float = 60.0, interval: float = 0.1
) -> list[Any]:
    """Call ``probe()`` until it returns nothing; return its last answer (``[]``, or what was
    still there after ``timeout`` seconds, for the caller's assertion to show).

    For units an engine hands to its runtime to remove as it closes
    (:meth:`~rock_core.runtime.Runtime.discard`): they are gone at the runtime's pace, shortly
    after the engine has returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = list(probe())
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(interval)


@contextlib.contextmanager
def upper_echo_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers every byte upper-cased, a thread per connection,
    until the client closes; yields its port. A stand-in service for tunnel and forwarding tests
    (upper-casing shows the bytes went through it, whatever the chunking)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    acceptor = threading.Thread(target=serve, daemon=True)
    acceptor.start()
    try:
        yield server.getsockname()[1]
    finally:
        # Woken and joined before the socket is closed: a thread about to call accept() on a
        # closed socket's number takes the connections of whatever listener gets that number
        # next (seen in CI: a later test's rocklet request echoed back upper-cased).
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)
        acceptor.join(5)
        server.close()
