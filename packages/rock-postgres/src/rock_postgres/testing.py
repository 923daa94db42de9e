"""pytest fixtures for tests against a real PostgreSQL server (extra ``testing``).

The server is the one ``scripts/ensure-postgres.sh`` runs (``make test`` runs it): its URL is in
``.rock-state/postgres/url``; ``ROCK_TEST_POSTGRES_URL`` names another (a superuser's URL: the
fixtures make and drop databases). Where the script could not set one up it left its reason in
``.rock-state/postgres/unavailable``, and the tests skip with that reason; with neither file they
fail, saying to run the script.

- :func:`postgres_url`: a fresh database for the test module (made on first use, dropped after),
  its URL;
- :func:`postgres_store`: a :class:`~rock_postgres.store.PostgresRecordStore` on that database,
  open and empty, closed after the test;
- :func:`run_sql`: run one statement on a database (what tests do behind the store's back);
- :class:`AdminProcess`: ``rock admin serve`` of a cluster on that database, in a process of
  its own (tests of several admins); :func:`two_admins`: two of them, serving, as (leader,
  follower), ended and their containers removed after; :func:`cluster_admins`: the fixture of
  two such admins on the module's database.

Import the fixtures into a test module (``from rock_postgres.testing import postgres_url``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from rock_core.ports import listen_port
from rock_postgres.store import PostgresRecordStore

__all__ = [
    "AdminProcess",
    "cluster_admins",
    "two_admins",
    "database_url",
    "postgres_store",
    "postgres_url",
    "run_sql",
    "server_url",
]

URL_VARIABLE = "ROCK_TEST_POSTGRES_URL"


def _state_dirs() -> Iterator[Path]:
    if os.environ.get("ROCK_STATE_DIR"):
        yield Path(os.environ["ROCK_STATE_DIR"])
    for start in (Path.cwd(), Path(__file__).resolve()):
        for folder in (start, *start.parents):
            if (folder / ".rock-state").is_dir():
                yield folder / ".rock-state"
                break


def server_url() -> str:
    """The test server's URL (see the module docstring); skips or fails the test without one."""
    if os.environ.get(URL_VARIABLE):
        return os.environ[URL_VARIABLE]
    for state in _state_dirs():
        url = state / "postgres" / "url"
        if url.is_file():
            return url.read_text(encoding="utf-8").strip()
        reason = state / "postgres" / "unavailable"
        if reason.is_file():
            pytest.skip(
                f"PostgreSQL could not be set up here: {reason.read_text(encoding='utf-8').strip()}"
            )
    pytest.fail(
        "no PostgreSQL server for the tests: run scripts/ensure-postgres.sh (make test does), "
        f"or set {URL_VARIABLE}"
    )


def database_url(url: str, database: str) -> str:
    """``url`` naming ``database`` instead of its own."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def _execute(url: str, sql: str, *args: Any) -> Any:
    connection = await asyncpg.connect(url, timeout=30)
    try:
        return await connection.fetch(sql, *args)
    finally:
        await connection.close()


def run_sql(url: str, sql: str, *args: Any) -> Any:
    """Run ``sql`` with ``args`` on the database of ``url``; its rows. Callable from async
    tests too: it runs on a loop of its own, in a thread of its own."""
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        return worker.submit(asyncio.run, _execute(url, sql, *args)).result()


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A fresh database for the module, dropped after it; its URL."""
    server = server_url()
    name = f"rock_test_{uuid.uuid4().hex[:12]}"
    run_sql(server, f'CREATE DATABASE "{name}"')
    try:
        yield database_url(server, name)
    finally:
        run_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[PostgresRecordStore]:
    """An open, empty store on the module's database, closed after the test."""
    store = PostgresRecordStore(postgres_url)
    store.open()
    run_sql(postgres_url, "TRUNCATE rock_sandbox")
    try:
        yield store
    finally:
        store.close()


class AdminProcess:
    """``rock admin serve`` of cluster ``cluster`` on the store ``store`` (a PostgreSQL URL), in
    a process (and session) of its own, its state and output in ``folder``.

    :param extra: more TOML for ``admin.toml`` (tables after ``[engine]``'s keys).
    """

    def __init__(
        self, folder: Path, store: str, *, cluster: str = "admins", extra: str = ""
    ) -> None:
        folder.mkdir(parents=True)
        self.folder = folder
        self.log = folder / "admin.log"
        config = folder / "admin.toml"
        config.write_text(f'[engine]\nstore = "{store}"\ncluster = "{cluster}"\n{extra}')
        exe = shutil.which("rock", path=os.path.dirname(sys.executable))
        command = [exe] if exe else [sys.executable, "-m", "rock.cli"]
        self.port = listen_port()
        #: Where clients reach it.
        self.url = f"http://127.0.0.1:{self.port}"
        environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(folder)}
        environ.pop("ROCK_BASE_URL", None)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*command, "admin", "serve", "--port", str(self.port), "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environ,
                start_new_session=True,
            )

    def text(self) -> str:
        """Its output so far."""
        return self.log.read_text(errors="replace")

    def epochs_led(self) -> list[int]:
        """The lease epochs it took, by its log."""
        return [int(e) for e in re.findall(r"leader of the cluster under epoch (\d+)", self.text())]

    def wait_serving(self, timeout: float = 90.0) -> None:
        """Wait until it answers (raises with its log when it ended or did not)."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the admin ended:\n{self.text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the admin did not answer within {timeout:g} s:\n{self.text()}")

    def end(self) -> None:
        """End it (continued first if stopped), ``SIGTERM`` then ``SIGKILL``."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def two_admins(
    folder: Path, store: str, *, cluster: str | None = None, extra: str = "", timeout: float = 90
) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """Two admins of one cluster on ``store``, both serving, as (leader, follower); ended after,
    and the cluster's containers removed. ``cluster``: its name (default: one of its own, so that
    its leader never takes another test's containers for its own); ``extra``: more TOML."""
    cluster = cluster or f"test-{uuid.uuid4().hex[:8]}"
    started = [
        AdminProcess(folder / name, store, cluster=cluster, extra=extra) for name in ("a", "b")
    ]
    try:
        for admin in started:
            admin.wait_serving(timeout)
        deadline = time.monotonic() + timeout
        while not any(a.epochs_led() for a in started):
            if time.monotonic() > deadline:
                raise AssertionError(f"no admin of cluster {cluster!r} took the lease")
            time.sleep(0.1)
        leader = next(a for a in started if a.epochs_led())
        yield leader, started[1] if leader is started[0] else started[0]
    finally:
        for admin in started:
            admin.end()
        found = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=rock.owner=cluster:{cluster}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if found:
            subprocess.run(["docker", "rm", "-f", *found], capture_output=True, check=False)


@pytest.fixture
def cluster_admins(
    tmp_path: Path, postgres_url: str
) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """:func:`two_admins` of a cluster of their own on the module's database (import
    :func:`postgres_url` with it), as (leader, follower)."""
    with two_admins(tmp_path, postgres_url) as admins:
        yield admins
