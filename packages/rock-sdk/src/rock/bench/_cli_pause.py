"""``rock bench pause``: pause and resume of one sandbox on the embedded engine (issue #25's
goal: resume p50 <= 50 ms)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["pause"]


@click.command()
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Rounds of pause, resume and a first command.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="512m", show_default=True, help="Memory limit.")
@click.option("--cpus", type=float, default=1.0, show_default=True, help="CPUs.")
def pause(rounds: int, image: str, memory: str, cpus: float) -> None:
    """Pause and resume one sandbox (a process holding 64 MiB in it) N times.

    Prints pause, resume and first-command-after-resume milliseconds (p50, p95) as JSON
    (stdout); exits 1 when resume's p50 misses its goal (50 ms) or the process was not kept.
    """
    from rock.bench.pause import GOAL_RESUME_P50_MS, run_pause_bench

    document = asyncio.run(
        run_pause_bench(rounds=rounds, image=image, memory=memory, cpus=cpus, say=say)
    )
    print_json(document)
    figures = document["figures"]
    if not figures["process_kept"]:
        click.echo("the sandbox's process did not survive the pauses", err=True)
        sys.exit(1)
    if not figures["goal_met"]:
        click.echo(
            f"resume p50 {figures['resume_ms']['p50']} ms (goal: {GOAL_RESUME_P50_MS:g} ms)",
            err=True,
        )
        sys.exit(1)
