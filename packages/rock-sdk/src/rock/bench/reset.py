"""``rock bench reset``: what a reset costs against a cold start, on the embedded engine.

Each round, in the same run and on the same image: one sandbox writes a file and starts a
process, runs an "episode" (``episode`` seconds idle), then is reset (``SandboxManager.reset``:
its unit replaced, its id, ports and secret kept) and its first command answered; and, after the
same pause, one new sandbox is started cold until it runs (the start a reset replaces), then
stopped. The pauses let dockerd finish the background removals (and the reset's spare unit
start, engine/spares.py), as between episodes. The first reset, before any spare, is reported
on its own. The figures are p50 and p95 in milliseconds, the ratio of the p50s, and whether it
meets issue #25's goal (reset <= 0.5x a cold start). The file and the process are checked gone
after every reset.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import NonBlankStr, NonNegativeFloat, PositiveFloat, SizeStr

__all__ = ["GOAL_RESET_RATIO", "run_reset_bench"]

#: Issue #25's goal: a reset's median at most half a cold start's.
GOAL_RESET_RATIO = 0.5

_DIRTY = "echo dirty > /dirty && (nohup sleep 1000 >/dev/null 2>&1 &)"
_CHECK = "test -e /dirty && echo file-kept; pgrep -x sleep >/dev/null && echo process-kept; true"


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


async def run_reset_bench(
    *,
    rounds: int,
    image: str,
    memory: str,
    cpus: float,
    episode: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """``rounds`` resets and ``rounds`` cold starts, interleaved; the figures (module docstring)."""
    config = EngineConfig(stats_interval=NonNegativeFloat(0), reap_orphans=False)
    request = SandboxStartRequest(
        image=NonBlankStr(image), memory=SizeStr(memory), cpus=PositiveFloat(cpus)
    )
    async with SandboxManager(config) as engine:

        async def shell(sandbox_id: str, script: str) -> str:
            command = Command(command=["sh", "-c", script])
            return (await engine.rocklet(sandbox_id).execute(command)).stdout.strip()

        say(f"starting a sandbox of {image}")
        sandbox_id = str((await engine.start(request)).sandbox_id)
        resets: list[float] = []
        firsts: list[float] = []
        colds: list[float] = []
        kept: list[str] = []
        try:
            began = time.perf_counter()
            await engine.reset(sandbox_id)
            first_reset = time.perf_counter() - began
            say(f"measuring {rounds} rounds of a reset and a cold start")
            for _ in range(rounds):
                await shell(sandbox_id, _DIRTY)
                await asyncio.sleep(episode)
                began = time.perf_counter()
                await engine.reset(sandbox_id)
                reset = time.perf_counter()
                left = await shell(sandbox_id, _CHECK)
                answered = time.perf_counter()
                resets.append(reset - began)
                firsts.append(answered - reset)
                if left:
                    kept.append(left)
                await asyncio.sleep(episode)
                began = time.perf_counter()
                cold = await engine.start(request)
                colds.append(time.perf_counter() - began)
                await engine.stop(str(cold.sandbox_id))
            mapping = (await engine.get_status(sandbox_id)).port_mapping
        finally:
            await engine.stop(sandbox_id)
    reset_ms, cold_ms = _ms(resets), _ms(colds)
    ratio = reset_ms["p50"] / cold_ms["p50"]
    return {
        "bench": "reset",
        "rounds": rounds,
        "image": image,
        "episode_seconds": episode,
        "figures": {
            "first_reset_ms": round(first_reset * 1000, 2),
            "reset_ms": reset_ms,
            "first_command_after_reset_ms": _ms(firsts),
            "cold_start_ms": cold_ms,
            "reset_over_cold": round(ratio, 3),
            "goal_reset_over_cold": GOAL_RESET_RATIO,
            "goal_met": ratio <= GOAL_RESET_RATIO,
            "state_cleared": not kept,
            "port_mapping": {str(k): v for k, v in (mapping or {}).items()},
        },
    }
