"""``rock bench control-plane`` (issue #28): the admin, engine, store and SDK at ROCK's scale on
a runtime that simulates containers."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from rock.bench._output import claim, print_json, say, write_results

__all__ = ["control_plane"]


@click.command("control-plane")
@click.option(
    "--sandboxes",
    type=click.IntRange(min=1),
    default=16000,
    show_default=True,
    help="Sandboxes started at once.",
)
@click.option(
    "--clients",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Client processes sharing them (the SDK in each).",
)
@click.option(
    "--start-seconds",
    default="0.5,2",
    show_default=True,
    metavar="LO,HI",
    help="Each simulated container's start takes a random time between LO and HI seconds.",
)
@click.option(
    "--admin-max-connections",
    type=click.IntRange(min=1),
    default=None,
    help="The admin's max_connections (default: its own, 2048; past it: HTTP 503).",
)
@click.option(
    "--admin-profile",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a cProfile of the admin (until its restart) to this file (FILE.restart: the "
    "restarted admin's).",
)
@click.option(
    "--runtime",
    type=click.Choice(["scripted", "nomad"]),
    default="scripted",
    show_default=True,
    help="scripted: rock's scripted runtime; nomad: rock's nomad runtime against a stand-in "
    "Nomad whose --nodes simulated nodes run nothing (tasks start in LO..HI seconds).",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="With --runtime nomad: the stand-in Nomad's simulated nodes.",
)
@click.option("--status-calls", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--list-calls", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="New folder for results.json.",
)
def control_plane(
    sandboxes: int,
    clients: int,
    start_seconds: str,
    admin_max_connections: int | None,
    admin_profile: Path | None,
    runtime: str,
    nodes: int,
    status_calls: int,
    list_calls: int,
    output: Path | None,
) -> None:
    """Start --sandboxes at once through a real admin (over its socket) from --clients processes,
    on a scripted runtime whose containers start in LO..HI seconds and run nothing (or, with
    --runtime nomad, on rock's nomad runtime against a stand-in Nomad of --nodes simulated nodes
    whose tasks start in LO..HI seconds and run nothing).

    Prints (JSON, stdout) the successes and start p50/p99, the admin's memory (and per sandbox),
    get_status and listing latency with all of them, and an admin restart with their records
    (seconds to stop and to answer, sandboxes still running), with the goals (all succeed,
    p50 <= 5 s, admin <= 1 GiB); exits 1 if a start failed or a sandbox was lost in the restart.
    """
    from rock.bench.control_plane import ControlPlaneSettings, run_control_plane
    from rock.bench.scripted_admin import parse_seconds

    try:
        latency = parse_seconds(start_seconds)
    except ValueError as exc:
        raise click.UsageError(f"--start-seconds: {exc}") from None
    if output is not None:
        claim(output)
    settings = ControlPlaneSettings(
        sandboxes=sandboxes,
        clients=clients,
        start_seconds=latency,
        status_calls=status_calls,
        list_calls=list_calls,
        runtime=runtime,
        nodes=nodes,
        admin_max_connections=admin_max_connections,
        admin_profile=admin_profile,
    )
    document = asyncio.run(run_control_plane(settings, say=say))
    if output is not None:
        click.echo(f"results: {write_results(output, document)}", err=True)
    print_json(document)
    figures = document["figures"]
    missed = [goal for goal, met in figures["goals"].items() if not met]
    if missed:
        click.echo(f"goals missed: {', '.join(missed)}", err=True)
    if figures["failed_starts"] or figures["running_after_restart"] != figures["started"]:
        sys.exit(1)
