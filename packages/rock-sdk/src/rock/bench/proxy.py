"""``rock bench proxy``: what the admin's proxy costs over reaching the sandbox's port directly.

An admin is started for the run (``rock admin serve`` on a free port; ``--base-url`` with
``--admin-pid`` measures a running one) and two small sandboxes on it: one runs
:mod:`rock.bench.sandbox_services`' HTTP/1.1 server on 8080, the other its WebSocket echo
server on 8080. "Direct" is the sandbox's published 8080 (``port_mapping``, the engine's own
forward through the rocklet); "proxy" is the admin's ``/sandboxes/{id}/proxy``. Figures:

* ``http_round_trip``: sequential GETs on one keep-alive connection each way, interleaved (one
  direct, one through the proxy: both see the same load), p50/p99 and what the proxy adds at p50
  (goal: at most 1 ms);
* ``download``: 1 GiB streamed through the proxy (and directly), MB/s (goal: at least 300), with
  the admin's resident memory before and its peak during (goal: at most 20 MB of growth);
* ``websocket_echo``: 64-byte message round trips, p50/p99 direct and through the proxy, and what
  the proxy adds at p50 (goal: at most 1 ms).

Printed as JSON on stdout; progress on stderr. Every sandbox the bench started is stopped.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import httpx

from rock.bench import sandbox_services
from rock.bench._output import dumps
from rock.bench.admin import _RawClient, rss_bytes, started_admin

__all__ = ["ProxyBenchSettings", "dumps", "run_proxy_bench"]

PREFIX = "/apis/envs/sandbox/v1"
GOALS = {
    "http_added_p50_ms": 1.0,
    "download_mb_per_s": 300.0,
    "ws_added_p50_ms": 1.0,
    "admin_growth_mb": 20.0,
}


@attrs.frozen(kw_only=True)
class ProxyBenchSettings:
    """What ``rock bench proxy`` measures (see the module docstring)."""

    base_url: str | None = None
    admin_pid: int | None = None
    requests: int = 2000
    echoes: int = 2000
    download_mb: int = 1024
    image: str = "python:3.11"


async def _call(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    response = await http.request(method, PREFIX + path, **kw)
    envelope = response.json()
    if envelope.get("status") != "Success":
        raise RuntimeError(f"{method} {path}: {envelope.get('error')}")
    return envelope["result"]


async def _sandbox_with(http: httpx.AsyncClient, image: str, kind: str) -> tuple[str, int]:
    """Start a sandbox running the ``kind`` service on 8080; its id and published 8080."""
    started = await _call(
        http, "POST", "/start", json={"image": image, "memory": "512m", "cpus": 2}
    )
    sandbox_id = started["sandbox_id"]
    await _call(
        http,
        "POST",
        "/write_file",
        json={
            "sandbox_id": sandbox_id,
            "path": "/srv/services.py",
            "content": Path(sandbox_services.__file__).read_text(),
        },
    )
    script = (
        f"cd /srv && (nohup python3 services.py {kind} 8080 >/tmp/service.log 2>&1 &) && "
        "for i in $(seq 100); do python3 -c \"import socket;socket.create_connection(('127.0.0.1',8080),1)\" "
        "2>/dev/null && exit 0; sleep 0.1; done; exit 1"
    )
    result = await _call(
        http,
        "POST",
        "/execute",
        json={"sandbox_id": sandbox_id, "command": ["sh", "-c", script], "timeout": 60},
    )
    if result["exit_code"] != 0:
        raise RuntimeError(f"the {kind} service did not start: {result['stderr']}")
    status = await _call(http, "GET", "/get_status", params={"sandbox_id": sandbox_id})
    return sandbox_id, int(status["port_mapping"]["8080"])


def _ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


async def _round_trips(
    direct: tuple[str, str], proxied: tuple[str, str], count: int
) -> tuple[list[float], list[float]]:
    """``count`` GETs on one keep-alive connection each way, interleaved (one direct, one through
    the proxy), so that both see the same machine load."""
    clients = [await _RawClient.connect(url) for url, _ in (direct, proxied)]
    requests = [
        client.encode("GET", target) for client, (_, target) in zip(clients, (direct, proxied))
    ]
    samples: tuple[list[float], list[float]] = ([], [])
    try:
        for n in range(count + 50):  # the first 50 warm the path (the proxy's kept-alive tunnel)
            for client, request, out in zip(clients, requests, samples):
                began = time.perf_counter()
                status, _body = await client.send(request)
                if n >= 50:
                    out.append(time.perf_counter() - began)
                if b" 200 " not in status + b" ":
                    raise RuntimeError(f"GET {request[:80]!r}: {status!r}")
        return samples
    finally:
        for client in clients:
            await client.close()


async def _download(url: str, size: int, pid: int | None) -> dict[str, Any]:
    """Stream ``size`` bytes from ``url`` (a plain socket reader: the client must not be what is
    measured); MB/s and, with ``pid``, that process's memory before and at its peak."""
    parts = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80, limit=1 << 22)
    peak = before = rss_bytes(pid) if pid else None
    cpu_before = _cpu_seconds(pid) if pid else None
    received = 0
    try:
        began = time.perf_counter()
        writer.write(
            f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
            raise RuntimeError(f"download from {url}: {head[:200]!r}")
        next_look = 64 << 20
        while received < size:
            chunk = await reader.read(1 << 20)
            if not chunk:
                break
            received += len(chunk)
            if pid and received >= next_look:
                peak = max(peak or 0, rss_bytes(pid) or 0)
                next_look += 64 << 20
        seconds = time.perf_counter() - began
    finally:
        writer.close()
    if received != size:
        raise RuntimeError(f"download from {url}: {received} of {size} bytes")
    figures: dict[str, Any] = {
        "bytes": size,
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / seconds / 1e6, 1),
    }
    if pid:
        figures["admin_rss_before_mb"] = round((before or 0) / 1e6, 1)
        figures["admin_rss_peak_mb"] = round(max(peak or 0, rss_bytes(pid) or 0) / 1e6, 1)
        figures["admin_growth_mb"] = round(
            figures["admin_rss_peak_mb"] - figures["admin_rss_before_mb"], 1
        )
        cpu_after = _cpu_seconds(pid)
        if cpu_before is not None and cpu_after is not None:
            figures["admin_cpu_share"] = round(
                (cpu_after - cpu_before) / seconds, 2
            )  # 1.0: one core busy
            # What the proxy costs, whatever else the machine does meanwhile:
            figures["admin_cpu_seconds_per_gib"] = round(
                (cpu_after - cpu_before) / (size / 2**30), 2
            )
    return figures


def _cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of process ``pid`` so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def _ws_round_trips(direct: str, proxied: str, count: int) -> tuple[list[float], list[float]]:
    """``count`` echoes of 64 bytes each way, interleaved like :func:`_round_trips`."""
    from websockets.asyncio.client import connect

    message = os.urandom(64)
    samples: tuple[list[float], list[float]] = ([], [])
    async with (
        connect(direct, max_size=None, compression=None, proxy=None, ping_interval=None) as one,
        connect(proxied, max_size=None, compression=None, proxy=None, ping_interval=None) as two,
    ):
        for n in range(count + 50):
            for ws, out in ((one, samples[0]), (two, samples[1])):
                began = time.perf_counter()
                await ws.send(message)
                if await ws.recv() != message:
                    raise RuntimeError("the WebSocket echo answered something else")
                if n >= 50:
                    out.append(time.perf_counter() - began)
    return samples


async def _measure(
    settings: ProxyBenchSettings, url: str, pid: int | None, say: Callable[[str], None]
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=120, trust_env=False) as http:
        say("starting two sandboxes (an HTTP server, a WebSocket echo server)")
        web_id, web_port = await _sandbox_with(http, settings.image, "http")
        ws_id, ws_port = await _sandbox_with(http, settings.image, "ws")
        try:
            proxy = f"{url}{PREFIX}/sandboxes/{web_id}/proxy"
            direct = f"http://127.0.0.1:{web_port}"
            say(
                f"HTTP round trips: {settings.requests} direct, {settings.requests} through the proxy"
            )
            direct_rt, proxy_rt = await _round_trips(
                (direct, "/echo"),
                (url, f"{PREFIX}/sandboxes/{web_id}/proxy/echo"),
                settings.requests,
            )
            size = settings.download_mb << 20
            say(f"download: {settings.download_mb} MiB directly, then through the proxy")
            download_direct = await _download(
                f"{direct}/bytes?n={size}", size, pid
            )  # the engine forwards it, in the admin
            download_proxy = await _download(f"{proxy}/bytes?n={size}", size, pid)
            say(f"WebSocket echo: {settings.echoes} direct, {settings.echoes} through the proxy")
            ws_direct, ws_proxy = await _ws_round_trips(
                f"ws://127.0.0.1:{ws_port}/",
                f"ws://{url.split('://', 1)[1]}{PREFIX}/sandboxes/{ws_id}/proxy/",
                settings.echoes,
            )
        finally:
            for sandbox_id in (web_id, ws_id):
                await _call(http, "POST", "/stop", json={"sandbox_id": sandbox_id})
    http_added = round(_ms(proxy_rt, 0.5) - _ms(direct_rt, 0.5), 3)
    ws_added = round(_ms(ws_proxy, 0.5) - _ms(ws_direct, 0.5), 3)
    figures: dict[str, Any] = {
        "http_round_trip": {
            "requests": settings.requests,
            "direct_p50_ms": _ms(direct_rt, 0.5),
            "direct_p99_ms": _ms(direct_rt, 0.99),
            "proxy_p50_ms": _ms(proxy_rt, 0.5),
            "proxy_p99_ms": _ms(proxy_rt, 0.99),
            "proxy_mean_ms": round(statistics.fmean(proxy_rt) * 1000, 3),
            "added_p50_ms": http_added,
        },
        "download": {"direct": download_direct, "proxy": download_proxy},
        "websocket_echo": {
            "echoes": settings.echoes,
            "direct_p50_ms": _ms(ws_direct, 0.5),
            "direct_p99_ms": _ms(ws_direct, 0.99),
            "proxy_p50_ms": _ms(ws_proxy, 0.5),
            "proxy_p99_ms": _ms(ws_proxy, 0.99),
            "added_p50_ms": ws_added,
        },
    }
    met = {
        "http_added_p50_ms": http_added <= GOALS["http_added_p50_ms"],
        "download_mb_per_s": download_proxy["mb_per_s"] >= GOALS["download_mb_per_s"],
        "ws_added_p50_ms": ws_added <= GOALS["ws_added_p50_ms"],
    }
    if "admin_growth_mb" in download_proxy:
        met["admin_growth_mb"] = download_proxy["admin_growth_mb"] <= GOALS["admin_growth_mb"]
    figures["goals"] = {"targets": GOALS, "met": met}
    return figures


async def run_proxy_bench(
    settings: ProxyBenchSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run the bench (see the module docstring) and return its figures."""
    if settings.base_url:
        return await _measure(settings, settings.base_url.rstrip("/"), settings.admin_pid, say)
    async with started_admin() as (url, pid):
        return await _measure(settings, url, pid, say)
