"""Two real ``rock admin serve`` processes of one cluster (``[engine] cluster``) on one
PostgreSQL database (issue #24 point 3): one leads; ``kill -9`` of the leader makes the other
take the lease under a new epoch; a leader stopped with ``SIGSTOP`` loses it to the other, and
once continued (``SIGCONT``) it gives its background work up and stays a follower. Who holds
the lease is read from the database (``rock_lease``); what each admin did, from its log."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock_core.ports import listen_port
from rock_core.testing import eventually
from rock_postgres.testing import postgres_url, run_sql  # noqa: F401

HANG = 90  # a guard against a hang; nothing waits for it to pass


class _Admin:
    """``rock admin serve`` in a process of its own, its output in ``log``."""

    def __init__(self, folder: Path, store: str) -> None:
        folder.mkdir()
        self.log = folder / "admin.log"
        config = folder / "admin.toml"
        config.write_text(
            f'[engine]\nstore = "{store}"\ncluster = "admins"\n'
            # one owner for both (the owner follows store_path): each takes the other's sandboxes
            f'store_path = "{folder.parent / "shared.db"}"\n'
        )
        exe = shutil.which("rock", path=os.path.dirname(sys.executable))
        command = [exe] if exe else [sys.executable, "-m", "rock.cli"]
        port = listen_port()
        environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(folder)}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*command, "admin", "serve", "--port", str(port), "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environ,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def epochs_led(self) -> list[int]:
        return [int(e) for e in re.findall(r"leader of the cluster under epoch (\d+)", self.text())]

    def end(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[list[_Admin]]:
    started: list[_Admin] = []
    try:
        for name in ("a", "b"):
            started.append(_Admin(tmp_path / name, postgres_url))
        yield started
    finally:
        for admin in started:
            admin.end()


def _lease(url: str) -> tuple[str, int] | None:
    """The lease's holder and epoch, ``None`` before an admin took it (or made its table)."""
    if run_sql(url, "SELECT to_regclass('rock_lease')")[0][0] is None:
        return None
    rows = run_sql(url, "SELECT holder, epoch FROM rock_lease WHERE name = 'cluster:admins'")
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


def _leader(admins: list[_Admin], epoch: int) -> _Admin | None:
    """The admin whose log says it took the lease under ``epoch``."""
    found = [admin for admin in admins if epoch in admin.epochs_led()]
    assert len(found) <= 1, "two admins took the same epoch"
    return found[0] if found else None


def test_the_leader_killed_or_stopped_loses_the_lease_to_the_other(
    admins: list[_Admin], postgres_url: str
) -> None:
    lease = eventually(lambda: _lease(postgres_url), what="a leader", timeout=HANG)
    first = eventually(lambda: _leader(admins, lease[1]), what="its log", timeout=HANG)
    other = admins[1] if first is admins[0] else admins[0]
    assert other.epochs_led() == []  # one leader
    # kill -9 of the leader: the other takes the lease under a new epoch.
    first.process.kill()
    first.process.wait()
    second = eventually(
        lambda: _lease(postgres_url),
        until=lambda found: found is not None and found[1] > lease[1],
        what="a new epoch after kill -9",
        timeout=HANG,
    )
    assert second is not None
    assert eventually(lambda: _leader(admins, second[1]), what="its log", timeout=HANG) is other
    # A third admin joins; then SIGSTOP of the leader: the third takes over.
    third = _Admin(first.log.parent.parent / "c", postgres_url)
    admins.append(third)
    eventually(lambda: "Uvicorn running" in third.text(), what="c serving", timeout=HANG)
    assert third.epochs_led() == []
    os.kill(other.process.pid, signal.SIGSTOP)
    try:
        taken = eventually(
            lambda: _lease(postgres_url),
            until=lambda found: found is not None and found[1] > second[1],
            what="a new epoch after SIGSTOP",
            timeout=HANG,
        )
        assert taken is not None
        eventually(lambda: _leader(admins, taken[1]), what="c's log", timeout=HANG)
        assert _leader(admins, taken[1]) is third
    finally:
        os.kill(other.process.pid, signal.SIGCONT)
    # Continued: it finds its lease gone, stops its background work, and stays a follower.
    eventually(
        lambda: f"lost the lease of epoch {second[1]}" in other.text(),
        what="the continued leader gives up",
        timeout=HANG,
    )
    assert other.epochs_led() == [second[1]]
    assert _lease(postgres_url) == taken
