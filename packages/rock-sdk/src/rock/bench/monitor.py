"""``rock bench monitor``: what sampling every running sandbox's resource use costs the engine.

Starts N sandboxes on the embedded engine (Docker, small), then takes ``--samples`` samples of
all of them one after another (``SandboxManager.sample_usage``: one runtime call, the cgroup
files of each container) and reports the engine process's CPU seconds per sample, and what that
is as a share of one core at the default ``stats_interval`` of 5 s. Goal (issue #14): 200
sandboxes every 5 s cost at most 2 % of one core.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from rock.bench.rollout import machine_info

__all__ = ["GOAL_PERCENT_OF_A_CORE", "MonitorSettings", "run_monitor"]

GOAL_PERCENT_OF_A_CORE = 2.0


@attrs.frozen(kw_only=True)
class MonitorSettings:
    """What ``rock bench monitor`` runs."""

    count: int = 200
    samples: int = 20
    interval: float = 5.0
    image: str = "python:3.11"
    memory: str = "64m"
    cpus: float = 0.05


async def _measure(settings: MonitorSettings, say: Callable[[str], None]) -> dict[str, Any]:
    from rock_core.actions import SandboxStartRequest
    from rock_core.engine.config import EngineConfig
    from rock_core.engine.manager import SandboxManager
    from rock_core.models import NonBlankStr, NonNegativeFloat, PositiveFloat, SizeStr

    config = EngineConfig(
        stats_interval=NonNegativeFloat(0), reap_orphans=False
    )  # the bench samples by hand
    async with SandboxManager(config) as engine:
        request = SandboxStartRequest(
            image=NonBlankStr(settings.image),
            memory=SizeStr(settings.memory),
            cpus=PositiveFloat(settings.cpus),
        )
        say(f"starting {settings.count} sandboxes")
        began = time.monotonic()
        ids = [(await engine.start_async(request)).sandbox_id for _ in range(settings.count)]
        async with anyio.create_task_group() as tg:
            for sandbox_id in ids:
                tg.start_soon(engine.wait_until_running, sandbox_id)
        say(
            f"{settings.count} running after {time.monotonic() - began:.1f}s; sampling {settings.samples} times"
        )
        await engine.sample_usage()  # the first sample sets the CPU baselines
        engine.sampler.cpu_seconds = 0.0
        wall = time.perf_counter()
        measured = []
        for _ in range(settings.samples):
            measured.append(await engine.sample_usage())
        wall = time.perf_counter() - wall
        cpu_per_sample = engine.sampler.cpu_seconds / settings.samples
        usages = engine.usages()
    return {
        "sandboxes": settings.count,
        "measured_per_sample": min(measured),
        "cpu_ms_per_sample": round(cpu_per_sample * 1000, 2),
        "wall_ms_per_sample": round(wall / settings.samples * 1000, 2),
        "percent_of_a_core_at_interval": round(100 * cpu_per_sample / settings.interval, 3),
        "interval_seconds": settings.interval,
        "sampled_memory_mb_total": round(sum(u.memory_bytes for u in usages.values()) / 2**20, 1),
        "goal_met": 100 * cpu_per_sample / settings.interval <= GOAL_PERCENT_OF_A_CORE,
    }


def run_monitor(
    settings: MonitorSettings, say: Callable[[str], None] = lambda _line: None
) -> dict[str, Any]:
    """Run the benchmark; return ``{"machine", "settings", "figures"}``."""
    figures = anyio.run(_measure, settings, say)
    return {"machine": machine_info(), "settings": attrs.asdict(settings), "figures": figures}
