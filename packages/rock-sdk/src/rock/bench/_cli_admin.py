"""``rock bench admin|proxy|cluster|ha``: benches through an admin server (its requests, its
proxy, the Docker and Nomad runtimes behind it, and two admins of one cluster)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from rock.bench._cli_checks import check_memory
from rock.bench._output import print_json, print_table, say, stderr_console

__all__ = ["admin", "cluster", "ha", "proxy"]


@click.command()
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


@click.command()
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


@click.command()
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

    check_memory(memory)
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


@click.command()
@click.option(
    "--kills",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Failovers measured: each a kill -9 of the leader.",
)
@click.option(
    "--clients",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="SDK client threads calling get_status through the kills.",
)
@click.option(
    "--load-processes",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Processes sending get_status for the throughput figures.",
)
@click.option(
    "--load-callers",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Callers in each load process.",
)
@click.option(
    "--load-seconds",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="How long each throughput run sends.",
)
@click.option(
    "--load-rounds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Rounds of the two throughput runs, taken in turn (the medians are reported).",
)
@click.option(
    "--image", default="python:3.11", show_default=True, help="The sandbox's image (present)."
)
@click.option(
    "--postgres-url",
    envvar="ROCK_BENCH_POSTGRES_URL",
    default=None,
    help="A PostgreSQL server whose user may create databases (default: the one "
    "scripts/ensure-postgres.sh of this checkout runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON on stdout.")
def ha(
    kills: int,
    clients: int,
    load_processes: int,
    load_callers: int,
    load_seconds: float,
    load_rounds: int,
    image: str,
    postgres_url: str | None,
    as_json: bool,
) -> None:
    """Two admins of one cluster on a fresh PostgreSQL database: failover time after kill -9
    of the leader (p50, max), client calls that failed through the failovers, and get_status
    calls/s against one admin and spread over both."""
    from rock.bench._postgres import NoPostgres
    from rock.bench.ha import HaBenchSettings, rows, run_ha_bench

    settings = HaBenchSettings(
        kills=kills,
        clients=clients,
        load_processes=load_processes,
        load_callers=load_callers,
        load_seconds=load_seconds,
        load_rounds=load_rounds,
        image=image,
        postgres_url=postgres_url,
    )
    try:
        figures = asyncio.run(run_ha_bench(settings, say=say))
    except (RuntimeError, NoPostgres) as exc:
        click.echo(f"rock bench ha: {exc}", err=True)
        sys.exit(1)
    # The table for a person: on stdout, or with --json on stderr, stdout holding the JSON.
    console = stderr_console() if as_json else stdout_console()
    print_table(console, "rock bench ha", ("figure", "value"), rows(figures))
    if as_json:
        print_json(figures)


def stdout_console() -> Any:
    """A rich console on stdout."""
    from rich.console import Console

    return Console()
