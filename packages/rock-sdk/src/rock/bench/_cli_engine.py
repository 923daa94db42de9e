"""``rock bench sandbox|gem|monitor|archive``: what one sandbox, one GEM env, the resource
sampling and an archive cost the embedded engine."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from rock.bench._output import claim, print_json, say, stderr_console

__all__ = ["archive", "gem", "monitor", "sandbox"]


@click.command()
@click.option(
    "--starts",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Sandboxes started one after another.",
)
@click.option(
    "--echoes",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="echo round trips in one session.",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="Sandbox image (needs python3)."
)
@click.option("--memory", default="512m", show_default=True, help="Memory limit per sandbox.")
@click.option("--cpus", type=float, default=1.0, show_default=True, help="CPUs per sandbox.")
def sandbox(starts: int, echoes: int, image: str, memory: str, cpus: float) -> None:
    """Uncontended figures: create → ready, echo round trip in a session, rocklet and engine memory."""
    from rock.bench.sandbox import run_sandbox_bench
    from rock.sdk import get_embedded_driver

    click.echo("starting the engine", err=True)
    get_embedded_driver().start()
    click.echo(f"measuring: {starts} starts one after another, {echoes} echo round trips", err=True)
    figures = asyncio.run(
        run_sandbox_bench(starts=starts, echoes=echoes, image=image, memory=memory, cpus=cpus)
    )
    print_json(figures)


@click.command()
@click.option(
    "--steps",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="Steps of one env, timed one by one.",
)
@click.option(
    "--envs",
    "num_envs",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Envs stepped as batches.",
)
@click.option(
    "--groups",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Vector envs the envs are split in, stepped concurrently.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="How long the batches run.",
)
@click.option(
    "--makes",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Envs made one after another (make → first observation).",
)
@click.option(
    "--idle-envs",
    type=click.IntRange(min=0),
    default=32,
    show_default=True,
    help="Idle envs whose memory is measured (embedded only; 0: skip).",
)
@click.option(
    "--envs-per-sandbox",
    type=click.IntRange(min=1),
    default=None,
    help="[plugins.gem] envs_per_sandbox of the embedded engine (default: with shared processes,"
    " the batched figure's envs, so that they share one sandbox's processes as the floor's share"
    " its workers; else the plugin's).",
)
@click.option(
    "--warm-sandboxes",
    type=click.IntRange(min=0),
    default=None,
    help="[plugins.gem] warm_sandboxes of the embedded engine.",
)
@click.option(
    "--shared-processes",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="[plugins.gem] shared_processes of the embedded engine (0: a process per env).",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Rounds of the batched figure, each followed by a round of its floor (the same load).",
)
@click.option(
    "--floor-processes",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Processes of the floor, GEM over pipes (one per core of an env sandbox; 0: no floor).",
)
@click.option(
    "--image",
    default="rock-gem/python:3.11",
    show_default=True,
    help="[plugins.gem] image of the embedded engine (this one has GEM built in; python:3.11 gets it uploaded).",
)
@click.option(
    "--base-url", default=None, help="Measure through this admin instead of the embedded engine."
)
def gem(
    steps: int,
    num_envs: int,
    groups: int,
    seconds: float,
    makes: int,
    idle_envs: int,
    envs_per_sandbox: int | None,
    warm_sandboxes: int | None,
    shared_processes: int,
    rounds: int,
    floor_processes: int,
    image: str,
    base_url: str | None,
) -> None:
    """GEM envs (game:Sokoban-v0-easy): step round trip, batched env-steps/s from one async
    client and, in the same run, its floor (GEM over pipes, one process per core), make → first
    observation, memory per idle env."""
    from rock.bench.gem import run_gem_bench

    options: dict[str, object] = {}
    if base_url is None:
        from rock.sdk import configure_embedded_driver, get_embedded_driver
        from rock_core.engine.config import EngineConfig

        if envs_per_sandbox is None and shared_processes:
            envs_per_sandbox = num_envs  # one sandbox, one process per core: the floor's shape
        options = {
            k: v
            for k, v in (
                ("envs_per_sandbox", envs_per_sandbox),
                ("warm_sandboxes", warm_sandboxes),
                ("shared_processes", shared_processes),
            )
            if v is not None
        }
        configure_embedded_driver(EngineConfig(plugin_options={"gem": {"image": image, **options}}))
        click.echo("starting the engine", err=True)
        engine = get_embedded_driver()
        engine.start()
        if warm_sandboxes:
            import rock

            rock.make("game:GuessTheNumber-v0-easy").close()  # the provider sets its warm pool
            engine.call_blocking(engine.manager.wait_warm, 300.0)
    elif envs_per_sandbox is not None or warm_sandboxes is not None:
        raise click.UsageError(
            "--envs-per-sandbox and --warm-sandboxes set the embedded engine; the admin's are in its [plugins.gem]"
        )
    figures = run_gem_bench(
        steps=steps,
        num_envs=num_envs,
        groups=groups,
        seconds=seconds,
        makes=makes,
        idle_envs=idle_envs,
        base_url=base_url,
        say=say,
        floor_image=image,
        floor_processes=floor_processes,
        rounds=rounds,
    )
    if options:
        figures["gem_options"] = options
    print_json(figures)


@click.command()
@click.option(
    "--count",
    "-n",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Running sandboxes sampled.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Samples taken and averaged.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="The stats_interval the cost is reported at.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
def monitor(count: int, samples: int, interval: float, image: str) -> None:
    """What sampling N running sandboxes' resource use costs the engine (goal: 200 every 5 s <= 2% of a core).

    Prints the engine's CPU milliseconds per sample and its share of one core at the interval,
    as JSON (stdout); exits 1 when the goal is missed.
    """
    from rock.bench.monitor import GOAL_PERCENT_OF_A_CORE, MonitorSettings, run_monitor

    settings = MonitorSettings(count=count, samples=samples, interval=interval, image=image)
    document = run_monitor(settings, say=say)
    print_json(document)
    figures = document["figures"]
    if not figures["goal_met"]:
        click.echo(
            f"sampling costs {figures['percent_of_a_core_at_interval']}% of a core "
            f"(goal: {GOAL_PERCENT_OF_A_CORE}%)",
            err=True,
        )
        sys.exit(1)


@click.command()
@click.option(
    "--mb",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="MiB the sandbox writes.",
)
@click.option(
    "--store",
    type=click.Choice(["s3", "fs"]),
    default="s3",
    show_default=True,
    help="Archive store: s3 (rock-archive-s3; a moto server is started unless an endpoint is given) or fs.",
)
@click.option(
    "--store-option",
    "store_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A key of the store's plugin table (repeatable), e.g. endpoint=http://127.0.0.1:9000.",
)
@click.option("--image", default="python:3.11", show_default=True, help="Sandbox image.")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="New folder for results.json.",
)
def archive(
    mb: int, store: str, store_options: tuple[str, ...], image: str, output: Path | None
) -> None:
    """Archive and restore a sandbox that wrote N MiB, beside `docker commit` plus an upload of the same bytes.

    Prints archive and restore seconds, the bytes stored and the engine's memory growth, each
    against its goal (stored <= 1.1 x written, growth <= 64 MiB, each <= 2 x the floor), as a
    table (stderr) and JSON (stdout); exits 1 if the file did not come back intact.
    """
    from rock.bench._output import report
    from rock.bench.archive import ArchiveSettings, run_archive, table_rows

    options: dict[str, str] = {}
    for item in store_options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(
                f"expected KEY=VALUE, got {item!r}", param_hint="--store-option"
            )
        options[key] = value
    if output is not None:
        claim(output)
    console = stderr_console()
    settings = ArchiveSettings(mb=mb, store=store, store_options=options, image=image)
    try:
        document = run_archive(settings, say=lambda line: console.print(line, highlight=False))
    except RuntimeError as exc:
        click.echo(f"rock bench archive: {exc}", err=True)
        sys.exit(1)
    figures = document["figures"]
    report(
        console,
        document,
        title=f"rock bench archive ({mb} MiB, store {store})",
        columns=["", "measured", "goal"],
        rows=table_rows(figures),
        output=output,
    )
    if not figures["file_intact"]:
        console.print("[bold red]the written file did not come back intact after the restore[/]")
        sys.exit(1)
