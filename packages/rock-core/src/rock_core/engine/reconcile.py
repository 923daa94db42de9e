"""Reconciliation: noticing units that stopped or vanished behind rock's back.

Two ways in, both ending in :func:`unit_gone`, which records the sandbox stopped with the
unit's exit (code, OOM kill, removal) as its reason:

- :func:`reconcile` (every ``reconcile_interval``): one ``runtime.list`` of this owner's units;
  only units the listing does not show running are inspected;
- :func:`watch_loop` (when the runtime declares ``watch``): the runtime's unit events as they
  happen, reconnecting after a failure; a warm-pool member that died is dropped from its pool.
"""

from __future__ import annotations

import logging

import anyio

from rock_core.engine import crash_restarts, egress, reaping
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_OWNER, describe_exit
from rock_core.engine.stopping import stop_locked
from rock_core.errors import NotSupported, RockError
from rock_core.models import RuntimeStatus, UnitState
from rock_core.states import LIVE_STATES, State

__all__ = ["reconcile", "reconcile_loop", "unit_gone", "watch_loop"]

log = logging.getLogger("rock.engine")


async def unit_gone(
    core: EngineCore, sandbox_id: str, status: RuntimeStatus, unit_id: str | None = None
) -> None:
    """Record that a live sandbox's unit stopped or vanished behind rock's back (``unit_id``:
    that unit; one the sandbox no longer holds, as the unit a reset replaced, is no news)."""
    live = core.live.get(sandbox_id)
    if live is None or live.record.state not in LIVE_STATES:
        return
    if live.record.state is State.PENDING and live.client is None:
        return  # the start in progress sees it and reports it itself
    async with live.lock:
        handle = live.handle
        if unit_id is not None and handle is not None and handle.unit_id != unit_id:
            return
        if live.record.state in LIVE_STATES:
            reason = describe_exit(status)
            if crash_restarts.wants_restart(live.record, status):
                await crash_restarts.crashed(core, live, reason)
                return
            reason = crash_restarts.gave_up(live.record, reason)
            log.info("sandbox %s stopped: %s", sandbox_id, reason)
            await stop_locked(core, live, reason, unexpected=True)


async def reconcile_loop(core: EngineCore) -> None:
    """Run :func:`reconcile` every ``config.reconcile_interval`` seconds, forever."""
    suspects: set[str] = set()
    while True:
        await anyio.sleep(core.config.reconcile_interval)
        await reconcile(core)
        await egress.sync(core)
        if core.lease is not None:  # a cluster: units a leader that ended left untracked
            await reaping.sweep_untracked(core, suspects)


async def reconcile(core: EngineCore) -> None:
    """Compare every running sandbox with its unit; one that died is recorded as stopped.

    One ``list`` of this owner's units per call; only units the listing does not show running
    (or whose state it does not give) are inspected, for their exit code and reason.
    """
    running = {
        live.handle.unit_id: (sandbox_id, live)
        for sandbox_id, live in list(core.live.items())
        if live.record.state is State.RUNNING and live.handle is not None
    }
    if not running:
        return
    try:
        listed = {h.unit_id: h.state for h in await core.runtime.list({LABEL_OWNER: core.owner})}
    except RockError as exc:
        log.warning("could not list units to reconcile: %s", exc)
        return
    for unit_id, (sandbox_id, live) in running.items():
        if unit_id in listed and listed[unit_id] is UnitState.RUNNING:
            continue
        assert live.handle is not None
        try:
            status = await core.runtime.inspect(live.handle)
        except RockError as exc:
            log.warning("could not inspect sandbox %s: %s", sandbox_id, exc)
            continue
        if status.state is not UnitState.RUNNING:
            await unit_gone(core, sandbox_id, status, unit_id)


async def watch_loop(core: EngineCore) -> None:
    """Follow the runtime's unit events (when it has them); reconnect after a failure."""
    if not core.runtime.capabilities.watch:
        return  # the reconcile loop polls instead
    while True:
        try:
            # By owner, not engine id: units recovered from an earlier run of this owner count.
            async for handle, status in core.runtime.watch({LABEL_OWNER: core.owner}):
                if status.state is not UnitState.RUNNING:
                    if any(pool.forget(handle.unit_id) for pool in core.pools.values()):
                        continue
                    await unit_gone(
                        core,
                        core.sandbox_of_unit(handle.unit_id, handle.sandbox_id)
                        or handle.sandbox_id,
                        status,
                        handle.unit_id,
                    )
        except NotSupported:
            return  # the reconcile loop polls instead
        except RockError as exc:
            log.warning("lost the runtime's event stream (%s); reconnecting", exc)
        await anyio.sleep(1.0)
