"""``rock bench ha``: two admins of one cluster on one PostgreSQL database, on this machine: how
long a failover takes, how many client calls fail through it, and what a second admin adds to
``get_status`` throughput.

The set-up (all undone at the end, also after Ctrl-C or SIGTERM):

* a PostgreSQL server (:mod:`rock.bench._postgres`: ``--postgres-url``, else the checkout's
  ``scripts/ensure-postgres.sh``) and a database made for the run, dropped after it;
* two ``rock admin serve`` processes on free ports of 127.0.0.1, each with its own state folder
  under one temporary folder, both with ``[engine] store`` on that database and
  ``[engine] cluster`` set (named after the database: this run's alone); the bench waits
  until exactly one says ``"leader": true`` on ``GET /healthz``;
* one sandbox (``--image``), started through rock's SDK with both URLs (as
  ``ROCK_BASE_URL=http://a,http://b``).

The figures:

* **get_status throughput, one admin against two**: ``--load-processes`` processes, each with
  ``--load-callers`` callers on one event loop sending ``get_status`` through the SDK one after
  another for ``--load-seconds``: first all of them with the leader's URL only, then half with
  ``a,b`` and half with ``b,a`` (the SDK sends to the first URL that answers); ``--load-rounds``
  rounds of the two, taken in turn. The median calls/s of each and their ratio, and with each
  run the CPU share (of one core) each admin used. Both admins, the clients and the bench share
  this machine's cores: where the clients and admins fill them, a second admin adds no calls/s.
* **failover**: ``--kills`` times, the leader is killed with SIGKILL and the time until the other
  answers ``/healthz`` with ``"leader": true`` is measured; the killed admin is then started again
  (same port, same state folder: a follower now) and the next kill comes a second after it
  answers. p50 and max. (The lease lasts 3 s and followers try every second:
  ``rock_core.engine.leadership``.)
* **client calls through the failovers**: from before the first kill to after the last restart,
  ``--clients`` threads, each with its own event loop, call ``get_status`` on the sandbox through
  the SDK with both URLs, a call every 10 ms; calls made, calls that raised (and the first few
  errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx

from rock.bench._host import cpu_seconds
from rock.bench._postgres import fresh_database, postgres_server
from rock.bench.admin import BenchAdmin, _rock_command
from rock.bench.rollout import percentile
from rock_core.ports import listen_port

__all__ = ["HaBenchSettings", "rows", "run_ha_bench"]

#: Seconds between two calls of one client thread during the kills.
CLIENT_INTERVAL = 0.01
#: Seconds between two ``/healthz`` reads while waiting for a leader.
POLL = 0.02


@attrs.frozen(kw_only=True)
class HaBenchSettings:
    """What ``rock bench ha`` runs (see the module docstring).

    :param kills: failovers measured (each a SIGKILL of the leader).
    :param clients: SDK client threads calling ``get_status`` through the kills.
    :param load_processes: / :param load_callers: the throughput load: processes, and callers
        in each.
    :param load_seconds: how long each throughput run sends.
    :param load_rounds: rounds of the two throughput runs (the figures: the median of each).
    :param image: the sandbox's image (present locally).
    :param postgres_url: a PostgreSQL server whose user may make databases (``None``: the
        checkout's ``scripts/ensure-postgres.sh``).
    :param timeout: seconds to wait for a leader, an admin's start or the sandbox's.
    """

    kills: int = 10
    clients: int = 4
    load_processes: int = 4
    load_callers: int = 4
    load_seconds: float = 5.0
    load_rounds: int = 3
    image: str = "python:3.11"
    memory: str = "256m"
    cpus: float = 0.5
    postgres_url: str | None = None
    timeout: float = 60.0


# -- the admins ---------------------------------------------------------------------------------


def _admins(folder: Path, database: str) -> list[BenchAdmin]:
    # A cluster's admins own its sandboxes as cluster:<name>: a name of this run's own, so that
    # its leader never takes another run's sandboxes on the same Docker engine for its orphans.
    cluster = urllib.parse.urlsplit(database).path.lstrip("/")
    admins = []
    for name in ("a", "b"):
        state = folder / name
        state.mkdir()
        config = state / "admin.toml"
        config.write_text(
            f'[engine]\nstore = "{database}"\ncluster = "{cluster}"\n',
            encoding="utf-8",
        )
        env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state)}
        env.pop("ROCK_BASE_URL", None)
        command = [*_rock_command(), "admin", "serve", "--config", str(config)]
        admins.append(BenchAdmin(state, listen_port(), env, command))
    return admins


async def _health(http: httpx.AsyncClient, admin: BenchAdmin) -> dict[str, Any] | None:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        response = await http.get(admin.url + "/healthz")
        if response.status_code == 200:
            body = response.json()
            if "leader" not in body:
                raise RuntimeError(
                    f"the admin at {admin.url} does not say on /healthz whether it leads "
                    "(a rock from before the field)"
                )
            return dict(body)
    return None


async def _one_leader(
    http: httpx.AsyncClient, admins: Sequence[BenchAdmin], timeout: float
) -> BenchAdmin:
    """The admin that says it leads, once exactly one does."""
    deadline = time.monotonic() + timeout
    while True:
        leaders = [a for a in admins if ((await _health(http, a)) or {}).get("leader")]
        if len(leaders) == 1:
            return leaders[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(leaders)} admins said they lead after {timeout:.0f} s")
        await asyncio.sleep(POLL)


def _kill9(admin: BenchAdmin) -> None:
    process, admin.process = admin.process, None
    if process is not None:
        process.kill()
        process.wait()


async def _failovers(
    http: httpx.AsyncClient,
    admins: Sequence[BenchAdmin],
    settings: HaBenchSettings,
    say: Callable[[str], None],
) -> list[float]:
    seconds = []
    for n in range(1, settings.kills + 1):
        leader = await _one_leader(http, admins, settings.timeout)
        other = admins[1] if leader is admins[0] else admins[0]
        began = time.perf_counter()
        _kill9(leader)
        deadline = time.monotonic() + settings.timeout
        while not ((await _health(http, other)) or {}).get("leader"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no admin led {settings.timeout:.0f} s after kill -9")
            await asyncio.sleep(POLL)
        seconds.append(time.perf_counter() - began)
        say(f"kill {n}/{settings.kills}: {other.url} leads after {seconds[-1]:.2f} s")
        await leader.start()  # the killed one again, same port and state: a follower
        await asyncio.sleep(1.0)
    return seconds


# -- the clients --------------------------------------------------------------------------------


class _Tally:
    """Calls made and failed by client threads, with the first few errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = self.failed = 0
        self.errors: list[str] = []

    def add(self, error: BaseException | None) -> None:
        with self.lock:
            self.calls += 1
            if error is not None:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(f"{type(error).__name__}: {error}"[:300])


def _handle(urls: list[str]) -> Any:
    """An SDK handle on no sandbox yet, with the admins' URLs (as ``ROCK_BASE_URL=a,b``)."""
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    return Sandbox(SandboxConfig(base_url=urls))


async def _calls(sandbox: Any, until: Callable[[], bool], tally: _Tally, interval: float) -> None:
    """``get_status`` through ``sandbox`` one call after another until ``until()``."""
    while not until():
        try:
            await sandbox.get_status()
        except Exception as exc:  # a call that raised is what is counted
            tally.add(exc)
        else:
            tally.add(None)
        if interval:
            await asyncio.sleep(interval)


@contextlib.contextmanager
def _client_threads(urls: list[str], sandbox_id: str, count: int) -> Any:
    """``count`` threads calling ``get_status`` until the block ends; yields their tally."""
    tally, stop = _Tally(), threading.Event()

    async def calls() -> None:
        sandbox = _handle(urls)
        await sandbox.attach(sandbox_id)
        await _calls(sandbox, stop.is_set, tally, CLIENT_INTERVAL)

    def run() -> None:
        try:
            asyncio.run(calls())
        except Exception as exc:  # attach failed: counted, the thread ends
            tally.add(exc)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield tally
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def _load_process(
    urls: list[str],
    sandbox_id: str,
    callers: int,
    seconds: float,
    ready: multiprocessing.synchronize.Barrier,
    results: Any,
) -> None:
    """One load process (spawned): ``callers`` SDK callers for ``seconds`` after the barrier."""

    async def main() -> tuple[int, int, float, list[str]]:
        sandbox = _handle(urls)
        await sandbox.attach(sandbox_id)
        await sandbox.get_status()  # the connection made before the clock starts
        await asyncio.to_thread(ready.wait)
        tally, began = _Tally(), time.monotonic()
        end = began + seconds
        await asyncio.gather(
            *(_calls(sandbox, lambda: time.monotonic() >= end, tally, 0.0) for _ in range(callers))
        )
        return tally.calls, tally.failed, time.monotonic() - began, tally.errors

    try:
        results.put(asyncio.run(main()))
    except BaseException as exc:
        results.put((0, 0, 0.0, [f"{type(exc).__name__}: {exc}"[:300]]))
        ready.abort()


async def _throughput(
    url_lists: list[list[str]], sandbox_id: str, settings: HaBenchSettings, admin_pids: list[int]
) -> dict[str, Any]:
    """get_status calls/s of one load process per item of ``url_lists``, and the CPU share (of
    one core) each admin used meanwhile."""
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    ready = context.Barrier(len(url_lists) + 1)
    results = context.Queue()
    processes = [
        context.Process(
            target=_load_process,
            args=(urls, sandbox_id, settings.load_callers, settings.load_seconds, ready, results),
            daemon=True,
        )
        for urls in url_lists
    ]
    for process in processes:
        process.start()
    got: list[tuple[int, int, float, list[str]]] = []
    try:
        with contextlib.suppress(threading.BrokenBarrierError):
            await asyncio.to_thread(ready.wait, settings.timeout)
        began, cpu = time.monotonic(), [cpu_seconds(pid) or 0.0 for pid in admin_pids]
        deadline = time.monotonic() + settings.timeout + settings.load_seconds
        while len(got) < len(processes):
            try:
                got.append(results.get_nowait())
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError("the load processes did not answer") from None
                await asyncio.sleep(0.05)
        wall = time.monotonic() - began
        cpu = [(cpu_seconds(pid) or 0.0) - used for pid, used in zip(admin_pids, cpu)]
    finally:
        ready.abort()  # a thread still waiting at the barrier (after Ctrl-C) goes at once
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(10)
    calls = sum(g[0] for g in got)
    failed = sum(g[1] for g in got)
    elapsed = max(g[2] for g in got)
    errors = [e for g in got for e in g[3]][:5]
    if not calls or not elapsed:
        raise RuntimeError(f"the load processes made no call: {errors}")
    return {
        "calls": calls,
        "failed": failed,
        "seconds": round(elapsed, 2),
        "calls_per_s": round((calls - failed) / elapsed, 1),
        "admin_cpu_share": [round(used / wall, 2) for used in cpu],
        "errors": errors,
    }


# -- the sandbox --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _sandbox(
    urls: list[str], settings: HaBenchSettings, say: Callable[[str], None]
) -> AsyncIterator[str]:
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    sandbox = Sandbox(
        SandboxConfig(
            image=settings.image,
            memory=settings.memory,
            cpus=settings.cpus,
            base_url=urls,
            startup_timeout=settings.timeout,
            auto_clear_seconds=24 * 3600,  # reads are no activity: the run must not idle it away
        )
    )
    try:
        await sandbox.start()
        say(f"sandbox {sandbox.sandbox_id} running ({settings.image})")
        yield str(sandbox.sandbox_id)
    finally:
        if sandbox.sandbox_id:
            with contextlib.suppress(Exception):
                await sandbox.stop()
            await asyncio.to_thread(_container_gone, str(sandbox.sandbox_id))


def _container_gone(sandbox_id: str, wait: float = 30.0) -> None:
    """Wait for the sandbox's container to go; remove it after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            found = subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.split()
        except (OSError, subprocess.SubprocessError):
            return
        if not found:
            return
        if time.monotonic() > deadline:
            subprocess.run(["docker", "rm", "-f", *found], capture_output=True, timeout=120)
            return
        time.sleep(0.2)


# -- the run ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _cluster(
    database: str, settings: HaBenchSettings, say: Callable[[str], None]
) -> AsyncIterator[list[BenchAdmin]]:
    folder = Path(tempfile.mkdtemp(prefix="rock-bench-ha-"))
    admins = _admins(folder, database)
    try:
        for admin in admins:
            await admin.start()
            say(f"admin {admin.url} up (pid {admin.pid}, state {admin.state_dir})")
        yield admins
    finally:
        for admin in admins:
            await admin.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def _load_rounds(
    admins: list[BenchAdmin],
    leader: BenchAdmin,
    sandbox_id: str,
    settings: HaBenchSettings,
    say: Callable[[str], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--load-rounds`` rounds, each the load on the leader alone, then spread over both (taken
    in turn, so that what else runs on the machine weighs on both alike)."""
    a, b = (admin.url for admin in admins)
    pids = [admin.pid for admin in admins]
    one: list[dict[str, Any]] = []
    both: list[dict[str, Any]] = []
    for n in range(1, settings.load_rounds + 1):
        urls = [[leader.url]] * settings.load_processes
        one.append(await _throughput(urls, sandbox_id, settings, pids))
        spread = [[a, b] if i % 2 == 0 else [b, a] for i in range(settings.load_processes)]
        both.append(await _throughput(spread, sandbox_id, settings, pids))
        say(
            f"load round {n}/{settings.load_rounds}: {one[-1]['calls_per_s']} get_status/s "
            f"through the leader alone, {both[-1]['calls_per_s']} spread over both"
        )
    return one, both


async def run_ha_bench(
    settings: HaBenchSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Set up, measure and clean up (see the module docstring); the figures."""
    server = postgres_server(settings.postgres_url, say)
    async with (
        fresh_database(server, say) as database,
        _cluster(database, settings, say) as admins,
        httpx.AsyncClient(timeout=1) as http,
    ):
        leader = await _one_leader(http, admins, settings.timeout)
        say(f"{leader.url} leads the cluster")
        a, b = (admin.url for admin in admins)
        async with _sandbox([a, b], settings, say) as sandbox_id:
            one, both = await _load_rounds(admins, leader, sandbox_id, settings, say)
            say(f"now {settings.kills} kill(s) of the leader")
            with _client_threads([a, b], sandbox_id, settings.clients) as tally:
                failovers = await _failovers(http, admins, settings, say)
    figures = _figures(settings, failovers, tally, one, both)
    # What the run made and removed, for a check that nothing is left.
    figures["made"] = {
        "database": urllib.parse.urlsplit(database).path.lstrip("/"),
        "state_folder": str(admins[0].state_dir.parent),
        "sandbox_id": sandbox_id,
    }
    return figures


def _figures(
    settings: HaBenchSettings,
    failovers: list[float],
    tally: _Tally,
    one: list[dict[str, Any]],
    both: list[dict[str, Any]],
) -> dict[str, Any]:
    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    def median_rate(runs: list[dict[str, Any]]) -> float:
        return round(percentile([run["calls_per_s"] for run in runs], 50) or 0.0, 1)

    one_rate, two_rate = median_rate(one), median_rate(both)

    return {
        "kills": len(failovers),
        "failover_seconds": [round(s, 3) for s in failovers],
        "failover_p50_s": rounded(percentile(failovers, 50)),
        "failover_max_s": rounded(max(failovers, default=None)),
        "client_threads": settings.clients,
        "calls_during_failovers": tally.calls,
        "failed_calls_during_failovers": tally.failed,
        "failed_call_errors": tally.errors,
        "get_status_per_s_one_admin": one_rate,
        "get_status_per_s_two_admins": two_rate,
        "two_to_one_admin_ratio": round(two_rate / one_rate, 2) if one_rate else None,
        "load": {"one_admin": one, "two_admins": both},
        "settings": {
            **attrs.asdict(settings),
            "postgres_url": "given" if settings.postgres_url else "scripts/ensure-postgres.sh",
            "client_interval_s": CLIENT_INTERVAL,
        },
        "cpus": os.cpu_count(),
    }


def rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures as (name, value) rows for the table."""
    return [
        ("failover p50 / max (s)", f"{figures['failover_p50_s']} / {figures['failover_max_s']}"),
        ("kills", str(figures["kills"])),
        (
            f"client calls during failovers ({figures['client_threads']} threads)",
            f"{figures['calls_during_failovers']} made, "
            f"{figures['failed_calls_during_failovers']} failed",
        ),
        (
            "get_status calls/s, one admin (median)",
            str(figures["get_status_per_s_one_admin"]),
        ),
        (
            "get_status calls/s, two admins (median)",
            str(figures["get_status_per_s_two_admins"]),
        ),
        ("two admins / one", str(figures["two_to_one_admin_ratio"])),
        (
            "admins' CPU in cores, one / two admins (median)",
            " / ".join(
                str(round(percentile([sum(r["admin_cpu_share"]) for r in runs], 50) or 0.0, 2))
                for runs in (figures["load"]["one_admin"], figures["load"]["two_admins"])
            ),
        ),
    ]
