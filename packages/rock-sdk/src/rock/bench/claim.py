"""``rock bench claim``: what a start served by a warm pool costs, beside a cold start.

Each figure is the time from ``Sandbox.start()`` until its first command (``true``) answered, as
a trainer sees it (the SDK's driver; embedded: the engine in this process). In one run, for the
embedded engine and then for a ``rock admin serve`` started for the run:

- **cold**: ``rounds`` starts of the image with no pool;
- **pool full**: ``rounds`` claims, each after the pool holds ``pool_size`` ready sandboxes;
- **while refilling**: bursts of ``pool_size`` claims one after another, faster than the pool
  refills (a claim takes tens of milliseconds, a refill a start), so every claim after a burst's
  first meets a refill in flight; ``rounds`` claims in all. Claims the pool did not serve (it
  emptied) are counted apart (``served_by_pool``).

Issue #28's goals: the claims' p50 <= 20 ms embedded and <= 30 ms through the admin, with the
pool full and while it refills.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rock.bench.rollout import percentile

if TYPE_CHECKING:
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

__all__ = ["GOAL_EMBEDDED_P50_MS", "GOAL_REMOTE_P50_MS", "run_claim_bench"]

#: Issue #28's goals for a claim's median (claim → first command).
GOAL_EMBEDDED_P50_MS = 20.0
GOAL_REMOTE_P50_MS = 30.0
# Seconds to wait for a pool to fill.
_FILL_TIMEOUT = 300.0


def _ms(values: list[float]) -> dict[str, float | None]:
    def at(q: float) -> float | None:
        p = percentile(values, q)
        return None if p is None else round(p * 1000, 2)

    return {"p50": at(50), "p95": at(95), "n": len(values)}


async def _claim(config: SandboxConfig) -> tuple[Sandbox, float]:
    """Start a sandbox of ``config`` and run its first command: the sandbox and the seconds."""
    from rock.sdk.sandbox.client import Sandbox
    from rock_core.actions import Command

    sandbox = Sandbox(config)
    began = time.perf_counter()
    await sandbox.start()
    await sandbox.execute(Command(command=["true"]), check=True)
    return sandbox, time.perf_counter() - began


async def _stop_all(sandboxes: list[Sandbox]) -> None:
    for sandbox in sandboxes:
        with contextlib.suppress(Exception):
            await sandbox.stop()
    sandboxes.clear()


async def _claimed(config: SandboxConfig) -> int:
    """Starts the engine's pools (this run's one) have served so far."""
    from rock.sdk.sandbox.client import Sandbox

    pools = await Sandbox(config)._get_driver().warm_pools()
    return sum(pool.claimed for pool in pools)


async def _mode(
    config: SandboxConfig, *, rounds: int, pool_size: int, say: Callable[[str], None]
) -> dict[str, Any]:
    from rock.sdk import warm_pool

    held: list[Sandbox] = []
    cold: list[float] = []
    full: list[float] = []
    refill: list[float] = []
    try:
        say(f"  {rounds} cold starts")
        for _ in range(rounds):
            sandbox, took = await _claim(config)
            cold.append(took)
            await sandbox.stop()
        say(f"  filling a warm pool of {pool_size}")
        began = time.perf_counter()
        await warm_pool(config, pool_size, wait=_FILL_TIMEOUT)
        fill_seconds = time.perf_counter() - began
        claimed_before = await _claimed(config)
        say(f"  {rounds} claims from a full pool")
        for _ in range(rounds):
            await warm_pool(config, pool_size, wait=_FILL_TIMEOUT)
            sandbox, took = await _claim(config)
            full.append(took)
            held.append(sandbox)
            await _stop_all(held)
        say(f"  {rounds} claims while the pool refills (bursts of {pool_size})")
        full_served = await _claimed(config) - claimed_before
        while len(refill) < rounds:
            await warm_pool(config, pool_size, wait=_FILL_TIMEOUT)
            for _ in range(min(pool_size, rounds - len(refill))):
                sandbox, took = await _claim(config)
                refill.append(took)
                held.append(sandbox)
            await _stop_all(held)
        refill_served = await _claimed(config) - claimed_before - full_served
    finally:
        await _stop_all(held)
        with contextlib.suppress(Exception):
            await warm_pool(config, 0)
    return {
        "cold_ms": _ms(cold),
        "pool_full_ms": {**_ms(full), "served_by_pool": full_served},
        "refilling_ms": {**_ms(refill), "served_by_pool": refill_served},
        "pool_fill_seconds": round(fill_seconds, 3),
    }


def _met(figures: dict[str, Any], goal: float) -> bool:
    return all((figures[key]["p50"] or 0) <= goal for key in ("pool_full_ms", "refilling_ms"))


async def run_claim_bench(
    *,
    rounds: int,
    pool_size: int,
    image: str,
    memory: str,
    cpus: float,
    remote: bool = True,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure cold starts and claims embedded, then (``remote``) through a new admin."""
    from rock.bench.admin import running_admin
    from rock.sdk._drivers import close_embedded_driver
    from rock.sdk.sandbox.config import SandboxConfig

    def config(base_url: str | None) -> SandboxConfig:
        return SandboxConfig(
            image=image,
            memory=memory,
            cpus=cpus,
            base_url=base_url,
            experiment_id="bench-claim",
        )

    document: dict[str, Any] = {
        "bench": "claim",
        "rounds": rounds,
        "pool_size": pool_size,
        "image": image,
        "memory": memory,
        "cpus": cpus,
    }
    say("embedded engine")
    try:
        embedded = await _mode(config(None), rounds=rounds, pool_size=pool_size, say=say)
    finally:
        close_embedded_driver()
    embedded["goal_p50_ms"] = GOAL_EMBEDDED_P50_MS
    embedded["goal_met"] = _met(embedded, GOAL_EMBEDDED_P50_MS)
    document["embedded"] = embedded
    if remote:
        say("starting a rock admin server")
        async with running_admin() as admin:
            say(f"through the admin at {admin.url}")
            through = await _mode(config(admin.url), rounds=rounds, pool_size=pool_size, say=say)
        through["goal_p50_ms"] = GOAL_REMOTE_P50_MS
        through["goal_met"] = _met(through, GOAL_REMOTE_P50_MS)
        document["remote"] = through
    document["goal_met"] = all(
        document[m]["goal_met"] for m in ("embedded", "remote") if m in document
    )
    return document


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    """Rows of the printed table: a figure, then its p50 and p95 in each mode."""
    modes = [m for m in ("embedded", "remote") if m in document]
    rows = []
    for key, label in (
        ("cold_ms", "cold start (ms)"),
        ("pool_full_ms", "claim, pool full (ms)"),
        ("refilling_ms", "claim, refilling (ms)"),
    ):
        cells = []
        for mode in modes:
            figure = document[mode][key]
            cells += [f"{figure['p50']:g}", f"{figure['p95']:g}"]
        rows.append([label, *cells])
    rows.append(
        [
            "pool fill (s)",
            *[c for m in modes for c in (f"{document[m]['pool_fill_seconds']:g}", "")],
        ]
    )
    return rows
