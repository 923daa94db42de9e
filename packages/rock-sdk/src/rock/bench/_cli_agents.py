"""``rock bench agents``: agents in sandboxes answered by the trainer (issue #27's goal: the
model service adds <= 2 ms per call at p50 over the bare answer, at N=1)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["agents"]


@click.command()
@click.option("--sandboxes", "-n", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--calls",
    "-k",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Model calls per agent.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="512m", show_default=True, help="Memory limit per sandbox.")
@click.option("--cpus", type=float, default=0.5, show_default=True, help="CPUs per sandbox.")
@click.option("--base-url", default=None, help="An admin's URL (default: embedded).")
def agents(
    sandboxes: int, calls: int, image: str, memory: str, cpus: float, base_url: str | None
) -> None:
    """N sandboxes, each running the test agent for K model calls answered by the trainer.

    Prints calls per second, each call's milliseconds through the trainer and against a
    replayed (bare) answer with their difference (p50, p99), the trainer process's CPU and the
    model service's memory per sandbox, as JSON (stdout). Exits 1 when N=1 misses the goal.
    """
    from rock.bench.agents import GOAL_ADDED_P50_MS, run_agents_bench

    document = asyncio.run(
        run_agents_bench(
            sandboxes=sandboxes,
            calls=calls,
            image=image,
            memory=memory,
            cpus=cpus,
            base_url=base_url,
            say=say,
        )
    )
    print_json(document)
    figures = document["figures"]
    if sandboxes == 1 and not figures["goal_met"]:
        click.echo(
            f"added p50 {figures['added_ms']['p50']} ms (goal: {GOAL_ADDED_P50_MS:g} ms)", err=True
        )
        sys.exit(1)
