"""Monitoring: every running sandbox's resource use, sampled by the engine from its runtime.

Every ``stats_interval`` seconds (5 by default; 0 turns it off; longer when a sample would cost
more than 2 % of a core) :func:`sample` makes one
:meth:`~rock_core.runtime.Runtime.stats` call for all of this owner's running units (the Docker
runtime reads their cgroup files; no rocklet is woken) and keeps, for each running sandbox, a
:class:`~rock_core.models.SandboxUsage` in memory: CPU (percent of one core since the previous
sample), memory now, at peak and its limit, network bytes, processes, OOM kills, and warnings
(memory at or above :data:`MEMORY_WARNING_PERCENT` of the limit, a new OOM kill). Every twelfth
sample also asks for the writable layers' sizes when the runtime measures them
(:meth:`~rock_core.runtime.Runtime.disk_usage`). ``get_status`` shows the last usage; the admin
serves it at ``GET .../sandboxes/{id}/statistics`` and, when asked, as per-sandbox gauges.

The cost is one runtime call and a few file reads per sandbox per interval; the engine counts
the CPU time the sampling itself takes (:attr:`Sampler.cpu_seconds`), which ``rock bench
monitor`` reports. A sample waits while sandboxes start (:func:`starts_in_flight`), at most
:data:`MAX_DEFER` seconds: on Docker it lists every container, and every twelfth sizes their
writable layers, work dockerd would do in the middle of a burst of starts (as removals wait).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

import anyio

from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_OWNER
from rock_core.engine.removals import starts_in_flight
from rock_core.errors import NotSupported, RockError
from rock_core.models import SandboxUsage, UnitStats
from rock_core.sizes import format_bytes
from rock_core.states import State

__all__ = [
    "MAX_CPU_SHARE",
    "MAX_DEFER",
    "MEMORY_WARNING_PERCENT",
    "Sampler",
    "monitor_loop",
    "sample",
]

log = logging.getLogger("rock.engine")

#: Memory use, in percent of the limit, from which a sandbox's status warns.
MEMORY_WARNING_PERCENT = 90.0
#: The largest share of one core the sampling may take (it samples less often when it would take more).
MAX_CPU_SHARE = 0.02
# Samples between two looks at disk use (a heavier call for the runtime).
_DISK_EVERY = 12
#: The longest a sample waits for the starts in flight to settle (a host that never stops
#: starting is still sampled).
MAX_DEFER = 60.0
# How often a deferred sample looks whether starts are still in flight, if no news woke it.
_DEFER_LOOK = 0.5


class Sampler:
    """What the engine keeps between samples: the last CPU reading per unit, the disk sizes,
    and the CPU time spent sampling (for ``rock bench monitor``)."""

    def __init__(self) -> None:
        self.previous: dict[
            str, tuple[float, float]
        ] = {}  # unit id -> (monotonic time, cpu seconds)
        self.disk: Mapping[str, int] = {}
        self.samples = 0
        #: The process's CPU seconds during :func:`sample` calls (all its threads: the runtime's
        #: worker thread too, and whatever else ran meanwhile; alone in ``rock bench monitor``).
        self.cpu_seconds = 0.0


async def monitor_loop(core: EngineCore, sampler: Sampler) -> None:
    """Run :func:`sample` every ``config.stats_interval`` seconds while the runtime can measure,
    keeping its own cost at most :data:`MAX_CPU_SHARE` of a core: after a sample that took ``c``
    seconds of CPU it waits at least ``c / MAX_CPU_SHARE`` (with 1,000 sandboxes a sample takes
    about 0.4 s here, so they are sampled every 20 s instead of 5, and starts are not slowed)."""
    interval = core.config.stats_interval
    if not interval or not core.runtime.can_measure:
        return
    wait: float = interval
    while True:
        await anyio.sleep(wait)
        await _starts_settle(core)
        before = sampler.cpu_seconds
        try:
            await sample(core, sampler)
        except NotSupported:
            return
        except RockError as exc:
            log.warning("could not sample sandboxes' resource use: %s", exc)
        wait = max(interval, (sampler.cpu_seconds - before) / MAX_CPU_SHARE)


async def _starts_settle(core: EngineCore) -> None:
    """Return once no start is in flight, or after :data:`MAX_DEFER` seconds."""
    with anyio.move_on_after(MAX_DEFER):
        while starts_in_flight(core.queue, core.live):
            with anyio.move_on_after(_DEFER_LOOK):  # a start settling announces itself
                await core.changes.next().wait()


async def sample(core: EngineCore, sampler: Sampler) -> int:
    """One sample of every running sandbox's use, kept in ``sampler``; return how many were
    measured."""
    began = time.process_time()
    running = {
        live.handle.unit_id: live
        for live in core.live.values()
        if live.record.state is State.RUNNING and live.handle is not None
    }
    if not running:
        sampler.previous.clear()
        sampler.cpu_seconds += time.process_time() - began
        return 0
    stats = await core.runtime.stats({LABEL_OWNER: core.owner})
    if sampler.samples % _DISK_EVERY == 0 and core.runtime.capabilities.disk_usage:
        try:
            sampler.disk = await core.runtime.disk_usage({LABEL_OWNER: core.owner})
        except RockError:
            sampler.disk = {}
    sampler.samples += 1
    now_mono = time.monotonic()
    at = datetime.now(UTC)
    measured = 0
    for unit_id, live in running.items():
        unit = stats.get(unit_id)
        if unit is None:
            continue
        before = sampler.previous.get(unit_id)
        cpu = 0.0
        if before is not None and now_mono > before[0]:
            cpu = max(0.0, 100.0 * (unit.cpu_seconds - before[1]) / (now_mono - before[0]))
        sampler.previous[unit_id] = (now_mono, unit.cpu_seconds)
        old_ooms = live.usage.oom_kills if live.usage is not None else unit.oom_kills
        live.usage = usage_of(
            unit, cpu, at, disk=sampler.disk.get(unit_id), new_ooms=unit.oom_kills - old_ooms
        )
        measured += 1
    for unit_id in [u for u in sampler.previous if u not in running]:
        del sampler.previous[unit_id]
    sampler.cpu_seconds += time.process_time() - began
    return measured


def usage_of(
    unit: UnitStats, cpu_percent: float, at: datetime, *, disk: int | None = None, new_ooms: int = 0
) -> SandboxUsage:
    """A sandbox's :class:`~rock_core.models.SandboxUsage` from its unit's sample."""
    warnings: list[str] = []
    limit = unit.memory_limit_bytes
    if limit and 100.0 * unit.memory_bytes / limit >= MEMORY_WARNING_PERCENT:
        warnings.append(
            f"memory at {100.0 * unit.memory_bytes / limit:.0f}% of its limit "
            f"({format_bytes(unit.memory_bytes)} of {format_bytes(limit)}): near an OOM kill"
        )
    if new_ooms > 0:
        warnings.append(
            f"the OOM killer ended {new_ooms} process{'es' if new_ooms != 1 else ''} in it since the last sample"
        )
    return SandboxUsage(
        sampled_at=at,
        cpu_percent=round(cpu_percent, 1),
        cpu_seconds=round(unit.cpu_seconds, 3),
        memory_bytes=unit.memory_bytes,
        memory_peak_bytes=unit.memory_peak_bytes,
        memory_limit_bytes=limit,
        network_rx_bytes=unit.network_rx_bytes,
        network_tx_bytes=unit.network_tx_bytes,
        disk_bytes=unit.disk_bytes if unit.disk_bytes is not None else disk,
        pids=unit.pids,
        oom_kills=unit.oom_kills,
        warnings=tuple(warnings),
        egress_refused=unit.egress_refused,
    )
