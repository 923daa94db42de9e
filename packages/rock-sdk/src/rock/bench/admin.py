"""``rock bench admin``: figures of the admin server as remote trainers meet it.

* ``get_status`` requests/s: N clients, each one HTTP/1.1 keep-alive connection written with raw
  asyncio streams (no client library in the way), sending requests one after another for T
  seconds against one running sandbox; every answer must be a Success envelope;
* ``echo`` in a session through the admin (``/run_in_session``): p50/p95 of round trips one
  after another on one raw keep-alive connection (timed from the request written to the whole
  answer read; the request bytes are built before the clock starts);
* admin resident memory (``VmRSS`` of ``/proc/<pid>/status``): idle (just up, no sandbox), with
  one sandbox after the load, and with ``--sandboxes`` running (the measured one, 512m/1 CPU,
  and small ones, 128m/0.1 CPU by default);
* with ``--sandboxes`` running: ``get_status`` p50/p99 (calls one after another over all of
  them, one raw keep-alive connection), the whole listing (``GET /sandboxes`` page after page,
  500 a page, as the SDK reads it) p50/p99, ``rock sandbox list --json`` as a user runs it (a
  new process; p50 of 3), and the ``/metrics`` body's size, there and with one sandbox (it must
  not grow with the sandboxes).

Without ``--base-url`` an admin is started for the run (``rock admin serve`` on a free port, a
temporary state directory) and stopped at the end; with it, memory is read only if
``--admin-pid`` says which local process serves it. Every sandbox the bench started is stopped.

``--scripted`` starts that admin on a scripted in-memory runtime instead of Docker
(:mod:`rock.bench.scripted_admin`): the admin's own costs at a number of sandboxes no container
engine here could hold (1,000), every command served by one real rocklet in the admin's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx

from rock.bench.rollout import percentile
from rock_core.ports import listen_port

__all__ = [
    "AdminBenchSettings",
    "BenchAdmin",
    "list_cli_seconds",
    "proc_kib_bytes",
    "run_admin_bench",
    "running_admin",
    "rss_bytes",
    "started_admin",
]

PREFIX = "/apis/envs/sandbox/v1"


@attrs.frozen(kw_only=True)
class AdminBenchSettings:
    """What ``rock bench admin`` measures and with what.

    :param base_url: an admin to measure (``None``: start one for the run).
    :param admin_pid: the local pid of that admin, for its memory (ignored when one is started).
    :param clients: concurrent keep-alive connections sending ``get_status``.
    :param seconds: how long they send.
    :param echoes: ``echo`` round trips in one session.
    :param sandboxes: sandboxes running for the last memory figure (the measured one included).
    :param image: image of every sandbox; ``memory``/``cpus``: size of the many small ones.
    :param echo_memory: size of the sandbox measured for get_status and echo (a 0.1-CPU sandbox
        would measure its CPU throttling, not the admin).
    :param scripted: start the admin on a scripted in-memory runtime, not Docker.
    :param status_calls: ``get_status`` calls timed one by one with every sandbox running.
    :param list_calls: whole listings timed with every sandbox running.
    """

    base_url: str | None = None
    admin_pid: int | None = None
    clients: int = 16
    seconds: float = 5.0
    echoes: int = 500
    sandboxes: int = 100
    image: str = "python:3.11"
    memory: str = "128m"
    cpus: float = 0.1
    echo_memory: str = "512m"
    echo_cpus: float = 1.0
    scripted: bool = False
    status_calls: int = 500
    list_calls: int = 10


def proc_kib_bytes(path: str, key: str) -> int | None:
    """The ``key: N kB`` line of a ``/proc`` file in bytes (``None`` if it cannot be read)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of process ``pid`` in bytes (``None`` if it cannot be read)."""
    return proc_kib_bytes(f"/proc/{pid}/status", "VmRSS")


def _rock_command() -> list[str]:
    exe = shutil.which("rock", path=os.path.dirname(sys.executable)) or shutil.which("rock")
    return [exe] if exe else [sys.executable, "-m", "rock.cli"]


async def list_cli_seconds(url: str) -> float:
    """Wall seconds of ``rock sandbox list --json`` against ``url`` (a new process, as a user runs it)."""
    t = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *_rock_command(),
        "sandbox",
        "list",
        "--base-url",
        url,
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"rock sandbox list failed: {err.decode(errors='replace').strip()}")
    json.loads(out)
    return time.perf_counter() - t


class BenchAdmin:
    """A ``rock admin serve`` process of a bench: its ``url`` and ``pid``, on a free port with
    its own state directory; :meth:`restart` stops it gracefully and starts it again on the same
    port and state (its sandboxes are expected to outlive that)."""

    def __init__(self, state_dir: Path, port: int, env: dict[str, str], command: list[str]) -> None:
        self.state_dir, self.port, self.env, self.command = state_dir, port, env, command
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = state_dir / "bench-admin.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: Seconds :meth:`start` waits for ``/healthz`` (an admin takes its sandboxes back first).
        self.start_timeout = 60.0

    @property
    def pid(self) -> int:
        assert self.process is not None, "the admin is not running"
        return self.process.pid

    async def start(self) -> None:
        """Start the process and wait until it answers ``/healthz`` (at most ``start_timeout``)."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.command, "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        async with httpx.AsyncClient(timeout=1) as probe:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(self.url + "/healthz")).status_code == 200:
                        return
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the admin did not come up:\n{self.log_path.read_text(errors='replace')[-2000:]}"
                    )
                await asyncio.sleep(0.1)

    async def stop(self, timeout: float = 60) -> None:
        """SIGTERM, then wait (a kill after ``timeout`` seconds)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    async def restart(self) -> tuple[float, float]:
        """A graceful stop, then a start on the same port and state; ``(seconds the stop took,
        seconds until the new process answered)``."""
        t = time.perf_counter()
        await self.stop()
        stopped = time.perf_counter() - t
        t = time.perf_counter()
        await self.start()
        return stopped, time.perf_counter() - t


@contextlib.asynccontextmanager
async def running_admin(
    concurrent_starts: int | None = None, scripted: bool = False
) -> AsyncIterator[BenchAdmin]:
    """Run ``rock admin serve`` on a free port with a temporary state directory; yield it; stop
    it (SIGTERM) and delete the directory at the end.

    ``scripted``: run :mod:`rock.bench.scripted_admin` instead (no containers)."""
    state_dir = Path(tempfile.mkdtemp(prefix="rock-bench-admin-"))
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state_dir)}
    env.pop("ROCK_BASE_URL", None)
    if concurrent_starts:
        env["ROCK_ENGINE_MAX_CONCURRENT_STARTS"] = str(concurrent_starts)
    command = (
        [sys.executable, "-m", "rock.bench.scripted_admin"]
        if scripted
        else [*_rock_command(), "admin", "serve"]
    )
    admin = BenchAdmin(state_dir, listen_port(), env, command)
    try:
        await admin.start()
        yield admin
    finally:
        await admin.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def started_admin(
    concurrent_starts: int | None = None, scripted: bool = False
) -> AsyncIterator[tuple[str, int]]:
    """:func:`running_admin`, yielding its ``(url, pid)``."""
    async with running_admin(concurrent_starts, scripted) as admin:
        yield admin.url, admin.pid


class _RawClient:
    """One HTTP/1.1 keep-alive connection written with asyncio streams (responses must carry
    ``Content-Length``, as the admin's envelopes do): the least client time per request."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def connect(cls, url: str) -> _RawClient:
        """Open a connection to ``url``'s host and port."""
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    def encode(self, method: str, target: str, body: bytes | None = None) -> bytes:
        """The bytes of one request (JSON ``body`` if given)."""
        head = f"{method} {target} HTTP/1.1\r\nHost: {self.host}\r\n"
        if body is None:
            return (head + "\r\n").encode()
        return (
            head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def send(self, request: bytes) -> tuple[bytes, bytes]:
        """Send ``request``; return the response's status line and body."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head.split(b"\r\n", 1)[0], await self.reader.readexactly(length)

    async def close(self) -> None:
        """Close the connection."""
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _envelope_result(response: httpx.Response, what: str) -> Any:
    envelope = response.json()
    if response.status_code != 200 or envelope.get("status") != "Success":
        raise RuntimeError(f"{what} failed: HTTP {response.status_code} {envelope}")
    return envelope["result"]


async def _get_status_load(
    url: str, sandbox_id: str, clients: int, seconds: float
) -> dict[str, Any]:
    """``get_status`` requests/s over ``clients`` raw keep-alive connections for ``seconds``."""
    query = urllib.parse.urlencode({"sandbox_id": sandbox_id})
    counts = [0] * clients
    failures: list[str] = []
    stop_at = time.monotonic() + seconds

    async def client(n: int) -> None:
        raw = await _RawClient.connect(url)
        request = raw.encode("GET", f"{PREFIX}/get_status?{query}")
        try:
            while time.monotonic() < stop_at:
                status_line, body = await raw.send(request)
                if not status_line.startswith(b"HTTP/1.1 200") or b'"Success"' not in body:
                    failures.append(status_line.decode(errors="replace"))
                    return
                counts[n] += 1
        finally:
            await raw.close()

    began = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.monotonic() - began
    if failures:
        raise RuntimeError(f"get_status answered other than Success: {failures[:3]}")
    return {
        "get_status_requests_per_second": round(sum(counts) / elapsed, 1),
        "get_status_requests": sum(counts),
        "get_status_clients": clients,
        "get_status_seconds": round(elapsed, 2),
        "get_status_client": "raw asyncio streams, one HTTP/1.1 keep-alive connection per client",
    }


async def _echo_round_trips(
    http: httpx.AsyncClient, sandbox_id: str, echoes: int
) -> dict[str, Any]:
    """p50/p95 of ``echo`` through ``/run_in_session`` in one session."""
    _envelope_result(
        await http.post(
            f"{PREFIX}/create_session", json={"sandbox_id": sandbox_id, "session": "bench"}
        ),
        "create_session",
    )

    raw = await _RawClient.connect(str(http.base_url))

    async def echo(text: str) -> float:
        body = json.dumps(
            {"sandbox_id": sandbox_id, "session": "bench", "command": f"echo {text}"}
        ).encode()
        request = raw.encode("POST", f"{PREFIX}/run_in_session", body)
        t = time.perf_counter()
        status_line, answer = await raw.send(request)
        took = time.perf_counter() - t
        envelope = json.loads(answer)
        if not status_line.startswith(b"HTTP/1.1 200") or envelope.get("status") != "Success":
            raise RuntimeError(f"run_in_session failed: {status_line!r} {envelope}")
        if str(envelope["result"]["output"]).strip() != text:
            raise RuntimeError(f"echo {text} answered {envelope['result']['output']!r}")
        return took

    try:
        for _ in range(20):  # warm the connection and the shell
            await echo("warm")
        rtt = [await echo(str(i)) for i in range(echoes)]
    finally:
        await raw.close()
    return {
        "echo_p50_ms": round((percentile(rtt, 50) or 0) * 1000, 3),
        "echo_p95_ms": round((percentile(rtt, 95) or 0) * 1000, 3),
        "echoes": echoes,
        "echo_client": "raw asyncio streams, one HTTP/1.1 keep-alive connection",
    }


async def _wait_running(http: httpx.AsyncClient, sandbox_ids: list[str], timeout: float) -> None:
    waiting = set(sandbox_ids)
    deadline = time.monotonic() + timeout
    while waiting:
        for sandbox_id in sorted(waiting):
            status = _envelope_result(
                await http.get(
                    f"{PREFIX}/get_status",
                    params={"sandbox_id": sandbox_id, "include_all_states": "true"},
                ),
                "get_status",
            )
            if status["state"] == "running":
                waiting.discard(sandbox_id)
            elif status["state"] != "pending":
                raise RuntimeError(
                    f"sandbox {sandbox_id} ended {status['state']}: {status.get('reason')}"
                )
        if waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(waiting)} sandboxes not running after {timeout:g}s")
            await asyncio.sleep(1)


def _mb(value: int | None) -> float | None:
    return None if value is None else round(value / 2**20, 1)


def _ms(seconds: list[float], q: float) -> float:
    return round((percentile(seconds, q) or 0) * 1000, 2)


async def _metrics_size(http: httpx.AsyncClient) -> int:
    response = await http.get("/metrics")
    response.raise_for_status()
    return len(response.content)


async def _get_status_latency(url: str, sandbox_ids: list[str], calls: int) -> dict[str, Any]:
    """p50/p99 of ``get_status`` one after another over ``sandbox_ids`` on one raw connection."""
    raw = await _RawClient.connect(url)
    requests = [
        raw.encode(
            "GET", f"{PREFIX}/get_status?" + urllib.parse.urlencode({"sandbox_id": sandbox_id})
        )
        for sandbox_id in sandbox_ids
    ]
    took = []
    try:
        for i in range(calls):
            t = time.perf_counter()
            status_line, body = await raw.send(requests[i % len(requests)])
            took.append(time.perf_counter() - t)
            if not status_line.startswith(b"HTTP/1.1 200") or b'"Success"' not in body:
                raise RuntimeError(f"get_status answered {status_line!r}")
    finally:
        await raw.close()
    return {
        "get_status_p50_ms": _ms(took, 50),
        "get_status_p99_ms": _ms(took, 99),
        "get_status_calls": calls,
    }


async def _listing_latency(http: httpx.AsyncClient, calls: int) -> dict[str, Any]:
    """p50/p99 of the whole listing, ``GET /sandboxes`` page after page as the SDK reads it."""
    took = []
    listed = 0
    for _ in range(calls):
        t = time.perf_counter()
        listed, page = 0, 1
        while True:
            result = _envelope_result(
                await http.get(f"{PREFIX}/sandboxes", params={"page": page, "page_size": 500}),
                "list_sandboxes",
            )
            listed += len(result["items"])
            if not result["has_more"] or not result["items"]:
                break
            page += 1
        took.append(time.perf_counter() - t)
    return {
        "list_p50_ms": _ms(took, 50),
        "list_p99_ms": _ms(took, 99),
        "listed": listed,
        "list_calls": calls,
    }


async def _measure(
    settings: AdminBenchSettings, url: str, pid: int | None, say: Callable[[str], None]
) -> dict[str, Any]:
    figures: dict[str, Any] = {"admin_url": url}
    figures["admin_rss_idle_mb"] = _mb(rss_bytes(pid)) if pid else None
    sandbox = {"image": settings.image, "memory": settings.memory, "cpus": settings.cpus}
    run = f"bench-{os.getpid()}-{int(time.time())}"
    started: list[str] = []
    async with httpx.AsyncClient(
        base_url=url, timeout=600, headers={"X-Experiment-Id": run}
    ) as http:
        try:
            say("starting one sandbox")
            first = f"{run}-main"
            started.append(first)
            measured = {
                "image": settings.image,
                "memory": settings.echo_memory,
                "cpus": settings.echo_cpus,
            }
            _envelope_result(
                await http.post(f"{PREFIX}/start", json={**measured, "sandbox_id": first}), "start"
            )
            say(f"get_status: {settings.clients} clients for {settings.seconds:g}s")
            figures.update(await _get_status_load(url, first, settings.clients, settings.seconds))
            say(f"echo: {settings.echoes} round trips in a session")
            figures.update(await _echo_round_trips(http, first, settings.echoes))
            figures["admin_rss_one_sandbox_mb"] = _mb(rss_bytes(pid)) if pid else None
            figures["metrics_bytes_one_sandbox"] = await _metrics_size(http)
            if settings.sandboxes > 1:
                say(
                    f"starting {settings.sandboxes - 1} more sandboxes ({settings.memory}, {settings.cpus:g} cpus)"
                )
                more = [f"{run}-{n:03d}" for n in range(settings.sandboxes - 1)]
                for sandbox_id in more:
                    _envelope_result(
                        await http.post(
                            f"{PREFIX}/start_async", json={**sandbox, "sandbox_id": sandbox_id}
                        ),
                        "start_async",
                    )
                    started.append(sandbox_id)
                t = time.monotonic()
                await _wait_running(http, more, timeout=1200)
                figures["sandboxes_running"] = settings.sandboxes
                figures["sandboxes_start_seconds"] = round(time.monotonic() - t, 1)
                await asyncio.sleep(2)  # let the start bursts' garbage settle before reading memory
                figures[f"admin_rss_{settings.sandboxes}_sandboxes_mb"] = (
                    _mb(rss_bytes(pid)) if pid else None
                )
            say(
                f"with {len(started)} sandboxes: get_status, listing, `rock sandbox list`, /metrics"
            )
            figures.update(await _get_status_latency(url, started, settings.status_calls))
            figures.update(await _listing_latency(http, settings.list_calls))
            cli = [await list_cli_seconds(url) for _ in range(3)]
            figures["list_cli_p50_seconds"] = round(percentile(cli, 50) or 0, 3)
            figures["metrics_bytes"] = await _metrics_size(http)
        finally:
            say(f"stopping {len(started)} sandboxes")
            for sandbox_id in started:
                with contextlib.suppress(httpx.HTTPError):
                    await http.post(f"{PREFIX}/stop", json={"sandbox_id": sandbox_id})
    return figures


async def run_admin_bench(
    settings: AdminBenchSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Measure and return the figures (see the module docstring); ``say`` gets progress lines."""
    if settings.base_url:
        return await _measure(settings, settings.base_url.rstrip("/"), settings.admin_pid, say)
    say(
        "starting an admin"
        + (" on a scripted runtime (no containers)" if settings.scripted else "")
    )
    async with started_admin(scripted=settings.scripted) as (url, pid):
        figures = await _measure(settings, url, pid, say)
    figures["admin_started_by_bench"] = True
    figures["runtime"] = "scripted" if settings.scripted else "docker"
    return figures
