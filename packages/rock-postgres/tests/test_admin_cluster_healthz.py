"""``GET /healthz`` says whether an admin leads its cluster (issue #24 point 6): two real
``rock admin serve`` processes of one cluster on one PostgreSQL database; exactly one says
``"leader": true``, and after ``kill -9`` of it the other does. An admin outside a cluster
answers ROCK's shape, without the two fields."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.ports import listen_port
from rock_core.testing import eventually
from rock_postgres.testing import postgres_url  # noqa: F401

HANG = 90  # a guard against a hang; nothing waits for it to pass


class _Admin:
    """``rock admin serve`` in a process of its own with ``config`` (TOML), its ``url``."""

    def __init__(self, folder: Path, config: str) -> None:
        folder.mkdir()
        self.log = folder / "admin.log"
        (folder / "admin.toml").write_text(config)
        exe = shutil.which("rock", path=os.path.dirname(sys.executable))
        command = [exe] if exe else [sys.executable, "-m", "rock.cli"]
        port = listen_port()
        self.url = f"http://127.0.0.1:{port}"
        environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(folder)}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*command, "admin", "serve", "--port", str(port)]
                + ["--config", str(folder / "admin.toml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environ,
                start_new_session=True,
            )

    def health(self) -> dict[str, Any] | None:
        """``/healthz``'s JSON once it answers 200; ``None`` before."""
        if self.process.poll() is not None:
            raise AssertionError(f"the admin ended:\n{self.log.read_text(errors='replace')}")
        try:
            response = httpx.get(self.url + "/healthz", timeout=5)
        except httpx.HTTPError:
            return None
        return dict(response.json()) if response.status_code == 200 else None

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[list[_Admin]]:  # noqa: F811
    config = f'[engine]\nstore = "{postgres_url}"\ncluster = "healthy"\n'
    started: list[_Admin] = []
    try:
        for name in ("a", "b"):
            started.append(_Admin(tmp_path / name, config))
        yield started
    finally:
        for admin in started:
            admin.end()


def _leaders(admins: list[_Admin]) -> list[_Admin] | None:
    """The admins that say they lead, once every one answers; ``None`` before."""
    answers = [admin.health() for admin in admins]
    if any(answer is None for answer in answers):
        return None
    return [admin for admin, answer in zip(admins, answers) if answer and answer["leader"]]


def test_healthz_names_the_one_leader_and_the_other_after_kill_9(cluster: list[_Admin]) -> None:
    leaders = eventually(
        lambda: _leaders(cluster), until=lambda found: found, what="a leader", timeout=HANG
    )
    assert leaders is not None and len(leaders) == 1
    first = leaders[0]
    other = cluster[1] if first is cluster[0] else cluster[0]
    assert first.health() == {"status": "ok", "version": _version(), "leader": True, **_NAME}
    assert other.health() == {"status": "ok", "version": _version(), "leader": False, **_NAME}
    first.process.kill()
    first.process.wait()
    eventually(
        lambda: other.health(),
        until=lambda answer: answer is not None and answer["leader"] is True,
        what="the other admin leading after kill -9",
        timeout=HANG,
    )
    assert other.health() == {"status": "ok", "version": _version(), "leader": True, **_NAME}


def test_an_admin_outside_a_cluster_answers_healthz_as_rock_does(tmp_path: Path) -> None:
    admin = _Admin(tmp_path / "alone", "[engine]\n")
    try:
        answer = eventually(admin.health, what="the admin serving", timeout=HANG)
        assert answer == {"status": "ok", "version": _version()}
    finally:
        admin.end()


_NAME = {"cluster": "healthy"}


def _version() -> str:
    from rock import __version__

    return __version__
