"""``rock bench scale|orphans``: many sandboxes at once (held, measured, torn down) and the
first start of a trainer among a killed one's orphans."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from rock.bench._cli_checks import check_memory
from rock.bench._output import claim, stderr_console

__all__ = ["orphans", "scale"]


@click.command()
@click.option(
    "--count", "-n", type=click.IntRange(min=1), default=None, help="Sandboxes held at once."
)
@click.option(
    "--curve",
    default=None,
    metavar="N,N,...",
    help="Run the whole measurement at each count in turn (like 100,250,500) and print how each figure grows.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="Through a `rock admin` server started for the run (127.0.0.1), not the embedded engine.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="256m", show_default=True, help="Memory limit per sandbox.")
@click.option(
    "--cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=0.1,
    show_default=True,
    help="CPUs per sandbox.",
)
@click.option(
    "--status-calls",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="get_status calls per count.",
)
@click.option(
    "--command-calls",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="`echo x` commands per count.",
)
@click.option(
    "--idle-seconds",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Idle window for the engine's CPU use.",
)
@click.option(
    "--docker-floor",
    is_flag=True,
    help="Before each point and again after its teardown, start and remove as many plain containers "
    "straight through Docker's API (same image, limits and network): Docker's own start rate and "
    "removal time in the same run; rock's rate is divided by the mean of the two, and their spread "
    "shows when the host moved.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="New folder for results.json.",
)
def scale(
    count: int | None,
    curve: str | None,
    remote: bool,
    image: str,
    memory: str,
    cpus: float,
    status_calls: int,
    command_calls: int,
    idle_seconds: float,
    docker_floor: bool,
    output: Path | None,
) -> None:
    """N sandboxes at once: start rate, latencies and memory while they are held, teardown time.

    Starts N sandboxes at once through the SDK, holds them, measures get_status, command and
    listing latency, the engine's memory and idle CPU and the host's memory per sandbox, then
    leaves every `async with` (embedded: and closes the engine, as a trainer's exit does) and
    times until no container is left. Prints the figures as JSON (stdout) and a table (stderr);
    exits 1 if a start failed or a container was left behind.
    """
    from rock.bench._output import leftovers_alarm, report
    from rock.bench.scale import ScaleSettings, parse_curve, run_scale, table_rows

    if (count is None) == (curve is None):
        raise click.UsageError("give one of --count N or --curve N,N,...")
    try:
        counts = (count,) if count is not None else parse_curve(curve or "")
    except ValueError as exc:
        raise click.UsageError(f"--curve: {exc}") from None
    check_memory(memory)
    if output is not None:
        claim(output)
    settings = ScaleSettings(
        counts=counts,
        remote=remote,
        image=image,
        memory=memory,
        cpus=cpus,
        status_calls=status_calls,
        command_calls=command_calls,
        idle_seconds=idle_seconds,
        docker_floor=docker_floor,
    )
    console = stderr_console()
    document = asyncio.run(
        run_scale(settings, say=lambda line: console.print(line, highlight=False))
    )
    points = document["points"]
    report(
        console,
        document,
        title=f"rock bench scale ({'remote' if remote else 'embedded'})",
        columns=["N", *(str(point["count"]) for point in points)],
        rows=table_rows(points),
        output=output,
    )
    leftovers = sum(p["leftovers"] for p in points)
    failed = sum(p["failed_starts"] for p in points)
    if leftovers:
        leftovers_alarm(console, leftovers)
    if failed:
        errors = sorted({e for p in points for e in p["start_errors"]})
        console.print(f"[bold red]{failed} start(s) failed[/]: {errors}")
    if leftovers or failed:
        sys.exit(1)


@click.command()
@click.option(
    "--count",
    "-n",
    type=click.IntRange(min=1),
    required=True,
    help="Orphans the killed trainer leaves.",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="Sandbox image (needs python3)."
)
@click.option("--memory", default="256m", show_default=True, help="Memory limit per sandbox.")
@click.option(
    "--cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=0.1,
    show_default=True,
    help="CPUs per sandbox.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="New folder for results.json.",
)
def orphans(count: int, image: str, memory: str, cpus: float, output: Path | None) -> None:
    """A new trainer's first sandbox while its engine removes N orphans of a killed trainer.

    Trainer processes, each using the SDK's embedded engine: one times its first start and
    command with no orphan (the floor); one starts N sandboxes, and while they run another times
    the same first start (the busy floor); then the first kills itself with SIGKILL (left
    unreaped: a zombie owner), and a last one times the same first start while its engine's
    background sweep removes the N orphans; `docker ps -a` is polled until all are gone.
    Prints a table (stderr) and the figures as JSON (stdout); exits 1 if a container was left
    behind or the first start missed the goal (1.5 s).
    """
    from rock.bench._output import leftovers_alarm, report
    from rock.bench.orphans import GOAL_FIRST_START_SECONDS, OrphanSettings, run_orphans, table_rows

    check_memory(memory)
    if output is not None:
        claim(output)
    settings = OrphanSettings(count=count, image=image, memory=memory, cpus=cpus)
    console = stderr_console()
    try:
        document = run_orphans(settings, say=lambda line: console.print(line, highlight=False))
    except RuntimeError as exc:
        click.echo(f"rock bench orphans: {exc}", err=True)
        sys.exit(1)
    figures = document["figures"]
    report(
        console,
        document,
        title=f"rock bench orphans (N={count})",
        columns=["", "floor: no orphans", f"beside {count} live", f"among {count} orphans"],
        rows=table_rows(figures),
        output=output,
    )
    if figures["leftovers"]:
        leftovers_alarm(console, figures["leftovers"])
    if not figures["goal_met"]:
        console.print(
            f"[bold red]the first start took {figures['first_start_and_command_seconds']}s "
            f"(goal: {GOAL_FIRST_START_SECONDS}s)[/]"
        )
    if figures["leftovers"] or not figures["goal_met"]:
        sys.exit(1)
