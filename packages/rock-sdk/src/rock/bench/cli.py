"""``rock bench ...``: measured runs that print their figures (never part of the test suite)."""

from __future__ import annotations

import asyncio
import resource
import signal
import statistics
import sys
import time
from pathlib import Path

import click

from rock.bench._output import claim, print_json, say, stderr_console, write_results

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """Run rock's benchmarks and batch jobs; each prints its figures."""
    # Stopped with SIGTERM (`timeout`, a cancelled CI job), a bench cleans up as after Ctrl-C:
    # asyncio.run cancels its task, which stops the sandboxes, admins and servers it started.
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


@bench.command()
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
    _check_memory(memory)
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

        def on_progress(result) -> None:  # type: ignore[no-untyped-def]
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
        from rock.sdk import get_embedded_engine

        engine = get_embedded_engine()
        engine.start()
        engine_seconds = time.perf_counter() - t
        fill_seconds = None
        floors: list[dict] = []
        paired: list[dict] = []
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


def _check_memory(memory: str) -> None:
    """Refuse a bad ``--memory`` before anything starts."""
    from rock_core.errors import InvalidParameter
    from rock_core.sizes import parse_size

    try:
        parse_size(memory, field="--memory")
    except InvalidParameter as exc:
        raise click.UsageError(exc.message) from None


def _docker_run_floor(settings, progress, task) -> dict:  # type: ignore[no-untyped-def]
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


def _fill_warm_pool(settings) -> float:  # type: ignore[no-untyped-def]
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


@bench.command()
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
    from rock.sdk import get_embedded_engine

    click.echo("starting the engine", err=True)
    get_embedded_engine().start()
    click.echo(f"measuring: {starts} starts one after another, {echoes} echo round trips", err=True)
    figures = asyncio.run(
        run_sandbox_bench(starts=starts, echoes=echoes, image=image, memory=memory, cpus=cpus)
    )
    print_json(figures)


@bench.command()
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
    help="[plugins.gem] envs_per_sandbox of the embedded engine.",
)
@click.option(
    "--warm-sandboxes",
    type=click.IntRange(min=0),
    default=None,
    help="[plugins.gem] warm_sandboxes of the embedded engine.",
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
    image: str,
    base_url: str | None,
) -> None:
    """GEM envs (game:Sokoban-v0-easy): step round trip, batched env-steps/s from one async
    client, make → first observation, memory per idle env."""
    from rock.bench.gem import run_gem_bench

    if base_url is None:
        from rock.sdk import configure_embedded_engine, get_embedded_engine
        from rock_core.engine.config import EngineConfig

        options = {
            k: v
            for k, v in (("envs_per_sandbox", envs_per_sandbox), ("warm_sandboxes", warm_sandboxes))
            if v is not None
        }
        configure_embedded_engine(EngineConfig(plugin_options={"gem": {"image": image, **options}}))
        click.echo("starting the engine", err=True)
        engine = get_embedded_engine()
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
    )
    print_json(figures)


@bench.command()
@click.option("--base-url", default=None, help="Measure this admin instead of starting one.")
@click.option(
    "--admin-pid", type=int, default=None, help="Local pid of the --base-url admin, for its memory."
)
@click.option(
    "--clients",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Keep-alive connections sending get_status.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="How long they send.",
)
@click.option(
    "--echoes",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="echo round trips in a session.",
)
@click.option(
    "--sandboxes",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Sandboxes running for the memory figure.",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="Sandbox image (needs python3)."
)
@click.option("--memory", default="128m", show_default=True, help="Memory limit per sandbox.")
@click.option("--cpus", type=float, default=0.1, show_default=True, help="CPUs per sandbox.")
@click.option(
    "--scripted",
    is_flag=True,
    help="Start the admin on a scripted in-memory runtime (no containers): the admin's own costs at N sandboxes.",
)
def admin(
    base_url: str | None,
    admin_pid: int | None,
    clients: int,
    seconds: float,
    echoes: int,
    sandboxes: int,
    image: str,
    memory: str,
    cpus: float,
    scripted: bool,
) -> None:
    """The admin server: get_status requests/s and p99, echo through /run_in_session, admin
    memory, and with --sandboxes running the listing, `rock sandbox list` and /metrics size."""
    from rock.bench.admin import AdminBenchSettings, run_admin_bench

    if scripted and base_url:
        raise click.UsageError("--scripted starts its own admin: leave out --base-url")
    settings = AdminBenchSettings(
        base_url=base_url,
        admin_pid=admin_pid,
        clients=clients,
        seconds=seconds,
        echoes=echoes,
        sandboxes=sandboxes,
        image=image,
        memory=memory,
        cpus=cpus,
        scripted=scripted,
    )
    try:
        figures = asyncio.run(run_admin_bench(settings, say=say))
    except RuntimeError as exc:
        click.echo(f"rock bench admin: {exc}", err=True)
        sys.exit(1)
    print_json(figures)


@bench.command()
@click.option("--base-url", default=None, help="Measure this admin instead of starting one.")
@click.option(
    "--admin-pid", type=int, default=None, help="Local pid of the --base-url admin, for its memory."
)
@click.option(
    "--requests",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="HTTP round trips each way.",
)
@click.option(
    "--echoes",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="WebSocket echoes each way.",
)
@click.option(
    "--download-mb",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="MiB streamed each way.",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="Sandbox image (needs python3)."
)
def proxy(
    base_url: str | None,
    admin_pid: int | None,
    requests: int,
    echoes: int,
    download_mb: int,
    image: str,
) -> None:
    """The admin's proxy against the sandbox's published port: HTTP and WebSocket round trips,
    a streamed download's MB/s and the admin's memory during it."""
    from rock.bench.proxy import ProxyBenchSettings, run_proxy_bench

    settings = ProxyBenchSettings(
        base_url=base_url,
        admin_pid=admin_pid,
        requests=requests,
        echoes=echoes,
        download_mb=download_mb,
        image=image,
    )
    try:
        figures = asyncio.run(run_proxy_bench(settings, say=say))
    except RuntimeError as exc:
        click.echo(f"rock bench proxy: {exc}", err=True)
        sys.exit(1)
    print_json(figures)


@bench.command()
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
    help="Before each point, start and remove as many plain containers straight through Docker's API "
    "(same image, limits and network): Docker's own start rate and removal time, in the same run.",
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
    _check_memory(memory)
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


@bench.command()
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

    _check_memory(memory)
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


@bench.command()
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


@bench.command()
@click.option(
    "--sandboxes",
    "-n",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Sandboxes started at once on each runtime.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Nodes of the stand-in Nomad cluster.",
)
@click.option(
    "--image",
    default="python:3.11",
    show_default=True,
    help="Sandbox image (present locally; needs python3).",
)
@click.option("--memory", default="128m", show_default=True, help="Memory limit per sandbox.")
@click.option(
    "--cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=0.1,
    show_default=True,
    help="CPUs per sandbox.",
)
@click.option(
    "--runtime",
    "runtimes",
    multiple=True,
    type=click.Choice(["docker", "docker-published", "nomad"]),
    default=("docker", "nomad"),
    show_default=True,
    help="Runtimes to measure, in order (repeat the option); docker-published: Docker publishing ports as Nomad does.",
)
def cluster(
    sandboxes: int, nodes: int, image: str, memory: str, cpus: float, runtimes: tuple[str, ...]
) -> None:
    """Start the same sandboxes through an admin on the Docker runtime and on the nomad runtime
    (a stand-in Nomad cluster), in the same run: start p50/p95, all-running seconds and the
    admin's peak memory, side by side."""
    from rock.bench.cluster import ClusterBenchSettings, run_cluster_bench, table

    _check_memory(memory)
    settings = ClusterBenchSettings(
        sandboxes=sandboxes,
        nodes=nodes,
        image=image,
        memory=memory,
        cpus=cpus,
        runtimes=tuple(runtimes),
    )
    try:
        results = asyncio.run(run_cluster_bench(settings, say=say))
    except RuntimeError as exc:
        click.echo(f"rock bench cluster: {exc}", err=True)
        sys.exit(1)
    click.echo(table(results), err=True)
    print_json(results)


@bench.command()
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
