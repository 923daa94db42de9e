"""``rock bench egress``: what an egress policy costs a start, a connection, and a host with
many policed sandboxes (issue #26's goal: start p50 with a policy <= 1.1 x without)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["egress"]


@click.command()
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Pairs of starts, without and with a policy.",
)
@click.option(
    "--connects",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Connections timed from inside each sandbox.",
)
@click.option(
    "--scale",
    type=click.IntRange(min=0),
    default=500,
    show_default=True,
    help="Sandboxes with policies started for the rule count and the start rate.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Starts at once in the scale run.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="256m", show_default=True, help="Memory limit.")
@click.option("--cpus", type=float, default=0.5, show_default=True, help="CPUs.")
def egress(
    rounds: int, connects: int, scale: int, concurrency: int, image: str, memory: str, cpus: float
) -> None:
    """Start p50 with and without an egress policy (same run), connection setup through the
    rules, and the rule count and start rate of many sandboxes with policies.

    Prints the figures as JSON (stdout); exits 1 when the start ratio misses its goal (1.1)
    or rules are left after the scale run's sandboxes stopped. Needs root (iptables).
    """
    from rock.bench.egress import GOAL_START_RATIO, run_egress_bench

    document = asyncio.run(
        run_egress_bench(
            rounds=rounds,
            connects=connects,
            scale=scale,
            concurrency=concurrency,
            image=image,
            memory=memory,
            cpus=cpus,
            say=say,
        )
    )
    print_json(document)
    figures = document["figures"]
    if figures["scale_rule_lines_left_after_stop"]:
        click.echo(f"{figures['scale_rule_lines_left_after_stop']} rule lines left", err=True)
        sys.exit(1)
    if not figures["goal_met"]:
        click.echo(
            f"start p50 ratio {figures['start_p50_ratio']} (goal: <= {GOAL_START_RATIO:g})",
            err=True,
        )
        sys.exit(1)
