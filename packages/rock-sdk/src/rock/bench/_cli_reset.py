"""``rock bench reset``: reset of one sandbox against cold starts, on the embedded engine (issue
#25's goal: reset p50 <= 0.5x a cold start's)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["reset"]


@click.command()
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Rounds of a reset and a cold start.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="512m", show_default=True, help="Memory limit.")
@click.option("--cpus", type=float, default=1.0, show_default=True, help="CPUs.")
@click.option(
    "--episode",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between a sandbox's resets (and before each cold start).",
)
def reset(rounds: int, image: str, memory: str, cpus: float, episode: float) -> None:
    """Reset one sandbox (after it wrote a file and started a process) N times, and start N
    sandboxes cold, interleaved, a pause (the episode) before each.

    Prints reset, first-command-after-reset and cold-start milliseconds (p50, p95) and the ratio
    of the p50s as JSON (stdout); exits 1 when the ratio misses its goal (0.5) or a reset left
    the file or the process behind.
    """
    from rock.bench.reset import GOAL_RESET_RATIO, run_reset_bench

    document = asyncio.run(
        run_reset_bench(
            rounds=rounds, image=image, memory=memory, cpus=cpus, episode=episode, say=say
        )
    )
    print_json(document)
    figures = document["figures"]
    if not figures["state_cleared"]:
        click.echo("a reset left the sandbox's file or process behind", err=True)
        sys.exit(1)
    if not figures["goal_met"]:
        click.echo(
            f"reset over cold start {figures['reset_over_cold']} (goal: {GOAL_RESET_RATIO:g})",
            err=True,
        )
        sys.exit(1)
