"""Measure the rocklet: start-up to listening, resident memory, session echo round trip.

Not a test (nothing is asserted): run it and read the figures::

    uv run python packages/rock-core/tests/rocklet/bench_rocklet.py

Start-up is timed from ``Popen`` to the first accepted TCP connection; RSS is read from
``/proc/<pid>/status`` half a second after start (the endpoint modules are imported by then);
the round trip is ``POST /run_in_session {"command": "echo hi"}`` over one keep-alive httpx
connection, 200 calls after 20 warm-up calls.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rock_core.rocklet import build_zipapp

SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv + ["--host", "127.0.0.1", "--port", str(port), "--no-auth"],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.0005)
    return proc, port, time.perf_counter() - t0


def rss_kib(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure(label: str, argv: list[str], env: dict[str, str]) -> None:
    startups = []
    for _ in range(7):
        proc, _, took = start(argv, env)
        startups.append(took)
        proc.terminate()
        proc.wait()
    proc, port, _ = start(argv, env)
    try:
        time.sleep(0.5)
        rss = rss_kib(proc.pid)
        with httpx.Client(base_url="http://127.0.0.1:%d" % port) as client:
            client.post("/create_session", json={"session": "bench"}).raise_for_status()
            body = {"session": "bench", "command": "echo hi"}
            for _ in range(20):
                client.post("/run_in_session", json=body)
            times = []
            for _ in range(200):
                t0 = time.perf_counter()
                response = client.post("/run_in_session", json=body)
                times.append(time.perf_counter() - t0)
                assert response.json()["output"] == "hi"
        times.sort()
        print(
            "%-8s start-up to listening: median %.1f ms (min %.1f)   RSS after start: %.1f MiB   "
            "echo round trip: p50 %.2f ms, p90 %.2f ms, mean %.2f ms"
            % (
                label,
                statistics.median(startups) * 1000,
                min(startups) * 1000,
                rss / 1024,
                times[len(times) // 2] * 1000,
                times[int(len(times) * 0.9)] * 1000,
                statistics.mean(times) * 1000,
            )
        )
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        pyz = build_zipapp(Path(tmp), cache_dir=Path(tmp) / "cache")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        measure("pyz", [python, str(pyz)], clean)
        measure("pyz -S", [python, "-I", "-S", str(pyz)], clean)
        measure(
            "source",
            [sys.executable, "-m", "rock_core.rocklet"],
            dict(os.environ, PYTHONPATH=str(SRC)),
        )


if __name__ == "__main__":
    main()
