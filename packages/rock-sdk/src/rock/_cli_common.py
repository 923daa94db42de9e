"""What every ``rock sandbox`` command shares: where the sandboxes are, exit codes, running a
command's coroutine, and printing tables, JSON and spinners.

Which server: ``--base-url``, else ``$ROCK_BASE_URL``, else the admin that ``rock admin start``
runs for this state directory, else embedded mode (see :mod:`rock._cli_sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

import click

from rock_core.actions import SandboxStatusResponse
from rock_core.converters import unstructure_wire
from rock_core.errors import InvalidParameter, RockError, SandboxNotFound

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "Failure",
    "Target",
    "base_url_option",
    "fail",
    "json_option",
    "list_items",
    "print_json",
    "print_table",
    "resolve_target",
    "run",
    "sandbox_status",
    "spinner",
    "state_of",
    "when",
    "when_text",
]

#: Exit codes of ``rock sandbox`` and ``rock log`` (``exec`` passes the command's own through).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

T = TypeVar("T")


class Failure(Exception):
    """A failure the command reports as ``rock: <message>`` with ``code`` as its exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- where the sandboxes are ------------------------------------------------------------------------


def local_admin_url() -> str | None:
    """The URL of the admin ``rock admin start`` runs for this state directory, if one runs."""
    from rock.admin import daemon
    from rock.admin.config import load_settings

    try:
        data = daemon.read_pid_file(load_settings())
    except InvalidParameter:
        return None  # a bad ROCK_ADMIN_* variable: there is no admin to find this way
    return str(data["url"]) if data and data.get("url") else None


class Target:
    """Where the commands act: an admin's URL, or embedded mode (``url is None``)."""

    def __init__(self, url: str | None) -> None:
        self.url = url.rstrip("/") if url else None

    @property
    def embedded(self) -> bool:
        """Whether there is no server: sandboxes live (and die) with this process."""
        return self.url is None

    def sandbox(self) -> Any:
        """A :class:`~rock.sdk.sandbox.client.Sandbox` handle on this target (not started)."""
        from rock.sdk.sandbox.client import Sandbox
        from rock.sdk.sandbox.config import SandboxConfig

        config = SandboxConfig(base_url=self.url)
        return Sandbox(config)

    def describe(self) -> str:
        """Where, for messages."""
        return f"rock admin at {self.url}" if self.url else "embedded mode (no server)"


def resolve_target(base_url: str | None) -> Target:
    """``--base-url``, else ``$ROCK_BASE_URL``, else the local ``rock admin start``, else embedded."""
    return Target(base_url or os.environ.get("ROCK_BASE_URL") or local_admin_url())


base_url_option = click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="The admin server [default: $ROCK_BASE_URL, else the local `rock admin start`, else embedded].",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


# -- running a command --------------------------------------------------------------------------------


def fail(message: str, code: int) -> NoReturn:
    """Print ``rock: <message>`` on stderr and exit with ``code``."""
    click.echo(f"rock: {message}", err=True)
    sys.exit(code)


def run(coro_factory: Callable[[], Awaitable[T]]) -> T:
    """Run the command's coroutine; turn rock's errors into a message and an exit code."""

    async def main() -> T:
        return await coro_factory()

    try:
        return asyncio.run(main())
    except Failure as exc:
        fail(str(exc), exc.code)
    except SandboxNotFound as exc:
        fail(str(exc), EXIT_NOT_FOUND)
    except RockError as exc:
        fail(str(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        fail("interrupted", 130)


@contextlib.contextmanager
def spinner(message: str) -> Iterator[None]:
    """A spinner on stderr while waiting, when stderr is a terminal (nothing otherwise)."""
    if not sys.stderr.isatty():  # the common case in scripts: do not even import rich
        yield
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell, a rule under the header; never wrapped or cut (ids
    are long), no trailing blanks. Plain text, not rich's tables: those took a second for 1,000
    sandboxes."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    click.echo("\n".join(lines))


async def sandbox_status(target: Target, sandbox_id: str) -> SandboxStatusResponse:
    """The status of ``sandbox_id`` in any state; not found names the target."""
    sandbox = target.sandbox()
    try:
        await sandbox.attach(sandbox_id)
        status: SandboxStatusResponse = await sandbox.get_status(include_all_states=True)
    except SandboxNotFound as exc:
        hint = (
            " (embedded mode: only sandboxes of this process exist; set ROCK_BASE_URL or run `rock admin start`)"
            if target.embedded
            else ""
        )
        raise Failure(
            f"no sandbox {sandbox_id!r} at {target.describe()}: {exc}{hint}", EXIT_NOT_FOUND
        ) from exc
    return status


def when(value: Any) -> str:
    """A datetime as ``YYYY-MM-DD HH:MM:SS`` (``""`` for none)."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


def state_of(status: SandboxStatusResponse) -> str:
    """The sandbox's state's value (``running (paused)`` for a paused one), or ``unknown``."""
    if status.state is None:
        return "unknown"
    return status.state.value + (" (paused)" if status.paused else "")


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, default=str))


def when_text(value: str | None) -> str:
    """An ISO timestamp from the admin's JSON, as :func:`when` shows a datetime."""
    return value[:19].replace("T", " ") if value else ""


async def list_items(target: Target, filters: dict[str, str]) -> list[dict[str, Any]]:
    """The pending and running sandboxes as JSON-ready items: the admin's own JSON (not read into
    models, which at 1,000 sandboxes costs more than fetching them), or the embedded engine's."""
    if target.embedded:
        return [unstructure_wire(s) for s in await _list(target, filters)]
    from rock.sdk._drivers.remote import get_remote_driver

    driver = get_remote_driver(target.url or "")
    with spinner("Listing sandboxes..."):
        return await driver.list_sandbox_items(filters)


async def _list(target: Target, filters: dict[str, str]) -> list[SandboxStatusResponse]:
    # Only the driver that serves: against an admin, the embedded driver is never imported.
    if target.embedded:
        from rock.sdk._drivers.embedded_default import get_embedded_driver

        listing = get_embedded_driver().list_sandboxes(filters)
    else:
        from rock.sdk._drivers.remote import get_remote_driver

        listing = get_remote_driver(target.url or "").list_sandboxes(filters)
    with spinner("Listing sandboxes..."):
        return await listing
