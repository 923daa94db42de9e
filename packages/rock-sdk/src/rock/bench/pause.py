"""``rock bench pause``: what pausing and resuming a sandbox costs, on the embedded engine.

One sandbox runs a process holding 64 MiB; each round pauses it (``SandboxManager.pause``:
``docker pause``, the cgroup freezer), resumes it, and times the first command after. The
figures are the p50 and p95 of each in milliseconds, and whether resume's p50 meets its goal
(issue #25: <= 50 ms). The process is checked to be the same after the last round (same pid).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import NonBlankStr, NonNegativeFloat, PositiveFloat, SizeStr

__all__ = ["GOAL_RESUME_P50_MS", "run_pause_bench"]

#: Issue #25's goal for resume's median.
GOAL_RESUME_P50_MS = 50.0

_HOLDER = (
    "nohup python3 -c 'import os, time; x = bytearray(64 << 20); "
    'open("/tmp/holder.pid", "w").write(str(os.getpid())); time.sleep(1e9)\' '
    ">/dev/null 2>&1 &"
)


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


async def run_pause_bench(
    *, rounds: int, image: str, memory: str, cpus: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """Pause and resume one sandbox ``rounds`` times; the figures (see the module docstring)."""
    config = EngineConfig(stats_interval=NonNegativeFloat(0), reap_orphans=False)
    async with SandboxManager(config) as engine:
        say(f"starting a sandbox of {image}")
        request = SandboxStartRequest(
            image=NonBlankStr(image), memory=SizeStr(memory), cpus=PositiveFloat(cpus)
        )
        status = await engine.start(request)
        sandbox_id = status.sandbox_id

        async def shell(script: str) -> str:
            result = await engine.rocklet(sandbox_id).execute(Command(command=["sh", "-c", script]))
            return result.stdout.strip()

        try:
            await shell(_HOLDER)
            pid = ""
            while not pid:
                pid = await shell("cat /tmp/holder.pid 2>/dev/null || true")
            say(f"measuring {rounds} rounds of pause, resume, first command")
            pauses: list[float] = []
            resumes: list[float] = []
            firsts: list[float] = []
            for _ in range(rounds):
                began = time.perf_counter()
                await engine.pause(sandbox_id)
                paused = time.perf_counter()
                await engine.resume(sandbox_id)
                resumed = time.perf_counter()
                await shell("true")
                answered = time.perf_counter()
                pauses.append(paused - began)
                resumes.append(resumed - paused)
                firsts.append(answered - resumed)
            same = await shell(f"test -d /proc/{pid} && echo same || echo gone")
        finally:
            await engine.stop(sandbox_id)
    resume = _ms(resumes)
    return {
        "bench": "pause",
        "rounds": rounds,
        "image": image,
        "figures": {
            "pause_ms": _ms(pauses),
            "resume_ms": resume,
            "first_command_after_resume_ms": _ms(firsts),
            "goal_resume_p50_ms": GOAL_RESUME_P50_MS,
            "goal_met": resume["p50"] <= GOAL_RESUME_P50_MS,
            "process_kept": same == "same",
        },
    }
