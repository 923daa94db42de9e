"""Fixtures: a real rocklet process on 127.0.0.1, as sandboxes get it: the pyz.

Every test that takes ``rocklet`` runs against ``python3 rocklet.pyz`` built by
:func:`rock_core.rocklet.build_zipapp` (started with a plain system ``python3`` when there is
one, with ``-I`` so nothing but the standard library and the archive is importable): the form
every sandbox runs, and the stricter one (a third-party import or newer syntax fails there).
Until session 38 each such test also ran against ``python -m rock_core.rocklet`` from the source
tree, which no sandbox runs and which proves nothing the pyz run does not (the same code, with
more importable); the source entry point keeps its own tests (``test_source_entry_point.py``,
and the terminal and env tests that start it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.rocklet import build_zipapp
from rock_core.rocklet.server import TOKEN_ENV, TOKEN_HEADER
from rock_core.testing import eventually

#: The secret every test rocklet is started with (see :class:`RockletProcess`).
TOKEN = "test-rocklet-secret-" + os.urandom(8).hex()

SRC = Path(__file__).resolve().parents[2] / "src"


class RockletProcess:
    """A running rocklet: its process, base URL and an HTTP client bound to it.

    It is started with the secret :data:`TOKEN` (unless ``env`` sets ``ROCK_ROCKLET_TOKEN``
    itself), which its client sends on every request.
    """

    def __init__(self, argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        env.setdefault(TOKEN_ENV, TOKEN)
        self.token = env[TOKEN_ENV]
        self.stderr_path = tmp / "rocklet.stderr"
        self.stderr = open(self.stderr_path, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            env=env,
            cwd=str(tmp),
        )
        self.port = self._wait_for_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.client = httpx.Client(
            base_url=self.url, timeout=120, headers={TOKEN_HEADER: self.token}
        )

    def _wait_for_port(self) -> int:
        def port() -> int | None:
            text = self.stderr_path.read_text(errors="replace")
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("rocklet exited with %s: %s" % (self.proc.returncode, text))
            return None

        found = eventually(
            port, what="the rocklet's 'listening on' line", timeout=30, interval=0.005
        )
        assert found is not None
        return found

    def post(self, endpoint: str, /, **body: Any) -> httpx.Response:
        """POST ``body`` as JSON."""
        return self.client.post(endpoint, json=body)

    def ok(self, endpoint: str, /, **body: Any) -> Any:
        """POST ``body`` and return the JSON answer, which must be HTTP 200."""
        response = self.post(endpoint, **body)
        assert response.status_code == 200, response.text
        return response.json()

    def error(self, endpoint: str, /, **body: Any) -> dict[str, Any]:
        """POST ``body`` and return the ``rockletexception`` of its HTTP 511 answer."""
        response = self.post(endpoint, **body)
        assert response.status_code == 511, response.text
        return response.json()["rockletexception"]

    def stop(self) -> int:
        """SIGTERM the rocklet and return its exit status."""
        self.client.close()
        if self.proc.poll() is None:
            # util-linux's ``unshare --fork`` ignores SIGTERM, and its child would outlive a
            # SIGKILL of it: the rocklet it started (PID 1 of its namespace) gets the signal too.
            for pid in [self.proc.pid, *_children(self.proc.pid)]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                for pid in [*_children(self.proc.pid), self.proc.pid]:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux's ``/proc/<pid>/task/<pid>/children``)."""
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except OSError:
        return []


def system_python() -> str:
    """A plain python3 (not this virtualenv's), as a sandbox image would have."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


@pytest.fixture(scope="session")
def plain_python() -> str:
    """The interpreter that runs the pyz (see :func:`system_python`)."""
    return system_python()


@pytest.fixture(scope="session")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built rocklet.pyz."""
    out = tmp_path_factory.mktemp("pyz")
    return build_zipapp(out, cache_dir=out / "cache")


def start_rocklet(kind: str, pyz: Path, tmp: Path) -> RockletProcess:
    """Start a rocklet of ``kind`` (``"source"`` or ``"pyz"``)."""
    if kind == "source":
        env = dict(os.environ, PYTHONPATH=str(SRC), ROCKLET_TEST_MARKER="present")
        return RockletProcess([sys.executable, "-m", "rock_core.rocklet"], tmp, env)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["ROCKLET_TEST_MARKER"] = "present"
    return RockletProcess([system_python(), "-I", str(pyz)], tmp, env)


@pytest.fixture(scope="session", params=["pyz"])
def rocklet(
    request: pytest.FixtureRequest, pyz: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RockletProcess]:
    """A rocklet shared by the tests of one kind; stopped (and checked) at the end."""
    proc = start_rocklet(request.param, pyz, tmp_path_factory.mktemp("rocklet-" + request.param))
    yield proc
    status = proc.stop()
    assert status == 0, proc.stderr_path.read_text(errors="replace")


@pytest.fixture
def session(rocklet: RockletProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bash session for one test, closed afterwards."""
    name = "t-" + re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60]
    rocklet.ok("/create_session", session=name)
    yield name
    rocklet.post("/close_session", session=name)


@pytest.fixture
def run(rocklet: RockletProcess, session: str) -> Any:
    """``run(command, **fields)`` in the test's session → the HTTP response."""

    def _run(command: str, **fields: Any) -> httpx.Response:
        return rocklet.post("/run_in_session", session=session, command=command, **fields)

    return _run


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[list[str]], RockletProcess]]:
    """``launch(argv)`` starts a rocklet with a custom command line; stopped afterwards."""
    started: list[RockletProcess] = []

    def _launch(argv: list[str]) -> RockletProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        proc = RockletProcess(argv, tmp_path, env)
        started.append(proc)
        return proc

    yield _launch
    for proc in started:
        proc.stop()
