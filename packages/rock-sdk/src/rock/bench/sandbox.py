"""``rock bench sandbox``: single-sandbox figures when nothing else competes.

* create → ready: wall time of ``Sandbox.start()`` for sandboxes started one after another;
* ``echo`` round trip: ``arun("echo ...")`` in an open session, many times;
* rocklet memory: resident set of the in-sandbox agent, read from ``/proc`` inside the sandbox;
* engine memory: peak resident set of this process (the embedded engine runs in it).
"""

from __future__ import annotations

import resource
import time
from typing import Any

from rock.bench.rollout import percentile

__all__ = ["run_sandbox_bench"]

# Sums VmRSS of the rocklet's processes (the command line names rocklet.pyz).
_ROCKLET_RSS = r"""
import os
total = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue  # this script's own command line names the rocklet too
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        if b"rocklet" not in cmd:
            continue
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    except OSError:
        pass
print(total)
"""


def _ms(values: list[float], q: float) -> float | None:
    p = percentile(values, q)
    return None if p is None else round(p * 1000, 3)


async def run_sandbox_bench(
    *, starts: int, echoes: int, image: str, memory: str, cpus: float
) -> dict[str, Any]:
    """Measure and return the figures (seconds and bytes, and milliseconds where named so)."""
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig
    from rock_core.actions import Command, CreateBashSessionRequest

    def config() -> SandboxConfig:
        return SandboxConfig(image=image, memory=memory, cpus=cpus, experiment_id="bench")

    ready: list[float] = []
    for _ in range(starts):
        sandbox = Sandbox(config())
        t = time.perf_counter()
        await sandbox.start()
        ready.append(time.perf_counter() - t)
        await sandbox.stop()

    sandbox = Sandbox(config())
    await sandbox.start()
    try:
        await sandbox.create_session(CreateBashSessionRequest(session="bench"))
        for _ in range(20):  # warm the connection and the shell
            await sandbox.arun("echo warm", session="bench")
        rtt: list[float] = []
        for i in range(echoes):
            t = time.perf_counter()
            obs = await sandbox.arun(f"echo {i}", session="bench")
            rtt.append(time.perf_counter() - t)
            if obs.output.strip() != str(i):
                raise RuntimeError(f"echo {i} answered {obs.output!r}")
        rss = await sandbox.execute(Command(command=["python3", "-c", _ROCKLET_RSS]))
        rocklet_rss = int(rss.stdout.strip() or 0)
    finally:
        await sandbox.stop()
    return {
        "create_to_ready_p50_seconds": round(percentile(ready, 50) or 0, 4),
        "create_to_ready_p95_seconds": round(percentile(ready, 95) or 0, 4),
        "create_to_ready_max_seconds": round(max(ready), 4) if ready else None,
        "echo_round_trip_p50_ms": _ms(rtt, 50),
        "echo_round_trip_p95_ms": _ms(rtt, 95),
        "rocklet_rss_mb": round(rocklet_rss / 2**20, 1),
        "engine_process_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        ),
        "starts": starts,
        "echoes": echoes,
    }
