"""A PostgreSQL server for a bench, and a database of its own for one run (``rock bench ha``).

The server is, in order: the URL the user gave (``--postgres-url``), else the one
``scripts/ensure-postgres.sh`` of the rock checkout the bench runs from sets up (the script is run
first: idempotent, and fast when the server already answers; it writes the URL to
``.rock-state/postgres/url``, or its reason for failing to ``.rock-state/postgres/unavailable``).
When none can be had, :class:`NoPostgres` says what is missing and how to give one.

The database: ``rock_bench_<random>``, made with ``CREATE DATABASE`` on that server and dropped
``WITH (FORCE)`` at the end (the admins' connections with it), whatever ended the run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["NoPostgres", "fresh_database", "postgres_server"]

SCRIPT = Path("scripts") / "ensure-postgres.sh"


class NoPostgres(RuntimeError):
    """No PostgreSQL server could be had: the message says what is missing."""


def _checkouts() -> Iterator[Path]:
    """rock checkouts to look in: the current folder and its parents, then this file's."""
    for start in (Path.cwd(), Path(__file__).resolve()):
        for folder in (start, *start.parents):
            if (folder / SCRIPT).is_file():
                yield folder
                break


def _asyncpg() -> Any:
    try:
        import asyncpg

        import rock_postgres  # noqa: F401 - the admins' store: fail here, with the fix
    except ImportError as exc:
        raise NoPostgres(
            "the admins' PostgreSQL store needs rock-postgres (pip install rock-postgres), "
            f"which is not installed here: {exc}"
        ) from exc
    return asyncpg


def postgres_server(given: str | None, say: Callable[[str], None]) -> str:
    """The URL of a server whose user may make databases (see the module docstring).

    :raises NoPostgres: rock-postgres is not installed, or no server could be had.
    """
    _asyncpg()
    if given:
        return given
    for checkout in _checkouts():
        state = Path(os.environ.get("ROCK_STATE_DIR") or checkout / ".rock-state")
        say(f"making sure PostgreSQL runs ({checkout / SCRIPT})")
        done = subprocess.run(
            ["bash", str(checkout / SCRIPT)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
        )
        url_file = state / "postgres" / "url"
        if done.returncode == 0 and url_file.is_file():
            return url_file.read_text(encoding="utf-8").strip()
        reason_file = state / "postgres" / "unavailable"
        reason = (
            reason_file.read_text(encoding="utf-8").strip()
            if reason_file.is_file()
            else (done.stderr.strip().splitlines() or ["it said nothing"])[-1]
        )
        raise NoPostgres(
            f"PostgreSQL could not be set up by {checkout / SCRIPT}: {reason}. "
            "Give a server with --postgres-url postgresql://USER@HOST/DB (a user that may "
            "create databases)"
        )
    raise NoPostgres(
        "no PostgreSQL server: give one with --postgres-url postgresql://USER@HOST/DB (a user "
        "that may create databases, e.g. postgres), or run the bench from a rock checkout, whose "
        f"{SCRIPT} installs and starts one"
    )


def _database_url(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


async def _execute(url: str, sql: str) -> None:
    connection = await _asyncpg().connect(url, timeout=30)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def fresh_database(server: str, say: Callable[[str], None]) -> AsyncIterator[str]:
    """A new database on ``server`` for this run, its URL; dropped at the end."""
    name = f"rock_bench_{uuid.uuid4().hex[:12]}"
    try:
        await _execute(server, f'CREATE DATABASE "{name}"')
    except Exception as exc:  # what asyncpg raises for a server it cannot reach or use
        raise NoPostgres(f"could not make a database on the PostgreSQL server: {exc}") from exc
    say(f"database {name} made")
    try:
        yield _database_url(server, name)
    finally:
        await _execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        say(f"database {name} dropped")
