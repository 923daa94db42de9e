"""``rock sandbox top``: the running sandboxes' resource use, live, like ``docker stats``.

Each refresh is one listing call to the admin (``--base-url``, ``$ROCK_BASE_URL`` or ``rock admin
start``): the figures are what the engine last sampled from its runtime (every ``stats_interval``
seconds, 5 by default), so watching costs the sandboxes nothing. Rows are sorted by ``--sort``
(``cpu`` by default; ``mem``, ``mem%``, ``net``, ``pids``, ``id``), largest first. ``--json``
prints one snapshot as JSON and exits; ``--once`` (or output that is not a terminal) prints one
table and exits; otherwise the table refreshes in place every ``--interval`` seconds until Ctrl-C.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from rock._cli_common import (
    base_url_option,
    json_option,
    list_items,
    print_table,
    resolve_target,
    run,
)
from rock._cli_sandbox import sandbox

__all__ = ["top_command"]

_SORT_KEYS: dict[str, Callable[[dict[str, Any]], float]] = {
    "cpu": lambda u: u.get("cpu_percent") or 0.0,
    "mem": lambda u: u.get("memory_bytes") or 0,
    "mem%": lambda u: u.get("memory_percent") or 0.0,
    "net": lambda u: (u.get("network_rx_bytes") or 0) + (u.get("network_tx_bytes") or 0),
    "pids": lambda u: u.get("pids") or 0,
}


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return str(size)


def _rows(statuses: list[Any], sort: str) -> list[dict[str, Any]]:
    rows = [
        {
            "sandbox_id": s.get("sandbox_id"),
            "image": s.get("image"),
            "warnings": list(s.get("warnings") or []),
            **(s.get("usage") or {}),
        }
        for s in statuses
        if s.get("state") == "running"
    ]
    if sort == "id":
        return sorted(rows, key=lambda r: r["sandbox_id"] or "")
    return sorted(rows, key=lambda r: (_SORT_KEYS[sort](r), r["sandbox_id"] or ""), reverse=True)


def _table(rows: list[dict[str, Any]]) -> None:
    header = (
        "SANDBOX ID",
        "CPU %",
        "MEM USAGE / LIMIT",
        "MEM %",
        "NET I/O",
        "PIDS",
        "OOM",
        "REFUSED",
        "WARNING",
    )
    table = []
    for r in rows:
        sampled = "cpu_percent" in r
        table.append(
            (
                r["sandbox_id"] or "",
                f"{r['cpu_percent']:.1f}" if sampled else "-",
                f"{_size(r.get('memory_bytes'))} / {_size(r.get('memory_limit_bytes'))}"
                if sampled
                else "-",
                f"{r['memory_percent']:.1f}" if r.get("memory_percent") is not None else "-",
                f"{_size(r.get('network_rx_bytes'))} / {_size(r.get('network_tx_bytes'))}"
                if sampled
                else "-",
                str(r["pids"]) if r.get("pids") is not None else "-",
                str(r.get("oom_kills", "-")),
                str(r["egress_refused"]) if r.get("egress_refused") is not None else "-",
                "; ".join(r["warnings"]),
            )
        )
    print_table(header, table)


@sandbox.command("top")
@base_url_option
@json_option
@click.option(
    "--sort",
    type=click.Choice(["cpu", "mem", "mem%", "net", "pids", "id"]),
    default="cpu",
    show_default=True,
    help="Order of the rows (largest first).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print one table and exit.")
def top_command(
    base_url: str | None, as_json: bool, sort: str, interval: float, once: bool
) -> None:
    """Show the running sandboxes' CPU, memory, network and processes, live (as `docker stats`)."""
    target = resolve_target(base_url)
    if target.embedded:
        click.echo(
            "rock: `rock sandbox top` needs an admin: set ROCK_BASE_URL or run `rock admin start`",
            err=True,
        )
        sys.exit(2)
    if as_json:
        rows = _rows(run(lambda: list_items(target, {"state": "running"})), sort)
        click.echo(json.dumps({"items": rows, "total": len(rows)}, default=str))
        return
    live = sys.stdout.isatty() and not once
    try:
        while True:
            rows = _rows(run(lambda: list_items(target, {"state": "running"})), sort)
            if live:
                click.echo("\x1b[H\x1b[2J", nl=False)  # home, clear: redraw in place
            _table(rows)
            click.echo(
                f"{len(rows)} running sandbox{'es' if len(rows) != 1 else ''}; sorted by {sort}"
            )
            if once or not live:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
