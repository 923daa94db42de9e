"""``rock bench control-plane``: rock's admin, engine, store and SDK at ROCK's scale (16,000
concurrent creates), on a runtime that simulates containers.

The admin is a real one over its socket (:mod:`rock.bench.scripted_admin`): the scripted runtime,
whose units start in a uniformly random ``--start-seconds`` (a container's start, waited without
a process) and whose every rocklet call goes to one real rocklet in a process of its own (its
readiness probes answered in an event loop, :mod:`rock_core.testing.loop_rocklet`; its CPU
counted apart from the admin's, as a sandbox's rocklet runs in the sandbox). Its
start queue admits all of them at once (``ROCK_ENGINE_MAX_CONCURRENT_STARTS`` = the sandboxes, as
a cluster's nodes start in parallel). With ``--runtime nomad`` the admin is ``rock admin serve`` on
rock's nomad runtime against a stand-in Nomad of ``--nodes`` simulated nodes whose tasks start
in ``--start-seconds`` and run nothing (:mod:`rock.bench._control_plane_nomad`). Then:

1. **start**: ``--clients`` client processes, each with its share of the sandboxes, start them all
   at once through the SDK (``Sandbox(config).start()``, which waits until running) from one
   agreed instant; each start's seconds are counted from that instant (each client has loaded
   the SDK's remote driver and its HTTP client before it, as a trainer process has after its
   first call). Figures: successes, start p50/p99, the time until all ran, and from the records
   where the time went: when the admin accepted each start, and how long it took from there
   to run;
2. **at N**: the admin's resident memory (``VmRSS``) and per sandbox beyond the idle admin's;
   ``get_status`` p50/p99 (calls one after another over the sandboxes on one raw keep-alive
   connection) and the whole listing's p50/p99 (``GET /sandboxes`` page after page, 500 a page);
3. **admin restart**: SIGTERM, then a new admin on the same state (the scripted units are kept
   in a file across it, as containers outlive an admin); the seconds to stop and until it
   answers, and how many sandboxes the listing shows running afterwards.

The admin and its state are removed at the end (the scripted units end with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import httpx

from rock.bench._host import cpu_seconds, machine_steal_seconds, steal_percent
from rock.bench.admin import (
    PREFIX,
    BenchAdmin,
    _envelope_result,
    _get_status_latency,
    _listing_latency,
    rss_bytes,
)
from rock.bench.rollout import machine_info, percentile
from rock_core.ports import listen_port

__all__ = ["ControlPlaneSettings", "GOAL_ADMIN_BYTES", "GOAL_P50_SECONDS", "run_control_plane"]

GOAL_P50_SECONDS = 5.0
GOAL_ADMIN_BYTES = 2**30


@attrs.frozen(kw_only=True)
class ControlPlaneSettings:
    """What ``rock bench control-plane`` runs.

    :param sandboxes: sandboxes started at once.
    :param clients: client processes sharing them.
    :param start_seconds: ``(lo, hi)``: each simulated unit's start takes a random time between.
    :param status_calls: / ``list_calls``: ``get_status`` calls and whole listings timed at N.
    :param startup_timeout: each start's limit once it leaves the admin's start queue.
    :param admin_max_connections: the admin's ``max_connections`` (``None``: its default, 2048;
        past it the admin answers HTTP 503 with ``Retry-After``, and the SDK sends it again).
    :param admin_profile: write a cProfile of the first admin (until its restart) to this file,
        and of the restarted one to this file's name plus ``.restart``.
    """

    sandboxes: int = 16000
    clients: int = 8
    start_seconds: tuple[float, float] = (0.5, 2.0)
    status_calls: int = 1000
    list_calls: int = 5
    startup_timeout: float = 600.0
    admin_max_connections: int | None = None
    #: ``"scripted"``, or ``"nomad"``: rock's nomad runtime against a stand-in Nomad of
    #: ``nodes`` simulated nodes (:mod:`rock.bench._control_plane_nomad`).
    runtime: str = "scripted"
    nodes: int = 50
    admin_profile: Path | None = None


async def _client_starts(url: str, ids: list[str], at: float, timeout: float) -> dict[str, Any]:
    """Start ``ids`` at once at wall time ``at`` through the SDK; each one's seconds or error."""
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    sandboxes = [
        Sandbox(
            SandboxConfig(
                base_url=url,
                sandbox_id=sandbox_id,
                image="scripted",
                memory="128m",
                cpus=0.1,
                startup_timeout=timeout,
                auto_clear_seconds=86400,
                experiment_id="bench-control-plane",
            )
        )
        for sandbox_id in ids
    ]
    # The SDK's one-time costs of a trainer process, paid before the common instant as its
    # imports are: the remote driver (httpx's import) and its HTTP client for this event loop.
    # Left in, eight clients paid them at the instant, together (some 0.5 s of the machine's two
    # cores before the admin saw a start), a cost of the bench's shape, not of a start.
    driver = sandboxes[0]._get_driver() if sandboxes else None
    if driver is not None and hasattr(driver, "_http"):
        await driver._http()
    await asyncio.sleep(max(0.0, at - time.time()))
    cpu_at = _cpu_seconds()  # the process's start (imports, the sandboxes' configs) before it

    async def one(sandbox: Any) -> float | str:
        try:
            await sandbox.start()
        except Exception as exc:  # every failed start is counted and reported
            return f"{type(exc).__name__}: {exc}"
        return time.time() - at

    results = await asyncio.gather(*(one(s) for s in sandboxes))
    return {"results": dict(zip(ids, results, strict=True)), "cpu_at": cpu_at}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client_main(argv: list[str]) -> int:
    """``python -m rock.bench.control_plane URL AT TIMEOUT ID...``: one client process; prints
    ``{"results": {sandbox_id: seconds or error}, "cpu_seconds": its CPU time,
    "cpu_seconds_starting": its CPU time from the common instant on}`` as JSON."""
    url, at, timeout, *ids = argv
    done = asyncio.run(_client_starts(url, ids, float(at), float(timeout)))
    cpu = _cpu_seconds()
    print(
        json.dumps(
            {
                "results": done["results"],
                "cpu_seconds": cpu,
                "cpu_seconds_starting": cpu - done["cpu_at"],
            }
        )
    )
    return 0


async def _start_all(
    settings: ControlPlaneSettings, url: str, run: str, say: Callable[[str], None]
) -> dict[str, Any]:
    ids = [f"{run}-{n:05d}" for n in range(settings.sandboxes)]
    shares = [ids[k :: settings.clients] for k in range(settings.clients)]
    # Let every client import the SDK and build its sandboxes before the common instant.
    at = time.time() + 3.0 + 0.3 * settings.clients + 0.0005 * settings.sandboxes
    clients = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rock.bench.control_plane",
            url,
            str(at),
            str(settings.startup_timeout),
            *share,
            stdout=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "ROCK_BASE_URL"},
        )
        for share in shares
        if share
    ]
    say(f"{len(clients)} client processes start {settings.sandboxes} sandboxes at once")
    outputs = await asyncio.gather(*(c.communicate() for c in clients))
    results: dict[str, Any] = {}
    cpu = starting = 0.0
    for client, (out, _) in zip(clients, outputs, strict=True):
        if client.returncode != 0:
            raise RuntimeError(f"a client process exited {client.returncode}")
        output = json.loads(out)
        results.update(output["results"])
        cpu += output["cpu_seconds"]
        starting += output["cpu_seconds_starting"]
    seconds = [v for v in results.values() if isinstance(v, float)]
    errors = sorted({v for v in results.values() if isinstance(v, str)})
    return {
        "started": len(seconds),
        "failed_starts": settings.sandboxes - len(seconds),
        "start_errors": errors[:5],
        "start_p50_seconds": _round(percentile(seconds, 50)),
        "start_p99_seconds": _round(percentile(seconds, 99)),
        "all_running_seconds": _round(max(seconds, default=None)),
        "clients_cpu_seconds": round(cpu, 1),
        "clients_cpu_ms_per_start": round(1000 * cpu / settings.sandboxes, 2),
        # From the common instant on: without each process's own start (its imports, about
        # 0.3 s of CPU each, and its sandboxes' configs), which the figure above spreads over
        # the sandboxes, so it is larger the fewer they are.
        "clients_cpu_ms_per_start_starting": round(1000 * starting / settings.sandboxes, 2),
        "ids": [i for i, v in results.items() if isinstance(v, float)],
        "at": at,
    }


async def _start_phases(http: httpx.AsyncClient, ids: list[str], at: float) -> dict[str, Any]:
    """Where a start's time went, from the records (one listing): when the admin accepted it
    (its ``create_time``, from the common instant) and how long it took from there to run
    (``start_time`` after ``create_time``: the simulated unit's start, its readiness probe and
    whatever the admin's loop kept it waiting for). A p50 far over the floor with accepts late
    means the admin's loop is the queue."""
    wanted = set(ids)
    accepted: list[float] = []
    to_running: list[float] = []
    page = 1
    while True:
        answer = _envelope_result(
            await http.get(f"{PREFIX}/sandboxes", params={"page": page, "page_size": 1000}),
            "list_sandboxes",
        )
        for item in answer["items"]:
            if item["sandbox_id"] not in wanted or not item.get("start_time"):
                continue
            created = datetime.fromisoformat(item["create_time"]).timestamp()
            running = datetime.fromisoformat(item["start_time"]).timestamp()
            accepted.append(created - at)
            to_running.append(running - created)
        if not answer["has_more"] or not answer["items"]:
            break
        page += 1
    return {
        "accepted_p50_seconds": _round(percentile(accepted, 50)),
        "accepted_p99_seconds": _round(percentile(accepted, 99)),
        "accepted_to_running_p50_seconds": _round(percentile(to_running, 50)),
        "accepted_to_running_p99_seconds": _round(percentile(to_running, 99)),
    }


def _rocklet_pid(state_dir: Path) -> int | None:
    """The scripted admin's rocklet process (``--rocklet process`` writes its pid)."""
    try:
        return int((state_dir / "rocklet.pid").read_text())
    except (OSError, ValueError):
        return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _running_count(url: str, prefix: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        running, page = 0, 1
        while True:
            response = await http.get(
                f"{PREFIX}/sandboxes", params={"page": page, "page_size": 500}
            )
            result = response.json()["result"]
            running += sum(
                1
                for item in result["items"]
                if str(item.get("sandbox_id", "")).startswith(prefix)
                and item.get("state") == "running"
            )
            if not result["has_more"] or not result["items"]:
                return running
            page += 1


async def run_control_plane(
    settings: ControlPlaneSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run the bench (see the module docstring); return its document of figures."""
    state_dir = Path(tempfile.mkdtemp(prefix="rock-bench-control-plane-"))
    env = {
        **os.environ,
        "ROCK_ADMIN_STATE_DIR": str(state_dir),
        "ROCK_ENGINE_MAX_CONCURRENT_STARTS": str(settings.sandboxes),
    }
    env.pop("ROCK_BASE_URL", None)
    if settings.admin_max_connections is not None:
        env["ROCK_ADMIN_MAX_CONNECTIONS"] = str(settings.admin_max_connections)
    lo, hi = settings.start_seconds
    command = [
        sys.executable,
        "-m",
        "rock.bench.scripted_admin",
        "--start-seconds",
        f"{lo},{hi}",
        "--units-file",
        str(state_dir / "scripted-units.json"),
        # The sandboxes' shared rocklet in a process of its own, answering readiness probes in
        # an event loop: its CPU is counted apart (simulated_rocklet_cpu_ms_per_start), as a
        # deployment's rocklets run in the sandboxes, not in the admin.
        "--rocklet",
        "process",
    ]
    stand_in = contextlib.ExitStack()
    stand_in_pid: int | None = None
    if settings.runtime == "nomad":
        from rock.bench._control_plane_nomad import nomad_admin_command, simulated_nomad

        say(f"starting a stand-in Nomad of {settings.nodes} simulated nodes")
        address, stand_in_pid = stand_in.enter_context(
            simulated_nomad(settings.nodes, settings.sandboxes, settings.start_seconds)
        )
        command = nomad_admin_command(state_dir, address)
    profiled = [] if settings.admin_profile is None else ["--profile", str(settings.admin_profile)]
    admin = BenchAdmin(state_dir, listen_port(), env, command + profiled)
    admin.start_timeout = 900.0  # a restarted admin answers once it took its sandboxes back
    run = f"cp{os.getpid()}"
    figures: dict[str, Any] = {"sandboxes": settings.sandboxes, "clients": settings.clients}
    figures["unit_start_seconds"] = [lo, hi]
    figures["runtime"] = settings.runtime
    if settings.runtime == "nomad":
        figures["nomad_nodes"] = settings.nodes
    figures["admin_max_connections"] = settings.admin_max_connections or "default"
    figures["host_load_before"] = [round(x, 2) for x in os.getloadavg()]
    try:
        say(f"starting an admin on a {settings.runtime} runtime (unit starts {lo:g}..{hi:g} s)")
        await admin.start()
        idle = rss_bytes(admin.pid) or 0
        figures["admin_rss_idle_mb"] = round(idle / 2**20, 1)
        admin_cpu = cpu_seconds(admin.pid) or 0.0
        loop_cpu = cpu_seconds(admin.pid, main_thread=True) or 0.0
        nomad_cpu = (cpu_seconds(stand_in_pid) or 0.0) if stand_in_pid else 0.0
        rocklet_pid = _rocklet_pid(state_dir)
        rocklet_cpu = (cpu_seconds(rocklet_pid) or 0.0) if rocklet_pid else 0.0
        steal_before, wall_before = machine_steal_seconds(), time.monotonic()
        started = await _start_all(settings, admin.url, run, say)
        # The hypervisor's share of the cores while they started: with a high one every figure
        # below is slower than the code (a noisy virtual machine), whatever the load says.
        figures["host_steal_percent_starting"] = steal_percent(
            steal_before, machine_steal_seconds(), time.monotonic() - wall_before
        )
        # The admin's CPU while they started: its own process only (the readiness probes it
        # makes included; the simulated rocklet that answers them is in another process).
        # And its main thread's alone: the event loop, which every request waits for (other
        # threads run beside it, on the other core). Read before the process's, as it was read
        # after it at the start, so the thread is never counted over a longer span.
        loop_cpu = (cpu_seconds(admin.pid, main_thread=True) or 0.0) - loop_cpu
        admin_cpu = (cpu_seconds(admin.pid) or 0.0) - admin_cpu
        figures["admin_cpu_seconds_starting"] = round(admin_cpu, 1)
        figures["admin_cpu_ms_per_start"] = round(1000 * admin_cpu / settings.sandboxes, 2)
        figures["admin_loop_cpu_ms_per_start"] = round(1000 * loop_cpu / settings.sandboxes, 2)
        if rocklet_pid:  # the scripted runtime's one simulated rocklet (not the admin's CPU)
            rocklet_cpu = (cpu_seconds(rocklet_pid) or 0.0) - rocklet_cpu
            figures["simulated_rocklet_cpu_ms_per_start"] = round(
                1000 * rocklet_cpu / settings.sandboxes, 2
            )
        if stand_in_pid:  # the stand-in Nomad's servers and nodes (and their shared rocklet)
            nomad_cpu = (cpu_seconds(stand_in_pid) or 0.0) - nomad_cpu
            figures["stand_in_cpu_ms_per_start"] = round(1000 * nomad_cpu / settings.sandboxes, 2)
        ids = started.pop("ids")
        at = started.pop("at")
        figures.update(started)
        # The floor: the simulated containers' own start times (uniform in lo..hi).
        figures["floor_start_p50_seconds"] = round((lo + hi) / 2, 3)
        figures["floor_start_p99_seconds"] = round(lo + 0.99 * (hi - lo), 3)
        p50 = started["start_p50_seconds"]
        figures["start_p50_over_floor"] = (
            None if p50 is None else round(p50 / max(1e-9, figures["floor_start_p50_seconds"]), 2)
        )
        say(
            f"started {started['started']}/{settings.sandboxes}: p50 {started['start_p50_seconds']}s, "
            f"p99 {started['start_p99_seconds']}s"
        )
        await asyncio.sleep(2)  # let the burst's garbage settle before reading memory
        rss = rss_bytes(admin.pid) or 0
        figures["admin_rss_mb"] = round(rss / 2**20, 1)
        figures["admin_kib_per_sandbox"] = round((rss - idle) / 1024 / len(ids), 1) if ids else None
        if ids:
            say(f"with {len(ids)} sandboxes: get_status and listing latency")
            figures.update(await _get_status_latency(admin.url, ids, settings.status_calls))
            async with httpx.AsyncClient(base_url=admin.url, timeout=600) as http:
                figures.update(await _listing_latency(http, settings.list_calls))
                figures.update(await _start_phases(http, ids, at))
        say(f"admin restart with {len(ids)} sandbox records")
        if settings.admin_profile is not None:  # the new admin's profile: FILE.restart
            admin.command = [*command, "--profile", f"{settings.admin_profile}.restart"]
        stopped, answering = await admin.restart()
        figures["admin_restart_stop_seconds"] = round(stopped, 3)
        figures["admin_restart_answering_seconds"] = round(answering, 3)
        figures["admin_rss_after_restart_mb"] = round((rss_bytes(admin.pid) or 0) / 2**20, 1)
        figures["running_after_restart"] = await _running_count(admin.url, run)
        say(
            f"restart: stopped in {stopped:.1f}s, answering after {answering:.1f}s, "
            f"{figures['running_after_restart']} running"
        )
    finally:
        await admin.stop()
        stand_in.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    figures["goals"] = {
        "all_succeed": figures.get("failed_starts") == 0,
        "start_p50_le_5s": (figures.get("start_p50_seconds") or 1e9) <= GOAL_P50_SECONDS,
        "admin_le_1gib": figures.get("admin_rss_mb", 1e9) * 2**20 <= GOAL_ADMIN_BYTES,
    }
    figures["host_load_after"] = [round(x, 2) for x in os.getloadavg()]
    return {"figures": figures, "machine": machine_info()}


if __name__ == "__main__":
    sys.exit(_client_main(sys.argv[1:]))
