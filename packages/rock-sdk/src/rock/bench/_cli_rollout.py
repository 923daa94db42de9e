"""``rock bench rollout``: the batch RL rollout, alone or paired with its floor (one ``docker run``
per episode), and its figures."""

from __future__ import annotations

import asyncio
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rock.bench._cli_checks import check_memory
from rock.bench._output import claim, print_json, stderr_console, write_results

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from rock.bench.rollout import EpisodeResult, RolloutSettings

__all__ = ["rollout"]


@click.command()
@click.option(
    "--count",
    "-n",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Episodes to run.",
)
@click.option(
    "--parallelism",
    "-p",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Episodes at once.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    required=True,
    help="New folder for results.json.",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="Sandbox image (needs python3)."
)
@click.option("--memory", default="512m", show_default=True, help="Memory limit per sandbox.")
@click.option(
    "--cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="CPUs per sandbox.",
)
@click.option(
    "--warm-pool",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Sandboxes the engine starts before the clock starts and keeps ready (0: every episode starts cold).",
)
@click.option(
    "--baseline",
    type=click.Choice(["docker-run"]),
    default=None,
    help="Also run the same episodes as one `docker run` each, in this invocation, and report rock's ratio to it.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --baseline: pairs of runs (the floor and rock), the floor first in odd rounds, rock first in even ones.",
)
def rollout(
    count: int,
    parallelism: int,
    output: Path,
    image: str,
    memory: str,
    cpus: float,
    warm_pool: int,
    baseline: str | None,
    rounds: int,
) -> None:
    """The batch RL rollout: each episode gets a sandbox, fails a test, patches the code, passes it.

    Writes OUTPUT/results.json with the batch metrics and a row per episode, and exits non-zero
    if any episode's check failed. OUTPUT must not exist. With --warm-pool N the engine first
    fills a warm pool of N sandboxes (reported as warm_pool_fill_seconds, outside the batch's
    clock); episodes then claim them and the pool refills while no start waits. With
    --baseline docker-run the same episodes also run as one `docker run` each (the floor, on
    this machine, now), first, and the document carries both figures and rock's ratio to the
    floor. With --rounds N (and --baseline) the pair runs N times, the floor first in odd rounds
    and rock first in even ones (whichever runs second meets a Docker still busy with the
    other's removals): the document lists each round and carries the median ratio; its other
    figures are the last round's.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rock.bench.rollout import RolloutSettings, run_rollout, summarize

    # Bad settings are refused before anything starts, naming the option and the value.
    check_memory(memory)
    if rounds > 1 and baseline is None:
        raise click.UsageError(
            "--rounds: pairs of runs need --baseline docker-run (got --rounds %d alone)" % rounds
        )
    claim(output)
    settings = RolloutSettings(
        count=count,
        parallelism=parallelism,
        image=image,
        memory=memory,
        cpus=cpus,
        warm_pool=warm_pool,
    )
    console = stderr_console()
    failed = 0
    with Progress(
        TextColumn("[bold]rollout"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        refresh_per_second=2,  # the bar shares the machine with the batch it measures
    ) as progress:
        task = progress.add_task("episodes", total=count, status="")

        def on_progress(result: EpisodeResult) -> None:
            nonlocal failed
            failed += not result.ok
            progress.update(
                task, advance=1, status=f"[red]{failed} failed" if failed else "[green]all ok"
            )
            if not result.ok:
                progress.console.print(
                    f"[red]episode {result.episode} failed:[/red] {result.error}"
                )

        # The engine is the service the batch is submitted to: it starts before the clock does,
        # and its own start-up is reported on its own line.
        progress.update(task, status="starting the engine")
        t = time.perf_counter()
        from rock.sdk import get_embedded_driver

        engine = get_embedded_driver()
        engine.start()
        engine_seconds = time.perf_counter() - t
        fill_seconds = None
        floors: list[dict[str, Any]] = []
        paired: list[dict[str, Any]] = []
        for round_ in range(1, rounds + 1):
            floor_first = round_ % 2 == 1
            if baseline == "docker-run" and floor_first:
                floors.append(_docker_run_floor(settings, progress, task))
            if warm_pool:
                progress.update(task, status=f"filling a warm pool of {warm_pool}")
                fill_seconds = _fill_warm_pool(settings)
                progress.console.print(
                    f"warm pool: {warm_pool} sandboxes ready in {fill_seconds:.2f}s (before the clock)"
                )
            if round_ > 1:
                failed = 0
                progress.reset(task, total=count, status="")
            progress.update(task, status="")
            results, client_seconds = asyncio.run(run_rollout(settings, on_progress))
            document = summarize(settings, results, client_seconds)
            if baseline == "docker-run" and not floor_first:
                floors.append(_docker_run_floor(settings, progress, task))
            if floors:
                floor, ours = (
                    floors[-1]["batch_to_all_rewards_seconds"],
                    document["batch_to_all_rewards_seconds"],
                )
                ratio = round(ours / floor, 3) if floor and ours else None
                paired.append(
                    {
                        "round": round_,
                        "first": "docker run" if floor_first else "rock",
                        "docker_run_all_rewards_seconds": floor,
                        "rock_all_rewards_seconds": ours,
                        "ratio": ratio,
                    }
                )
                if rounds > 1:
                    progress.console.print(
                        f"round {round_}: rock {ours}s, docker run {floor}s, ratio {ratio}"
                    )
            if document["successful_episodes"] != document["episodes"]:
                break
    document["engine_start_seconds"] = round(engine_seconds, 4)
    if floors:
        document["baseline_docker_run"] = floors[-1]
        ratios = [p["ratio"] for p in paired]
        document["ratio_to_docker_run"] = statistics.median(ratios) if None not in ratios else None
        if rounds > 1:
            document["rounds"] = paired
            document["ratio_to_docker_run_max"] = max(ratios) if None not in ratios else None
    if fill_seconds is not None:
        document["warm_pool_fill_seconds"] = round(fill_seconds, 4)
    # The embedded engine runs in this process: its peak memory is the process's.
    document["engine_process_peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    path = write_results(output, document)
    figures = {k: v for k, v in document.items() if k not in ("rows", "settings", "machine")}
    print_json(figures)
    click.echo(f"results: {path}", err=True)
    if document["successful_episodes"] != document["episodes"]:
        click.echo(
            f"rock bench rollout: {document['episodes'] - document['successful_episodes']} episode(s) failed",
            err=True,
        )
        sys.exit(1)


def _docker_run_floor(
    settings: RolloutSettings, progress: Progress, task: TaskID
) -> dict[str, Any]:
    """Run the episodes as one ``docker run`` each (the floor); its figures for the document."""
    from rock.bench.rollout import run_docker_baseline

    progress.update(task, status="the floor: one docker run per episode")
    rewards, baseline_seconds = asyncio.run(run_docker_baseline(settings))
    done = [r for r in rewards if r is not None]
    progress.console.print(
        f"docker run baseline: {len(done)}/{len(rewards)} episodes, all rewards in "
        f"{max(done) if done else float('nan'):.2f}s"
    )
    return {
        "successful_episodes": len(done),
        "batch_to_all_rewards_seconds": round(max(done), 4) if len(done) == len(rewards) else None,
        "client_job_complete_seconds": round(baseline_seconds, 4),
    }


def _fill_warm_pool(settings: RolloutSettings) -> float:
    """Have the engine keep ``settings.warm_pool`` episode sandboxes ready; wait until it does."""
    from rock.sdk import warm_pool

    t = time.perf_counter()
    status = asyncio.run(
        warm_pool(settings.sandbox_config(), settings.warm_pool, wait=settings.startup_timeout)
    )
    if status is None or status.ready < status.size:
        raise click.ClickException(
            f"the warm pool could not be filled: {status.last_error if status else 'gone'}"
        )
    return time.perf_counter() - t
