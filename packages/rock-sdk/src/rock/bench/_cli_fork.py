"""``rock bench fork`` (issue #25): snapshot and fork against cold starts."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import print_json, say

__all__ = ["fork"]


@click.command()
@click.option("--count", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--write-mib", type=click.IntRange(min=0), default=200, show_default=True)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="512m", show_default=True, help="Memory limit.")
@click.option("--cpus", type=float, default=0.5, show_default=True, help="CPUs.")
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Resets (against as many cold starts) and resumes of the parent.",
)
def fork(count: int, write_mib: int, image: str, memory: str, cpus: float, rounds: int) -> None:
    """Snapshot a sandbox that wrote --write-mib MiB and installed a package, fork it --count
    ways (unchanged since the snapshot: the fork starts from it), and start --count cold
    sandboxes of its image; fork it --count ways again after a change (a new snapshot); then
    --count starts from a warm pool of the snapshot.

    Prints the snapshot's time and the parent's freeze, the batches' times until all run (each
    fork's split into its call and the starts after), the pool's p50, the p50s of --rounds
    resets against cold starts and of resumes, and the disk figures as JSON (stdout); exits 1
    when a fork misses its goal (1.2x the cold starts).
    """
    from rock.bench.fork import GOAL_FORK_RATIO, run_fork_bench

    document = asyncio.run(
        run_fork_bench(
            count=count,
            write_mib=write_mib,
            image=image,
            memory=memory,
            cpus=cpus,
            say=say,
            rounds=rounds,
        )
    )
    print_json(document)
    figures = document["figures"]
    missed = [
        f"fork of {count}{what}: {figures[key]}x the cold starts (goal: {GOAL_FORK_RATIO:g}x)"
        for what, key, met in (
            ("", "fork_over_cold", "goal_met"),
            (" after a change", "fork_after_change_over_cold", "goal_met_after_change"),
        )
        if not figures[met]
    ]
    if missed:
        click.echo("\n".join(missed), err=True)
        sys.exit(1)
