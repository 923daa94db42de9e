"""``rock bench fork``: what a filesystem snapshot and a fork cost, on the embedded engine.

A parent sandbox writes ``write_mib`` MiB of random data and installs a package (a small one,
built in the sandbox: ``pip install`` with no index); then, in the same run:

- its snapshot: the call's time and how long the parent was frozen (``docker commit`` pauses
  the container for the copy; the runtime times the pause);
- ``count`` cold starts of the base image at once, until all run;
- a fork of ``count`` (``SandboxManager.fork``: a snapshot, then the starts through the start
  queue), until all run, against the cold starts (issue #25's goal: <= 1.2x); the parent has
  not changed since its snapshot, so the fork starts from it (capability ``snapshot_reuse``);
- the parent changes (one file written, as an episode's step), then a fork of ``count`` again:
  this one takes a new snapshot before its starts, against the same cold starts and goal; on
  Docker an incremental one (the first snapshot's image plus one layer of the step, so the
  200 MiB are not copied again: :mod:`rock_docker._snapshot_delta`);
  each fork split into the fork call (the snapshot, or the check that it is unchanged) and the
  starts after it, to show where the time goes;
- ``count`` starts from a warm pool of the fork's snapshot (claims), their p50;
- ``rounds`` resets of the parent (its unit replaced; the later ones swap in its spare unit)
  against as many cold starts, interleaved: the p50s and their ratio (goal: <= 0.5x);
- ``rounds`` pauses and resumes of the parent: resume's p50 (goal: <= 50 ms);
- the disk: the snapshot's layer (shared by every fork) and what the running forks wrote over
  it (their writable layers), against ``count`` copies of the parent's changes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from rock_core.actions import Command, SandboxStartRequest, SnapshotInfo
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import NotSupported
from rock_core.models import NonBlankStr, NonNegativeFloat, PositiveFloat, SizeStr

__all__ = ["GOAL_FORK_RATIO", "run_fork_bench"]

#: Issue #25's goal: a fork of N all running within 1.2x the time of N cold starts.
GOAL_FORK_RATIO = 1.2
#: Issue #25's goals: a reset's p50 within half a cold start's; resume's p50.
GOAL_RESET_RATIO = 0.5
GOAL_RESUME_P50_MS = 50.0


def _p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


async def _resets_and_colds(
    engine: SandboxManager, parent: str, request: SandboxStartRequest, rounds: int
) -> tuple[list[float], list[float]]:
    """``rounds`` resets of ``parent`` and as many cold starts, interleaved, each after a
    second's pause (as between episodes: dockerd finishes the background removals, and the
    reset's spare unit starts)."""
    resets: list[float] = []
    colds: list[float] = []
    for _ in range(rounds):
        await anyio.sleep(1.0)
        began = time.perf_counter()
        await engine.reset(parent)
        resets.append(time.perf_counter() - began)
        await anyio.sleep(1.0)
        began = time.perf_counter()
        cold = await engine.start(request)
        colds.append(time.perf_counter() - began)
        await engine.stop(str(cold.sandbox_id))
    return resets, colds


async def _resumes(engine: SandboxManager, parent: str, rounds: int) -> list[float]:
    took: list[float] = []
    for _ in range(rounds):
        await engine.pause(parent)
        began = time.perf_counter()
        await engine.resume(parent)
        took.append(time.perf_counter() - began)
    return took


async def _all_running(engine: SandboxManager, ids: list[str]) -> None:
    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(engine.wait_until_running, sandbox_id)


async def _stop_all(engine: SandboxManager, ids: list[str]) -> None:
    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(engine.stop, sandbox_id)


# A package built and installed in the sandbox, with no index (sandboxes may have no network).
_INSTALL = """
import os, subprocess, sys
root = "/tmp/rockbenchpkg"
os.makedirs(root + "/rockbenchpkg", exist_ok=True)
open(root + "/rockbenchpkg/__init__.py", "w").write("VALUE = 1\\n")
open(root + "/pyproject.toml", "w").write(
    '[build-system]\\nrequires = ["setuptools"]\\nbuild-backend = "setuptools.build_meta"\\n'
    '[project]\\nname = "rockbenchpkg"\\nversion = "1.0"\\n'
)
try:
    import setuptools  # noqa: F401 - the build backend (images of Python 3.12+ may lack it)
except ImportError:
    sys.exit("no setuptools in the image: no package installed")
pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation"]
subprocess.run([*pip, "--root-user-action=ignore", root], check=True)
subprocess.run([sys.executable, "-c", "import rockbenchpkg"], check=True)
"""


async def _fork_until_running(
    engine: SandboxManager, parent: str, count: int
) -> tuple[SnapshotInfo, list[str], float, float]:
    """A fork of ``count``: its snapshot, the forks, the call's time and the time until all run."""
    began = time.perf_counter()
    snap, records = await engine.fork(parent, count)
    call_s = time.perf_counter() - began
    forks = [str(r.sandbox_id) for r in records]
    await _all_running(engine, forks)
    return snap, forks, call_s, time.perf_counter() - began


async def _quiet(engine: SandboxManager, units: int) -> None:
    """Wait (up to a minute) until the engine has only ``units`` units left, then a second (dockerd
    goes on with a removal's network and layers after the unit is gone), so that the removals
    of a batch just stopped do not weigh on the next batch measured."""
    with anyio.move_on_after(60):
        while len(await engine.runtime.list({"rock.engine_id": engine.engine_id})) > units:
            await anyio.sleep(0.1)
    await anyio.sleep(1.0)


async def _writable_bytes(engine: SandboxManager, ids: list[str]) -> int | None:
    """What the sandboxes ``ids`` wrote over their image (their writable layers), as the runtime
    measures it; ``None`` where it does not (no capability, or limits it enforces itself)."""
    try:
        usage = await engine.runtime.disk_usage({"rock.engine_id": engine.engine_id})
    except NotSupported:
        return None
    units = {engine.get_record(i).unit_id for i in ids}
    found = [size for unit, size in usage.items() if unit in units]
    return sum(found) if len(found) == len(ids) else None


async def run_fork_bench(
    *,
    count: int,
    write_mib: int,
    image: str,
    memory: str,
    cpus: float,
    say: Callable[[str], None],
    rounds: int = 10,
) -> dict[str, Any]:
    """The figures of the module docstring, as one document."""
    config = EngineConfig(stats_interval=NonNegativeFloat(0), reap_orphans=False)
    request = SandboxStartRequest(
        image=NonBlankStr(image), memory=SizeStr(memory), cpus=PositiveFloat(cpus)
    )
    snapshots: list[str] = []
    async with SandboxManager(config) as engine:
        say(f"starting the parent ({image}), writing {write_mib} MiB, installing a package")
        parent = str((await engine.start(request)).sandbox_id)
        started: list[str] = []
        try:
            rocklet = engine.rocklet(parent)
            await rocklet.execute(
                Command(
                    command=["sh", "-c", f"head -c {write_mib}M /dev/urandom > /data.bin"],
                    timeout=600,
                )
            )
            installed = await rocklet.execute(
                Command(command=["python3", "-c", _INSTALL], timeout=600)
            )
            began = time.perf_counter()
            snap = await engine.snapshot(parent)
            snapshot_s = time.perf_counter() - began
            snapshots.append(snap.name)

            say(f"{count} cold starts of {image}")
            await _quiet(engine, 1)
            began = time.perf_counter()
            cold = [str((await engine.start_async(request)).sandbox_id) for _ in range(count)]
            started += cold
            await _all_running(engine, cold)
            cold_s = time.perf_counter() - began
            await _stop_all(engine, cold)

            say(f"fork of {count} (the parent unchanged since its snapshot)")
            await _quiet(engine, 1)
            fork_snap, forks, fork_call_s, fork_s = await _fork_until_running(engine, parent, count)
            started += forks
            if fork_snap.name not in snapshots:
                snapshots.append(fork_snap.name)
            await _stop_all(engine, forks)

            say(f"fork of {count} after a change (a new snapshot)")
            await rocklet.execute(Command(command=["sh", "-c", "echo step-1 > /step"]))
            await _quiet(engine, 1)
            changed_snap, forks, changed_call_s, changed_s = await _fork_until_running(
                engine, parent, count
            )
            started += forks
            if changed_snap.name not in snapshots:
                snapshots.append(changed_snap.name)
            forks_rw = await _writable_bytes(engine, forks)
            await _stop_all(engine, forks)

            say(f"a warm pool of {count} of the snapshot, then {count} starts from it")
            pooled = SandboxStartRequest(
                image=NonBlankStr(image),
                memory=SizeStr(memory),
                cpus=PositiveFloat(cpus),
                snapshot=NonBlankStr(changed_snap.name),
            )
            await engine.set_warm_pool(pooled, count)
            await engine.wait_warm(timeout=600)
            claims: list[float] = []
            for _ in range(count):
                began = time.perf_counter()
                claimed = (await engine.start(pooled)).sandbox_id
                claims.append(time.perf_counter() - began)
                started.append(claimed)
                await engine.stop(claimed)
            await engine.set_warm_pool(pooled, 0)

            say(f"{rounds} pauses and resumes of the parent")
            resumes = await _resumes(engine, parent, rounds)
            say(f"{rounds} resets of the parent against {rounds} cold starts")
            resets, colds = await _resets_and_colds(engine, parent, request, rounds)
        finally:
            await _stop_all(engine, [parent, *started])
            for name in snapshots:
                for _ in range(600):
                    try:
                        await engine.delete_snapshot(name)
                        break
                    except Exception:  # noqa: BLE001 - its sandboxes are still being removed
                        await anyio.sleep(0.1)
    ratio, changed_ratio = fork_s / cold_s, changed_s / cold_s
    reset_p50, cold_p50, resume_p50 = _p50_ms(resets), _p50_ms(colds), _p50_ms(resumes)
    return {
        "bench": "fork",
        "count": count,
        "image": image,
        "write_mib": write_mib,
        "package_installed": installed.exit_code == 0,
        "snapshots": snapshots,
        "figures": {
            "snapshot_s": round(snapshot_s, 3),
            "parent_frozen_s": round(snap.frozen_seconds or 0.0, 3),
            "snapshot_bytes": snap.size,
            "cold_starts_all_running_s": round(cold_s, 3),
            "fork_all_running_s": round(fork_s, 3),
            "fork_call_s": round(fork_call_s, 3),
            "fork_starts_after_call_s": round(fork_s - fork_call_s, 3),
            "fork_reused_snapshot": fork_snap.name == snap.name,
            "fork_over_cold": round(ratio, 3),
            "fork_after_change_all_running_s": round(changed_s, 3),
            "fork_after_change_call_s": round(changed_call_s, 3),
            "fork_after_change_starts_after_call_s": round(changed_s - changed_call_s, 3),
            "fork_after_change_snapshot_frozen_s": round(changed_snap.frozen_seconds or 0.0, 3),
            "fork_after_change_over_cold": round(changed_ratio, 3),
            "goal_fork_over_cold": GOAL_FORK_RATIO,
            "goal_met": ratio <= GOAL_FORK_RATIO,
            "goal_met_after_change": changed_ratio <= GOAL_FORK_RATIO,
            "start_from_snapshot_pool_p50_ms": _p50_ms(claims),
            "reset_p50_ms": reset_p50,
            "cold_start_p50_ms": cold_p50,
            "reset_over_cold": round(reset_p50 / cold_p50, 3),
            "goal_reset_over_cold": GOAL_RESET_RATIO,
            "resume_p50_ms": resume_p50,
            "goal_resume_p50_ms": GOAL_RESUME_P50_MS,
            "disk_snapshot_layer_bytes": changed_snap.size,
            "disk_forks_writable_bytes": forks_rw,
            "disk_copies_bytes": count * changed_snap.size,
        },
    }
