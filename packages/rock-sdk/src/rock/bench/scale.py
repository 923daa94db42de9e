"""``rock bench scale``: N sandboxes at once, held, measured under that load, then torn down.

Each point of the run (one ``--count``, or each N of ``--curve``) does what a trainer does with
N environments, through ROCK's SDK (:class:`~rock.sdk.sandbox.client.Sandbox`):

1. **start** N sandboxes at once, each held in its own task by ``async with Sandbox(config)``:
   the time until all run and the start rate (running sandboxes per second);
   and the CPU this process (the trainer's: its SDK, and in embedded mode the engine too)
   used meanwhile;
2. **idle** for a few seconds: the engine's resident memory and CPU use (embedded: this
   process, where the engine runs; remote: the admin server's pid), and the host's memory per
   idle sandbox, two ways: the drop of ``MemAvailable`` (``/proc/meminfo``, the whole host:
   noisy when others share it) and the sum of what is attributed to the sandboxes' containers
   (each container's memory cgroup, plus the ``docker-proxy`` and ``containerd-shim`` processes
   that serve them, read from ``/proc``);
3. **load**: ``get_status`` latency (calls one after another, spread round-robin over the
   sandboxes), command latency (``execute(["echo", "x"])`` likewise), and the listing's latency
   (the engine's ``list_sandboxes``; remote: also ``rock sandbox list --json`` as a subprocess);
4. **admin restart** (``--remote`` only): the admin is stopped gracefully (SIGTERM) and started
   again on the same state while the sandboxes are held; then how many of them still run (the
   listing) and whether a command answers in a sample of 20;
5. **teardown** as a trainer's exit does it: every ``async with`` is left at once (a stop; with
   the default lifecycle the sandbox is then deleted), and in embedded mode the engine is closed
   as the interpreter's exit would; then the time until no program of a sandbox runs in any of
   the point's containers (their cgroups; rock's agent and Docker's init stay until the
   container is removed), the time until ``docker ps -a`` shows no container of the point
   (rock's ``rock.sandbox_id`` label and the point's name prefix), and the leftovers.

With ``--docker-floor``, each point begins and ends with the floor: as many plain containers
started straight through Docker's API (the same image, limits and network, 8 at a time) and removed
the same way, before rock's starts and again after rock's teardown, so rock's start rate and
cleanup time can be read against Docker's own, measured in the same run on the same machine; rock's
rate is divided by the mean of the two floors, and their spread shows when the host's pace moved
during the point (:data:`rock.bench._docker_floor.FLOOR_METHOD`).

Each point also records the host's load (``/proc/loadavg``) at the start of each phase
(``host_loadavg``; the 1-minute figure also as ``host_load_1m_*``): the 1-minute average lags,
so it says how busy the host was around a phase, not within it.

Embedded mode uses the process-wide engine (a new one per point: closing it is part of the
teardown). ``--remote`` starts one ``rock admin serve`` for the whole run
(:func:`rock.bench.admin.running_admin`) and points the SDK at it with ``base_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from rock.bench._cpu_split import CPU_SPLIT_ROWS, flat, measured, split_line
from rock.bench._docker_floor import FLOOR_METHOD, docker_floor, floor_figures, floor_ratios
from rock.bench._host import (
    cgroup_procs_file,
    containers,
    cpu_seconds,
    host_memory,
    machine_busy_seconds,
    machine_steal_seconds,
    mb,
    steal_percent,
    wait_gone,
)
from rock.bench.admin import BenchAdmin, list_cli_seconds, proc_kib_bytes, rss_bytes, running_admin
from rock.bench.rollout import machine_info, percentile

__all__ = ["ScaleSettings", "cpu_seconds", "run_scale", "table_rows"]

MEMORY_METHOD = (
    "host_memavailable_drop_per_sandbox_mb: drop of MemAvailable in /proc/meminfo from before the starts to "
    "the idle window, divided by the sandboxes running (the whole host: other work moves it); "
    "container_*: the containers' memory cgroups (usage, and working set = usage - inactive file cache); "
    "proxy_shim_rss_per_sandbox_mb: VmRSS of the docker-proxy processes publishing the sandboxes' ports "
    "(none unless the docker runtime has publish_ports=True) "
    "and of their containerd-shim processes; proxy_shim_pss_per_sandbox_mb: the same processes' PSS (shared "
    "pages divided among their users); host_memory_per_sandbox_mb: container cgroup usage + that PSS"
)


@attrs.frozen(kw_only=True)
class ScaleSettings:
    """What ``rock bench scale`` runs.

    :param counts: sandboxes held at once, one point per value, in order.
    :param remote: through a ``rock admin`` server started for the run instead of the embedded engine.
    :param image: / ``memory`` / ``cpus``: every sandbox's.
    :param status_calls: ``get_status`` calls per point; ``command_calls``: ``echo`` commands;
        ``list_calls``: listings.
    :param idle_seconds: the idle window in which the engine's CPU use is measured.
    :param startup_timeout: each start's limit (from when it leaves the engine's start queue).
    :param gone_timeout: how long the teardown may take before what is left counts as leftovers.
    :param docker_floor: before each point and again after its teardown, start as many plain
        containers straight through Docker's API (same image, limits and network, 8 at a time) and
        remove them 8 at a time: the floor rock's start rate and cleanup are compared with (the
        mean of the two), measured in the same run.
    """

    counts: tuple[int, ...]
    remote: bool = False
    image: str = "python:3.11"
    memory: str = "256m"
    cpus: float = 0.1
    status_calls: int = 300
    command_calls: int = 100
    list_calls: int = 20
    idle_seconds: float = 5.0
    startup_timeout: float = 300.0
    gone_timeout: float = 300.0
    docker_floor: bool = False

    def sandbox_config(self, sandbox_id: str, base_url: str | None) -> Any:
        """The :class:`~rock.sdk.sandbox.config.SandboxConfig` of one sandbox of a point."""
        from rock.sdk.sandbox.config import SandboxConfig

        return SandboxConfig(
            base_url=base_url,
            sandbox_id=sandbox_id,
            image=self.image,
            memory=self.memory,
            cpus=self.cpus,
            startup_timeout=self.startup_timeout,
            auto_clear_seconds=3600,  # a long burst must not idle-stop the first sandboxes
            experiment_id="bench-scale",
        )


def _latency(name: str, seconds: list[float]) -> dict[str, Any]:
    def ms(q: float) -> float | None:
        p = percentile(seconds, q)
        return None if p is None else round(p * 1000, 3)

    return {f"{name}_p50_ms": ms(50), f"{name}_p99_ms": ms(99), f"{name}_calls": len(seconds)}


# -- one point -----------------------------------------------------------------------------------

# The phases at whose start the host's load is recorded, in order.
LOAD_PHASES = (
    "before_floor",
    "before_starts",
    "after_starts",
    "before_teardown",
    "after_teardown",
    "after_floor",
)


def host_loadavg() -> list[Any]:
    """``/proc/loadavg``'s 1-, 5- and 15-minute averages and its runnable/total tasks."""
    try:
        with open("/proc/loadavg") as file:
            fields = file.read().split()
    except OSError:
        return []
    return [float(fields[0]), float(fields[1]), float(fields[2]), fields[3]]


def _note_load(figures: dict[str, Any], phase: str) -> None:
    load = host_loadavg()
    figures.setdefault("host_loadavg", {})[phase] = load
    figures[f"host_load_1m_{phase}"] = load[0] if load else None


@attrs.define
class _Holds:
    """The point's sandboxes as their tasks hold them."""

    count: int
    running: dict[int, Any] = attrs.field(factory=dict)
    start_seconds: dict[int, float] = attrs.field(factory=dict)
    errors: dict[int, str] = attrs.field(factory=dict)
    settled: asyncio.Event = attrs.field(factory=asyncio.Event)
    release: asyncio.Event = attrs.field(factory=asyncio.Event)

    def note(self) -> None:
        if len(self.running) + len(self.errors) == self.count:
            self.settled.set()


async def _hold(n: int, config: Any, holds: _Holds, t0: float) -> None:
    """Start one sandbox in ``async with``, keep it until released, leave the block."""
    from rock.sdk.sandbox.client import Sandbox

    sandbox = Sandbox(config)
    try:
        async with sandbox:
            holds.start_seconds[n] = time.perf_counter() - t0
            holds.running[n] = sandbox
            holds.note()
            await holds.release.wait()
    except Exception as exc:  # every failed start is counted and reported
        holds.errors[n] = f"{type(exc).__name__}: {exc}"
        holds.note()
        await sandbox.stop()  # whatever the failed start left (never raises)


async def _progress(
    holds: _Holds, t0: float, say: Callable[[str], None], every: float = 2.0
) -> None:
    last = None
    while True:
        await asyncio.sleep(every)
        now = (len(holds.running), len(holds.errors))
        if now != last:
            failed = f", {now[1]} failed" if now[1] else ""
            say(f"started {now[0]}/{holds.count}{failed} after {time.perf_counter() - t0:.1f}s")
            last = now


async def _restart_admin(
    admin: BenchAdmin, engine: Any, running: list[Any], prefix: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """Stop the admin gracefully and start it again while ``running`` are held; then count its
    sandboxes of this point that are still running, and run a command in a sample of them."""
    from rock_core.actions import Command

    say(
        f"admin restart: SIGTERM with {len(running)} sandboxes held, then a new admin on the same state"
    )
    stopped, started = await admin.restart()
    listed = await engine.list_sandboxes()
    alive = sum(
        1 for s in listed if s.sandbox_id and s.sandbox_id.startswith(prefix) and s.is_alive
    )
    sample = running[:: max(1, len(running) // 20)][:20]
    ok = 0
    for sandbox in sample:
        with contextlib.suppress(Exception):
            answer = await sandbox.execute(Command(command=["echo", "x"], timeout=60))
            ok += answer.exit_code == 0 and answer.stdout.strip() == "x"
    say(
        f"admin restart: stopped in {stopped:.1f}s, answering after {started:.1f}s; {alive}/{len(running)} running, "
        f"commands answered in {ok}/{len(sample)}"
    )
    return {
        "admin_stop_seconds": round(stopped, 3),
        "admin_start_seconds": round(started, 3),
        "running_after_admin_restart": alive,
        "lost_in_admin_restart": len(running) - alive,
        "commands_ok_after_admin_restart": f"{ok}/{len(sample)}",
    }


async def _point(
    settings: ScaleSettings, count: int, admin: BenchAdmin | None, say: Callable[[str], None]
) -> dict[str, Any]:
    url = admin.url if admin is not None else None
    engine_pid = admin.pid if admin is not None else os.getpid()
    from rock.sdk._drivers import close_embedded_driver, get_embedded_driver, get_remote_driver
    from rock_core.actions import Command

    figures: dict[str, Any] = {"count": count, "mode": "remote" if url else "embedded"}
    floor_before: dict[str, Any] | None = None
    if settings.docker_floor:
        _note_load(figures, "before_floor")
        floor_before = await asyncio.to_thread(
            docker_floor, settings, count, say, "before", engine_pid
        )
    if url is None:
        t = time.perf_counter()
        await asyncio.to_thread(get_embedded_driver().start)
        figures["engine_start_seconds"] = round(time.perf_counter() - t, 3)
    engine = get_remote_driver(url) if url else get_embedded_driver()
    prefix = f"scale-{uuid.uuid4().hex[:8]}-{count}-"
    figures["containers_filter"] = f"label=rock.sandbox_id name=^{prefix}"
    rss_before = rss_bytes(engine_pid)
    mem_before = proc_kib_bytes("/proc/meminfo", "MemAvailable")
    cpu_before = cpu_seconds(engine_pid)
    client_cpu_before = cpu_seconds(os.getpid())
    _note_load(figures, "before_starts")

    # 1. Start all at once.
    say(f"starting {count} sandboxes ({settings.image}, {settings.memory}, {settings.cpus:g} cpus)")
    holds = _Holds(count)
    split = measured(engine_pid, lambda: len(holds.start_seconds), embedded=url is None)
    machine_before, steal_before = machine_busy_seconds(), machine_steal_seconds()
    t0 = time.perf_counter()
    tasks = [
        asyncio.create_task(_hold(n, settings.sandbox_config(f"{prefix}{n:04d}", url), holds, t0))
        for n in range(count)
    ]
    reporter = asyncio.create_task(_progress(holds, t0, say))
    teardown_started: float | None = None
    procs_files: list[str] = []
    try:
        await holds.settled.wait()
        machine_cpu = _delta(machine_busy_seconds(), machine_before)
        stolen = steal_percent(steal_before, machine_steal_seconds(), time.perf_counter() - t0)
        figures.update(flat("cpu_ms_per_start_", cpu_split := split()))
        reporter.cancel()
        say(f"CPU per start (ms): {split_line(cpu_split)}")
        _note_load(figures, "after_starts")
        starts = sorted(holds.start_seconds.values())
        running = list(holds.running.values())
        say(
            f"started {len(running)}/{count}"
            + (f", {len(holds.errors)} failed" if holds.errors else "")
            + f" in {starts[-1] if starts else 0:.1f}s"
        )
        figures.update(
            {
                "running": len(running),
                "failed_starts": len(holds.errors),
                "start_errors": sorted(set(holds.errors.values()))[:5],
                "time_to_all_running_seconds": round(starts[-1], 3)
                if starts and not holds.errors
                else None,
                "time_to_first_running_seconds": round(starts[0], 3) if starts else None,
                "start_rate_per_second": round(len(starts) / starts[-1], 2) if starts else None,
                "start_p50_seconds": round(percentile(starts, 50) or 0, 3) if starts else None,
                "engine_cpu_seconds_during_starts": _delta(cpu_seconds(engine_pid), cpu_before),
                "client_cpu_seconds_during_starts": _delta(
                    cpu_seconds(os.getpid()), client_cpu_before
                ),
            }
        )
        if starts and machine_cpu is not None:
            figures["machine_cpu_ms_per_start"] = round(1000 * machine_cpu / len(starts), 1)
        figures["host_steal_percent_starting"] = stolen
        engine_cpu = figures["engine_cpu_seconds_during_starts"]
        if starts and engine_cpu is not None:
            figures["engine_cpu_ms_per_start"] = round(1000 * engine_cpu / len(starts), 2)
        if starts and figures["client_cpu_seconds_during_starts"] is not None:
            figures["client_cpu_percent_during_starts"] = round(
                100 * figures["client_cpu_seconds_during_starts"] / starts[-1], 1
            )

        # 2. Idle: the engine's memory and CPU, the host's memory per sandbox.
        say(f"idle for {settings.idle_seconds:g}s: engine and host memory, engine CPU")
        await asyncio.sleep(2)  # the start burst's garbage and pending timers settle
        cpu_idle = cpu_seconds(engine_pid)
        t = time.perf_counter()
        await asyncio.sleep(settings.idle_seconds)
        idle_cpu = _delta(cpu_seconds(engine_pid), cpu_idle)
        rss_idle = rss_bytes(engine_pid)
        mem_idle = proc_kib_bytes("/proc/meminfo", "MemAvailable")
        figures.update(
            {
                "engine_pid": engine_pid,
                "engine_rss_before_mb": mb(rss_before),
                "engine_rss_idle_mb": mb(rss_idle),
                "engine_rss_per_sandbox_kb": (
                    round((rss_idle - rss_before) / len(running) / 1024, 1)
                    if running and rss_idle and rss_before
                    else None
                ),
                "engine_cpu_idle_percent": (
                    round(100 * idle_cpu / (time.perf_counter() - t), 2)
                    if idle_cpu is not None
                    else None
                ),
                "host_memavailable_drop_per_sandbox_mb": (
                    mb((mem_before - mem_idle) / len(running))
                    if running and mem_before and mem_idle
                    else None
                ),
            }
        )
        figures.update(
            await asyncio.to_thread(host_memory, await asyncio.to_thread(containers, prefix))
        )

        # 3. Latencies under the load of N held sandboxes (calls one after another).
        if running:
            say(f"get_status: {settings.status_calls} calls over {len(running)} sandboxes")
            took = []
            for i in range(settings.status_calls):
                t = time.perf_counter()
                await running[i % len(running)].get_status()
                took.append(time.perf_counter() - t)
            figures.update(_latency("get_status", took))
            say(
                f"commands: {settings.command_calls} × execute(echo x) over {len(running)} sandboxes"
            )
            took = []
            for i in range(settings.command_calls):
                t = time.perf_counter()
                answer = await running[i % len(running)].execute(
                    Command(command=["echo", "x"], timeout=60)
                )
                took.append(time.perf_counter() - t)
                if answer.exit_code != 0 or answer.stdout.strip() != "x":
                    raise RuntimeError(
                        f"echo x answered {answer.exit_code}: {answer.stdout!r} {answer.stderr!r}"
                    )
            figures.update(_latency("command", took))
        say(
            f"listing: {settings.list_calls} × list_sandboxes"
            + (" and 3 × `rock sandbox list`" if url else "")
        )
        took = []
        for _ in range(settings.list_calls):
            t = time.perf_counter()
            listed = await engine.list_sandboxes()
            took.append(time.perf_counter() - t)
        figures.update(_latency("list", took))
        figures["listed"] = len(listed)
        if url:
            figures["list_cli_p50_seconds"] = round(
                percentile([await list_cli_seconds(url) for _ in range(3)], 50) or 0, 3
            )
        if admin is not None and running:
            figures.update(await _restart_admin(admin, engine, running, prefix, say))

        # 4. Teardown: every `async with` left at once, then (embedded) the engine closed.
        ids = await asyncio.to_thread(containers, prefix)
        procs_files = [f for f in map(cgroup_procs_file, ids) if f is not None]
        say(
            f"teardown: leaving {count} `async with` blocks"
            + ("" if url else ", then closing the engine")
        )
        _note_load(figures, "before_teardown")
        teardown_started = time.perf_counter()
        holds.release.set()
        await asyncio.gather(*tasks)
        figures["teardown_stops_returned_seconds"] = round(
            time.perf_counter() - teardown_started, 3
        )
        if url is None:
            await asyncio.to_thread(close_embedded_driver)
            figures["teardown_engine_closed_seconds"] = round(
                time.perf_counter() - teardown_started, 3
            )
    finally:
        reporter.cancel()
        if teardown_started is None:  # failed before the teardown: still leave nothing behind
            teardown_started = time.perf_counter()
            holds.release.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            if url is None:
                await asyncio.to_thread(close_embedded_driver)
        gone, left, ended = await wait_gone(
            prefix, teardown_started, settings.gone_timeout, say, procs_files, expected=count
        )
        figures["teardown_processes_ended_seconds"] = round(ended, 3) if ended is not None else None
        figures["teardown_containers_gone_seconds"] = round(gone, 3) if left == 0 else None
        figures["leftovers"] = left
    say(
        f"N={count}: all gone after {gone:.1f}s"
        if left == 0
        else f"N={count}: {left} CONTAINERS LEFT after {gone:.0f}s"
    )
    _note_load(figures, "after_teardown")
    if floor_before is not None:
        await _floor_after(settings, count, figures, floor_before, left, say)
    return figures


async def _floor_after(
    settings: ScaleSettings,
    count: int,
    figures: dict[str, Any],
    before: dict[str, Any],
    left: int,
    say: Callable[[str], None],
) -> None:
    """The second floor run (after rock's teardown), the floors' mean and spread, and rock's
    start rate against them; no second run when rock's containers are not all gone (Docker
    would not be measured as before, or does not answer at all)."""
    after = None
    if left == 0:
        after = await asyncio.to_thread(
            docker_floor, settings, count, say, "after", figures.get("engine_pid")
        )
        _note_load(figures, "after_floor")
    else:
        say(f"docker floor (after): skipped, {left} of rock's containers are left")
    figures.update(floor_figures(before, after, say))
    figures.update(floor_ratios(figures.get("start_rate_per_second"), figures))


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 3)


async def run_scale(
    settings: ScaleSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run every point of ``settings``; return the document (``points``, ``settings``, ``machine``)."""
    points: list[dict[str, Any]] = []
    document: dict[str, Any] = {
        "points": points,
        "memory_method": MEMORY_METHOD,
        **({"floor_method": FLOOR_METHOD} if settings.docker_floor else {}),
        "settings": {**attrs.asdict(settings), "counts": list(settings.counts)},
        "machine": machine_info(),
    }
    async with contextlib.AsyncExitStack() as stack:
        admin = None
        if settings.remote:
            say("starting a rock admin server")
            admin = await stack.enter_async_context(running_admin())
            document["admin_url"] = admin.url
        for count in settings.counts:
            points.append(await _point(settings, count, admin, say))
    return document


# Figures of the table, in order: (key, label).
TABLE = (
    ("running", "sandboxes running"),
    ("failed_starts", "failed starts"),
    ("time_to_all_running_seconds", "time to all running (s)"),
    ("start_rate_per_second", "start rate (/s)"),
    ("start_p50_seconds", "start p50 (s)"),
    ("engine_cpu_seconds_during_starts", "engine CPU during starts (s)"),
    ("engine_cpu_ms_per_start", "engine CPU per start (ms)"),
    ("machine_cpu_ms_per_start", "machine CPU per start (ms)"),
    ("host_steal_percent_starting", "cores' time stolen by the hypervisor during starts (%)"),
    ("client_cpu_seconds_during_starts", "trainer process CPU during starts (s)"),
    ("client_cpu_percent_during_starts", "trainer process CPU during starts (% of a core)"),
    ("get_status_p50_ms", "get_status p50 (ms)"),
    ("get_status_p99_ms", "get_status p99 (ms)"),
    ("command_p50_ms", "command p50 (ms)"),
    ("command_p99_ms", "command p99 (ms)"),
    ("list_p50_ms", "list p50 (ms)"),
    ("list_p99_ms", "list p99 (ms)"),
    ("list_cli_p50_seconds", "rock sandbox list (s)"),
    ("engine_rss_idle_mb", "engine RSS idle (MB)"),
    ("engine_rss_per_sandbox_kb", "engine RSS per sandbox (KB)"),
    ("engine_cpu_idle_percent", "engine CPU idle (% of a core)"),
    ("host_memavailable_drop_per_sandbox_mb", "host MemAvailable drop / sandbox (MB)"),
    ("container_working_set_per_sandbox_mb", "container working set / sandbox (MB)"),
    ("container_memory_per_sandbox_mb", "container cgroup usage / sandbox (MB)"),
    ("proxy_shim_rss_per_sandbox_mb", "docker-proxy + shim RSS / sandbox (MB)"),
    ("proxy_shim_pss_per_sandbox_mb", "docker-proxy + shim PSS / sandbox (MB)"),
    ("host_memory_per_sandbox_mb", "host memory / sandbox: cgroup + PSS (MB)"),
    ("teardown_stops_returned_seconds", "teardown: stops returned (s)"),
    ("teardown_processes_ended_seconds", "teardown: no sandbox program left (s)"),
    ("teardown_engine_closed_seconds", "teardown: engine closed (s)"),
    ("teardown_containers_gone_seconds", "teardown: containers gone (s)"),
    ("leftovers", "leftovers"),
    ("admin_stop_seconds", "admin restart: graceful stop (s)"),
    ("admin_start_seconds", "admin restart: answering after (s)"),
    ("lost_in_admin_restart", "admin restart: sandboxes lost"),
    ("commands_ok_after_admin_restart", "admin restart: commands answered"),
    ("floor_before_start_rate_per_second", "docker floor before: start rate (/s)"),
    ("floor_after_start_rate_per_second", "docker floor after: start rate (/s)"),
    ("floor_start_rate_per_second", "docker floor: start rate, mean (/s)"),
    ("floor_start_rate_spread", "docker floor: spread (max-min)/mean"),
    ("floor_removal_seconds", "docker floor: removal, mean (s)"),
    ("floor_machine_cpu_ms_per_start", "docker floor: machine CPU per start, mean (ms)"),
    ("floor_before_host_steal_percent", "docker floor before: stolen by the hypervisor (%)"),
    ("floor_after_host_steal_percent", "docker floor after: stolen by the hypervisor (%)"),
    ("machine_cpu_per_start_to_floor", "machine CPU per start / docker floor"),
    ("own_cpu_per_start_to_floor", "machine CPU per start / docker floor, other work left out"),
    ("start_rate_to_floor", "start rate / docker floor (mean)"),
    ("start_rate_to_floor_range", "start rate / docker floor (range)"),
    *CPU_SPLIT_ROWS,
    *(
        (f"host_load_1m_{phase}", f"host load 1m: {phase.replace('_', ' ')}")
        for phase in LOAD_PHASES
    ),
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " to ".join(map(_cell, value))
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def table_rows(points: list[dict[str, Any]]) -> list[list[str]]:
    """One row per figure of :data:`TABLE` that any point has: its label, then its value at each N."""
    rows = []
    for key, label in TABLE:
        if any(p.get(key) is not None for p in points):
            rows.append([label, *(_cell(p.get(key)) for p in points)])
    return rows


def parse_curve(text: str) -> tuple[int, ...]:
    """``"100,250,500"`` → ``(100, 250, 500)``.

    :raises ValueError: not a comma-separated list of integers >= 1.
    """
    if not re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text) or any(
        int(v) < 1 for v in text.split(",")
    ):
        raise ValueError(f"expected comma-separated counts >= 1 (like 100,250,500), got {text!r}")
    return tuple(int(v) for v in text.split(","))
