"""``rock bench admin|proxy|cluster``: benches through an admin server (its requests, its
proxy, and the Docker and Nomad runtimes behind it)."""

from __future__ import annotations

import asyncio
import sys

import click

from rock.bench._cli_checks import check_memory
from rock.bench._output import print_json, say

__all__ = ["admin", "cluster", "proxy"]


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
