"""``rock bench claim`` (issue #28): claims from a warm pool against cold starts."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._output import report, say, stderr_console

__all__ = ["claim"]


@click.command()
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Cold starts, claims from a full pool, and claims while it refills, each.",
)
@click.option("--pool-size", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option("--memory", default="512m", show_default=True, help="Memory limit.")
@click.option("--cpus", type=float, default=0.5, show_default=True, help="CPUs.")
@click.option(
    "--remote/--no-remote",
    default=True,
    show_default=True,
    help="Also measure through a rock admin server started for the run.",
)
def claim(rounds: int, pool_size: int, image: str, memory: str, cpus: float, remote: bool) -> None:
    """Claim → first command from a warm pool (full, and while it refills) beside cold starts,
    embedded and through an admin.

    Prints a table (stderr) and the p50 / p95 milliseconds as JSON (stdout); exits 1 when a
    claim's p50 misses its goal (20 ms embedded, 30 ms through the admin).
    """
    from rock.bench.claim import run_claim_bench, table_rows

    document = asyncio.run(
        run_claim_bench(
            rounds=rounds,
            pool_size=pool_size,
            image=image,
            memory=memory,
            cpus=cpus,
            remote=remote,
            say=say,
        )
    )
    modes = [m for m in ("embedded", "remote") if m in document]
    report(
        stderr_console(),
        document,
        title="rock bench claim: start → first command",
        columns=["", *[f"{m} {q}" for m in modes for q in ("p50", "p95")]],
        rows=table_rows(document),
        output=None,
    )
    if not document["goal_met"]:
        for mode in modes:
            figures = document[mode]
            if not figures["goal_met"]:
                click.echo(
                    f"{mode}: claim p50 {figures['pool_full_ms']['p50']} ms (pool full), "
                    f"{figures['refilling_ms']['p50']} ms (refilling); "
                    f"goal {figures['goal_p50_ms']:g} ms",
                    err=True,
                )
        sys.exit(1)
