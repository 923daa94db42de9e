"""Fixtures of the SDK's tests: the real embedded engine on the local Docker engine, ``python:3.11``.

Sandboxes are small (``memory="512m", cpus=0.5``) and shared per module where a test does not
change the sandbox's lifecycle. At the end of the session the process-wide engine is closed and
no container made by this process may remain.

Remote mode: with ``ROCK_TEST_REMOTE=1`` the ``small`` and ``sandbox`` fixtures (and so every
test built on them, and every config made by a test that uses ``engine``) use a real admin
server (``rock admin serve`` on a free port, state in a temporary directory) through
``SandboxConfig(base_url=...)``, and ``engine`` is its ``RemoteDriver``. The ``admin`` fixture
starts that server for any test that asks for it (``ROCK_TEST_ADMIN_URL``: use a running one).
The remote pass runs only the tests that the mode changes: a test that takes none of those
fixtures (the CLI, benches, docs, pure unit tests, tests on an admin of their own), or one
marked ``driver_independent`` (it runs both modes itself), ran already in the embedded pass and
is deselected (:func:`runs_the_same_in_both_passes`; ``ROCK_TEST_EVERY_TEST_REMOTE=1`` keeps
them all).

Nomad mode: with ``ROCK_TEST_REMOTE=1 ROCK_TEST_RUNTIME=nomad`` that admin runs on the ``nomad``
runtime against a 3-node stand-in Nomad server (rock-nomad's ``StandInNomad``; its tasks are real
containers on the local Docker engine): SDK -> admin -> Nomad API -> container -> rocklet. The
``containers`` fixture then finds a sandbox's containers by Nomad's job-name label, and the tests
that check what only the Docker runtime does are skipped, each saying why (:data:`DOCKER_ONLY`).

Without Docker: ``scripted_admin`` is the admin app over an engine on the scripted runtime
(``scripted_runtime``, its steps held at gates; ``scripted_config``), reached in process through
an ASGI transport, for the tests of the admin at many sandboxes and of its waits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from rock.actions import CloseBashSessionRequest, CreateBashSessionRequest
from rock.sdk import close_embedded_driver, get_embedded_driver
from rock.sdk._drivers import get_remote_driver
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.engine.manager import LABEL_OWNER, process_owner
from rock_core.errors import SessionNotFound
from rock_core.ports import listen_port
from rock_core.testing import eventually, eventually_empty

IMAGE = "python:3.11"
SMALL: dict[str, Any] = {"image": IMAGE, "memory": "512m", "cpus": 0.5}
REMOTE = os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0")
#: The admin's runtime in remote mode: ``docker`` (default) or ``nomad`` (a stand-in Nomad).
RUNTIME = os.environ.get("ROCK_TEST_RUNTIME", "docker")
#: The label that names a sandbox on its container: rock's on Docker, Nomad's job name on Nomad.
_SANDBOX_LABEL = "com.hashicorp.nomad.job_name" if RUNTIME == "nomad" else "rock.sandbox_id"

#: Tests of what only the Docker runtime does, skipped in Nomad mode: test name -> why.
DOCKER_ONLY = {
    "test_restart_keeps_files_but_not_sessions": "a Nomad unit keeps no files across a stop (no restart)",
    "test_restart_keeps_files_and_delete_removes": "a Nomad unit keeps no files across a stop (no restart)",
    "test_status_reports_resources_ports_and_history": "it reads the container's Docker settings",
    "test_rock_base_url_alone_selects_the_admin": "it reads rock's labels on the container (Nomad keeps them in the job's Meta)",
    "test_sandboxes_of_a_killed_process_are_reaped_by_the_next_engine": "it runs embedded engines (the Docker runtime)",
    "test_delete": "a stopped Docker container stays until deleted; a stopped Nomad job's container is gone",
    "test_a_dead_env_process_is_a_clear_error_and_its_sandbox_is_stopped": "it looks for the env sandbox's Docker container by rock's labels",
    "test_a_make_cancelled_while_its_sandbox_starts_leaves_nothing_behind": "it looks for containers by rock's labels",
    "test_an_admin_restarted_stops_the_env_sandboxes_of_its_old_process": "it looks for containers by rock's labels",
}
#: Modules of what only the Docker runtime offers, skipped whole in Nomad mode: module -> why.
DOCKER_ONLY_MODULES = {
    "test_chat.py": "its sandboxes reach a mirror on the host's 127.0.0.1 with network 'host', which Nomad sandboxes do not get",
    "test_sdk_speedup.py": "speedups reach mirrors on the host with network 'host', and it checks Docker's network names",
    "test_sdk_network_none.py": "network 'none' is refused by the nomad runtime, naming it (rock-nomad's tests check that)",
    "test_sdk_network_group.py": "network_group is refused by the nomad runtime, naming it (rock-nomad's tests check that)",
    "test_sdk_restart_policy.py": "a restart needs a unit that keeps its files across a stop",
    "test_sdk_commit.py": "ROCK's commit needs the capability snapshot_image, which the nomad runtime refuses (rock-nomad's tests check that)",
    "test_cli_commit.py": "ROCK's commit needs the capability snapshot_image, which the nomad runtime refuses (rock-nomad's tests check that)",
}


#: The fixtures whose sandboxes take the remote pass's driver (the admin's); in Nomad mode the
#: ``admin`` itself and ``containers`` change too (its runtime, the label that finds a sandbox).
DRIVER_FIXTURES = frozenset(
    {"engine", "small", "sandbox"} | ({"admin", "containers"} if RUNTIME == "nomad" else set())
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "driver_independent: runs the same in the embedded and the remote pass (it runs both modes "
        "itself, or its point does not depend on the driver); the remote pass leaves it out",
    )


def runs_the_same_in_both_passes(item: pytest.Item) -> bool:
    """Whether ``item`` would do exactly what it did in the embedded pass again in the remote pass.

    The remote pass (``ROCK_TEST_REMOTE=1``) changes only what goes through :data:`DRIVER_FIXTURES`
    (``small`` gains the admin's ``base_url``, ``engine`` is its ``RemoteDriver`` and sets
    ``ROCK_BASE_URL`` for the test, ``sandbox`` and ``session`` are built on them) and what reads
    :data:`REMOTE`. A test that uses none of them (the CLI, the benches, the docs, an admin of its
    own, pure unit tests) or that is marked ``driver_independent`` (it runs both modes itself, as
    ``test_sdk_egress`` and ``test_gem_envs`` do) ran already in the embedded pass, so the remote
    pass deselects it. Every test that takes a sandbox through those fixtures runs in both passes.
    A test that reads the mode another way imports :data:`REMOTE` from this conftest. In Nomad
    mode the admin is the mode too: tests on ``admin`` or ``containers`` run, marked or not.
    """
    if RUNTIME != "nomad" and item.get_closest_marker("driver_independent") is not None:
        return True  # (on Nomad, their admin runs on the other runtime: they run)
    if DRIVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return False
    return not hasattr(getattr(item, "module", None), "REMOTE")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Remote pass: deselect the tests that run the same in both passes
    (:func:`runs_the_same_in_both_passes`). Nomad mode: skip :data:`DOCKER_ONLY` tests and
    :data:`DOCKER_ONLY_MODULES`, saying why."""
    if REMOTE and not os.environ.get("ROCK_TEST_EVERY_TEST_REMOTE"):
        keep, again = [], []
        for item in items:
            (again if runs_the_same_in_both_passes(item) else keep).append(item)
        if again:
            config.hook.pytest_deselected(items=again)
            items[:] = keep
    if RUNTIME != "nomad":
        return
    for item in items:
        name = item.name.split("[")[0]
        module = item.path.name
        if module in DOCKER_ONLY_MODULES:
            item.add_marker(
                pytest.mark.skip(reason=f"Docker runtime only: {DOCKER_ONLY_MODULES[module]}")
            )
        elif name in DOCKER_ONLY:
            item.add_marker(pytest.mark.skip(reason=f"Docker runtime only: {DOCKER_ONLY[name]}"))


def unique_id(prefix: str = "rock-sdk") -> str:
    """A sandbox id no other test run will use."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def containers_of(docker_client: Any, sandbox_id: str) -> list[Any]:
    """Every container (running or not) of ``sandbox_id``, found by rock's label."""
    # ignore_removed: a container removed between Docker's list and its inspect is simply gone.
    return docker_client.containers.list(
        all=True, filters={"label": f"{_SANDBOX_LABEL}={sandbox_id}"}, ignore_removed=True
    )


@attrs.frozen
class AdminServer:
    """A ``rock admin serve`` process started by the tests: its URL, state directory and log."""

    url: str
    state_dir: Path
    log_file: Path
    process: subprocess.Popen[bytes] | None

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's log, for failure messages."""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _rock_command() -> list[str]:
    exe = shutil.which("rock", path=os.path.dirname(sys.executable)) or shutil.which("rock")
    return [exe] if exe else [sys.executable, "-m", "rock.cli"]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as response:  # noqa: S310 - our own server
            return bool(response.status == 200)
    except OSError:
        return False


def launch_admin(
    state_dir: Path,
    *,
    config: str | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> AdminServer:
    """Start ``rock admin serve`` on 127.0.0.1 with its state (and ``config`` TOML) in ``state_dir``.

    ``env`` adds to the server's environment (``ROCK_ADMIN_API_KEYS=...``). Its output goes to
    ``state_dir/admin.log``, where ``rock admin start`` puts it and ``rock log`` reads it.
    Waits until ``/healthz`` answers; fails the test with the server's log when it does not.
    """
    port = port or listen_port()
    args = [*_rock_command(), "admin", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if config is not None:
        (state_dir / "admin.toml").write_text(config)
        args += ["--config", str(state_dir / "admin.toml")]
    environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state_dir), **(env or {})}
    environ.pop("ROCK_BASE_URL", None)
    log_file = state_dir / "admin.log"
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True
        )
    server = AdminServer(
        url=f"http://127.0.0.1:{port}", state_dir=state_dir, log_file=log_file, process=process
    )

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError("`rock admin serve` ended")
        return _healthy(server.url)

    try:
        eventually(up, what="`rock admin serve` healthy", timeout=60, interval=0.1)
    except AssertionError as exc:
        process.kill()
        pytest.fail(
            f"`rock admin serve` did not come up on port {port} ({exc}):\n{server.log_tail()}"
        )
    return server


def stop_admin(server: AdminServer, docker_client: Any) -> None:
    """SIGTERM the admin (SIGKILL after 60 s), then remove the containers it left running."""
    process = server.process
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    owner = f"admin:{server.state_dir / 'rock.db'}"
    for container in docker_client.containers.list(
        all=True, sparse=True, filters={"label": f"{LABEL_OWNER}={owner}"}
    ):
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - removed by the admin meanwhile
            pass


@pytest.fixture(scope="session")
def admin_launcher() -> Any:
    """``(launch_admin, stop_admin)``, for tests that run admins of their own."""
    return launch_admin, stop_admin


@pytest.fixture(scope="session")
def free_port() -> Any:
    """``free_port()``: a TCP port on 127.0.0.1 that nothing listens on right now."""
    return listen_port


@pytest.fixture(scope="session")
def admin(tmp_path_factory: pytest.TempPathFactory, docker_client: Any) -> Iterator[AdminServer]:
    """A real admin server (``rock admin serve``) on a free port, stopped at the end of the session.

    Its sandboxes' containers that are still there at the end are removed (the admin leaves
    sandboxes running when it stops, by design). With ``ROCK_TEST_ADMIN_URL`` set, the tests use
    that running server instead and leave it alone.
    """
    given = os.environ.get("ROCK_TEST_ADMIN_URL")
    if given:
        if not _healthy(given.rstrip("/")):
            pytest.fail(f"ROCK_TEST_ADMIN_URL={given} does not answer /healthz")
        yield AdminServer(url=given.rstrip("/"), state_dir=Path(), log_file=Path(), process=None)
        return
    rock = _rock_command()
    probe = subprocess.run(
        [*rock, "admin", "serve", "--help"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode != 0:
        pytest.fail(
            "the `rock admin serve` command is missing, so the remote-mode tests cannot start an admin "
            f"server ({' '.join(rock)} admin serve --help exited {probe.returncode}: "
            f"{(probe.stderr or probe.stdout).strip()[-500:]})"
        )
    # The speedup tests reach mirrors on the host's 127.0.0.1 from sandboxes on its network.
    config = "[admin]\nallow_host_network = true\n"
    with contextlib.ExitStack() as stack:
        if RUNTIME == "nomad":
            from rock_nomad.testing import StandInNomad

            # Roomy nodes: the suite's sandboxes ask 512 MB each, several at once.
            nomad = stack.enter_context(
                StandInNomad(nodes=3, node_cpu=64000, node_cores=16, node_memory=65536)
            )
            config += f'[engine]\nruntime = "nomad"\n[plugins.nomad]\naddress = "{nomad.address}"\n'
        server = launch_admin(tmp_path_factory.mktemp("rock-admin"), config=config)
        yield server
        stop_admin(server, docker_client)


@pytest.fixture(scope="session")
def small(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The config fields of a small test sandbox (a fresh dict; with the admin's URL in remote mode)."""
    if REMOTE:
        return {**SMALL, "base_url": request.getfixturevalue("admin").url}
    return dict(SMALL)


@pytest.fixture(scope="session")
def new_id() -> Any:
    """``new_id(prefix)``: a unique sandbox id."""
    return unique_id


class _Containers:
    """``containers(sandbox_id)``: the containers of a sandbox, as Docker reports them;
    ``containers.gone(sandbox_id)``: wait until there are none (a stop removes the container
    in the background, so it may linger a moment); ``False`` after 30 s."""

    def __init__(self, docker_client: Any) -> None:
        self.docker_client = docker_client

    def __call__(self, sandbox_id: str) -> list[Any]:
        return containers_of(self.docker_client, sandbox_id)

    def gone(self, sandbox_id: str, timeout: float = 30.0) -> bool:
        """Whether every container of ``sandbox_id`` is gone within ``timeout`` seconds."""
        return not eventually_empty(lambda: self(sandbox_id), timeout=timeout, interval=0.05)


@pytest.fixture(scope="session")
def containers(docker_client: Any) -> Any:
    """The sandbox's containers as Docker reports them (see :class:`_Containers`)."""
    return _Containers(docker_client)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The SDK is asyncio code, as ROCK's is."""
    return "asyncio"


@pytest.fixture(scope="session")
def engine(docker_client: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The process-wide embedded engine (remote mode: the admin's ``RemoteDriver``); the embedded
    engine is closed at the end, which must leave no container behind."""
    yield (
        get_remote_driver(request.getfixturevalue("admin").url) if REMOTE else get_embedded_driver()
    )
    close_embedded_driver()
    left = eventually_empty(
        lambda: docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_OWNER}={process_owner()}"}, ignore_removed=True
        )
    )
    assert left == [], f"containers left behind by the SDK tests: {[c.name for c in left]}"


@pytest.fixture(autouse=True)
def _remote_by_default(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Remote mode: a test on the ``engine`` makes its own configs on the admin too (ROCK_BASE_URL)."""
    if REMOTE and "engine" in request.fixturenames:
        monkeypatch.setenv("ROCK_BASE_URL", request.getfixturevalue("admin").url)


@pytest.fixture(scope="module")
async def sandbox(engine: Any, small: dict[str, Any]) -> AsyncIterator[Any]:
    """A started small sandbox shared by the tests of one module."""
    sb = Sandbox(SandboxConfig(**small))
    await sb.start()
    yield sb
    await sb.stop()


@pytest.fixture
async def session(sandbox: Any, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh bash session in the shared sandbox for one test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    await sandbox.create_session(CreateBashSessionRequest(session=name))
    yield name
    try:
        await sandbox.close_session(CloseBashSessionRequest(session=name))
    except SessionNotFound:
        pass  # the test closed it itself


@pytest.fixture(scope="session")
def rl_rock_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A throwaway venv with rl-rock 1.11.0 and what its clients import (``rock.make`` and
    ``Sandbox``), not its server's dependencies."""
    venv = tmp_path_factory.mktemp("rl-rock") / "venv"
    uv = subprocess.run(
        [str(Path(__file__).resolve().parents[3] / "scripts" / "ensure-uv.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [uv, "venv", "-q", "--python", "python3", str(venv)],
        check=True,
        timeout=120,
        env=no_python_env(),
    )
    installed = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--no-deps",
            "rl-rock==1.11.0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        pytest.skip(f"rl-rock 1.11.0 cannot be installed here: {installed.stderr.strip()[-300:]}")
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "pydantic==2.14.4",
            "httpx==0.28.1",
            # what rl-rock's Sandbox client imports besides (its agent's YAML, its OSS upload)
            "pyyaml==6.0.4",
            "oss2==2.19.1",
        ],
        check=True,
        timeout=300,
    )
    return str(venv / "bin" / "python")


def no_python_env() -> dict[str, str]:
    """This process's environment without what points Python at this venv."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


# -- the admin app over an engine on the scripted runtime (no Docker) ----------------------------


@pytest.fixture(scope="module")
def scripted_rocklet() -> Iterator[tuple[str, int]]:
    """One real rocklet in a thread, its address: the rocklet of every scripted unit."""
    from rock_core.testing import rocklet_in_thread

    with rocklet_in_thread() as address:
        yield address


@pytest.fixture
def scripted_runtime(scripted_rocklet: tuple[str, int]) -> Any:
    """A :class:`rock_core.testing.ScriptedRuntime` of the test's own (hold its steps at gates)."""
    from rock_core.testing import ScriptedRuntime

    return ScriptedRuntime(scripted_rocklet)


@pytest.fixture
def scripted_config(tmp_path: Path) -> Any:
    """An engine's config for ``scripted_runtime``: its records in ``tmp_path``, its timers off."""
    from rock_core.engine.config import EngineConfig

    return EngineConfig(
        timer_interval=3600, reconcile_interval=3600, store_path=str(tmp_path / "rock.db")
    )


@attrs.frozen
class ScriptedAdmin:
    """What ``scripted_admin`` yields: the admin app, its engine, the transport that reaches the
    app, and a ``RemoteDriver`` and an ``httpx.AsyncClient`` over that transport."""

    app: Any
    manager: Any
    transport: Any
    driver: Any
    http: Any

    async def start(self, count: int) -> list[str]:
        """Start ``count`` sandboxes through the driver (``start_async``); their ids."""
        from rock_core.actions import SandboxStartRequest

        ids = []
        for _ in range(count):
            started = await self.driver.start_async(SandboxStartRequest(image="scripted:1"))
            assert started.sandbox_id is not None
            ids.append(started.sandbox_id)
        return ids


@pytest.fixture
def scripted_admin(tmp_path: Path, scripted_runtime: Any, scripted_config: Any) -> Any:
    """``scripted_admin(transport=httpx.ASGITransport, engine={}, **settings)``: an async context
    manager yielding a :class:`ScriptedAdmin`: the admin app (``settings`` as the admin reads
    them, its state in ``tmp_path``) over an engine on ``scripted_runtime`` (``scripted_config``
    with ``engine``'s fields), reached through ``transport(app)``. At the end the runtime's gates
    open, so that no held step keeps the engine from closing."""
    import httpx

    from rock.admin.app import create_app
    from rock.admin.config import load_settings
    from rock.sdk._drivers.remote import RemoteDriver
    from rock_core.engine.manager import SandboxManager

    @contextlib.asynccontextmanager
    async def admin(
        transport: Any = None, *, engine: Mapping[str, Any] | None = None, **settings: Any
    ) -> AsyncIterator[ScriptedAdmin]:
        config = attrs.evolve(scripted_config, **(engine or {}))
        async with SandboxManager(config, runtime=scripted_runtime) as manager:
            try:
                app = create_app(load_settings(None, state_dir=str(tmp_path), **settings), manager)
                reach = (transport or (lambda app: httpx.ASGITransport(app=app)))(app)
                driver = RemoteDriver("http://127.0.0.1", transport=reach)
                async with (
                    contextlib.aclosing(driver),
                    httpx.AsyncClient(transport=reach, base_url="http://127.0.0.1") as http,
                ):
                    yield ScriptedAdmin(app, manager, reach, driver, http)
            finally:
                scripted_runtime.open_gates()

    return admin
