"""How ``rock bench`` commands hand back their figures: one JSON document on stdout (what scripts,
CI and the README read), progress, tables and alarms on stderr for the person watching, and
``results.json`` in a new ``--output`` folder, never one that exists.

rich is imported only by the functions that draw (``rock --help`` loads no bench).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "dumps",
    "print_json",
    "say",
    "claim",
    "write_results",
    "stderr_console",
    "print_table",
    "report",
    "leftovers_alarm",
]


def dumps(figures: dict[str, Any]) -> str:
    """The figures as indented JSON."""
    return json.dumps(figures, indent=2)


def print_json(document: dict[str, Any]) -> None:
    """The figures on stdout, as indented JSON."""
    click.echo(dumps(document))


def say(line: str) -> None:
    """A line of progress on stderr."""
    click.echo(line, err=True)


def claim(output: Path) -> None:
    """Create the new folder ``output`` (a command's ``--output``) before any work, so an
    existing one is never overwritten: that is a usage error."""
    try:
        output.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise click.UsageError(
            f"--output {str(output)!r} already exists; rock never overwrites results"
        ) from None


def write_results(output: Path, document: dict[str, Any]) -> Path:
    """Write ``results.json`` into ``output`` (claimed by :func:`claim`)."""
    path = output / "results.json"
    path.write_text(dumps(document) + "\n")
    return path


def stderr_console() -> Console:
    """A rich console on stderr (stdout is for the JSON)."""
    from rich.console import Console

    return Console(stderr=True)


def print_table(
    console: Console, title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]
) -> None:
    """A table of figures: the first column (the figure's name) left-aligned, the others right."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="right" if index else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def report(
    console: Console,
    document: dict[str, Any],
    *,
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    output: Path | None,
) -> None:
    """A measured run's end: its table (stderr), its ``results.json`` when ``output`` is given
    (the path on stderr), then the whole document as JSON (stdout)."""
    print_table(console, title, columns, rows)
    if output is not None:
        click.echo(f"results: {write_results(output, document)}", err=True)
    print_json(document)


def leftovers_alarm(console: Console, leftovers: int) -> None:
    """Say, in red, that containers of this run were still there at its end."""
    console.print(
        f"[bold red]LEFTOVERS: {leftovers} container(s) of this run were still there at the end[/]"
    )
