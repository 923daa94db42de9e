"""``rock bench e2b``: E2B's SDK against rock beside rock's own SDK (issue #29 point 5)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["e2b"]


@click.command()
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Sandboxes made one after another, for each SDK.",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Sandboxes of the parallel rollout, for each SDK.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option(
    "--e2b-python",
    default=".rock-state/e2b-sdk-venv/bin/python",
    show_default=True,
    help="A Python with E2B's SDK (scripts/ensure-e2b-sdk.sh makes this one).",
)
@click.option(
    "--base-url",
    default=None,
    help="An admin serving rock-e2b's routes (default: one of this run's own).",
)
def e2b(rounds: int, parallel: int, image: str, e2b_python: str, base_url: str | None) -> None:
    """Create -> first command p50 and a parallel rollout through E2B's SDK against rock,
    beside the same through rock's SDK, on one admin.

    Prints both SDKs' figures and their ratios as JSON (stdout); exits 1 when E2B's are more
    than 1.2x rock's own.
    """
    from rock.bench.e2b import GOAL_RATIO, run_e2b_bench

    document = asyncio.run(
        run_e2b_bench(
            rounds=rounds,
            parallel=parallel,
            image=image,
            e2b_python=e2b_python,
            url=base_url,
            say=say,
        )
    )
    print_json(document)
    figures = document["figures"]
    if not figures["goal_met"]:
        click.echo(
            f"E2B's SDK: first command p50 {figures['first_command_p50_ratio']}x, parallel "
            f"rollout {figures['parallel_wall_ratio']}x rock's own (goal: {GOAL_RATIO:g}x)",
            err=True,
        )
        sys.exit(1)
