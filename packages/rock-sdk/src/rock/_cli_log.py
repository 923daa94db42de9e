"""``rock log``: the admin server's log (``<state dir>/admin.log``), filtered by level, or
followed like ``tail -f``."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

from rock._cli_common import EXIT_ERROR, EXIT_NOT_FOUND, fail
from rock_core.errors import InvalidParameter

__all__ = ["log_command"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# "2026-11-30 22:15:03,123 INFO rock.admin: ..." (the admin's logging) or uvicorn's "INFO:     ...".
_LOG_LEVEL = re.compile(
    r"^(?:\d{4}-\d\d-\d\d[ T][\d:,.]+\s+)?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b:?"
)


def _level_of(line: str) -> str | None:
    match = _LOG_LEVEL.match(line)
    if match is None:
        return None
    level = match.group(1)
    return {"WARN": "WARNING", "FATAL": "CRITICAL"}.get(level, level)


def _filtered(lines: Iterator[str], minimum: int, state: list[bool]) -> Iterator[str]:
    """Lines at ``minimum`` or above; a line without a level (a traceback) follows its record's."""
    for line in lines:
        level = _level_of(line)
        if level is not None:
            state[0] = _LEVELS.index(level) >= minimum
        if state[0]:
            yield line


@click.command("log")
@click.option(
    "--level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default="DEBUG",
    show_default=True,
    help="Show records at this level and above.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new records until Ctrl-C.")
@click.option(
    "--lines", "-n", type=click.IntRange(0), default=None, help="Only the last N matching lines."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="The admin's TOML settings file (for its state directory).",
)
def log_command(level: str, follow: bool, lines: int | None, config_file: str | None) -> None:
    """Print the admin server's log (<state dir>/admin.log), filtered by level.

    The state directory is $ROCK_ADMIN_STATE_DIR, else ~/.rock/admin (or the config file's).
    Exit 3 when there is no log file (the admin never ran there).
    """
    from rock.admin.config import load_settings

    try:
        settings = load_settings(config_file)
    except InvalidParameter as exc:
        fail(str(exc), EXIT_ERROR)
    from rock.admin.daemon import read_pid_file

    running = read_pid_file(settings)
    if running is not None and running.get("log_file", "") is None:
        fail(
            f"the admin running here (pid {running['pid']}) writes its log to its own terminal "
            "(`rock admin serve`); `rock admin start` keeps it in a file for `rock log`",
            EXIT_NOT_FOUND,
        )
    path = Path(settings.log_file)
    minimum = _LEVELS.index(level.upper())
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open to follow
    except FileNotFoundError:
        fail(
            f"no admin log at {path}: has `rock admin start` run with this state directory?",
            EXIT_NOT_FOUND,
        )
    except OSError as exc:
        fail(f"cannot read {path}: {exc}", EXIT_ERROR)
    state = [True]
    with handle:
        matching = list(_filtered((line.rstrip("\n") for line in handle), minimum, state))
        if lines is not None:
            matching = matching[-lines:] if lines else []
        for line in matching:
            click.echo(line)
        if not follow:
            return
        try:
            pending = ""
            while True:
                chunk = handle.readline()
                if not chunk:
                    sys.stdout.flush()
                    time.sleep(0.2)
                    continue
                pending += chunk
                if not pending.endswith("\n"):
                    continue  # a line still being written
                for line in _filtered(iter([pending.rstrip("\n")]), minimum, state):
                    click.echo(line)
                pending = ""
        except KeyboardInterrupt:
            return
