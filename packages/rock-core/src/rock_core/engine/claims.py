"""Warm pools as the engine runs them: keeping them (:func:`set_warm_pool`, :func:`warmup`),
waiting for them (:func:`wait_warm`), and serving a start from one (:func:`claim_warm`).

A pool itself (:class:`~rock_core.engine.pool.WarmPool`) makes and holds members; this module
decides which pool a start belongs to and turns a member into the sandbox: the record notes the
member's unit id, the member's secret becomes the sandbox's, and one ``is_alive`` makes it
running. A runtime that can (Docker) renames the unit after the sandbox once it runs, in the
background under the sandbox's lock, so the rename is not part of the claim's wait. A
tenant's claim first checks the image the member's unit holds (another tenant's commit, made
while the pool's tag named one, is refused as a start's new unit is). A member that cannot be
claimed is removed and the start goes to the next member, or the ordinary way.
"""

from __future__ import annotations

import functools
import logging

import anyio
import attrs

from rock_core.actions import SandboxStartRequest, WarmPoolStatus
from rock_core.converters import spec_from_start_request
from rock_core.engine import egress
from rock_core.engine.admission import commit_refusal, startup_timeout, validate, with_defaults
from rock_core.engine.bringup import became_ready, note_unit
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_ENGINE_ID, LiveSandbox
from rock_core.engine.pool import Member, WarmPool, is_unclaimed_member, pool_key
from rock_core.engine.removals import remove_quietly
from rock_core.errors import InvalidParameter, RockError, StartupTimeout
from rock_core.models import PHASE_IMAGE_PULL, PhaseStatus, PullPolicy
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle

__all__ = ["claim_warm", "remove_members", "set_warm_pool", "wait_warm", "warm_pools", "warmup"]

log = logging.getLogger("rock.engine")


async def set_warm_pool(
    core: EngineCore, request: SandboxStartRequest, size: int, tenant: str | None = None
) -> str:
    """:meth:`SandboxManager.set_warm_pool <rock_core.engine.manager.SandboxManager.set_warm_pool>`:
    keep ``size`` started sandboxes of the kind ``request`` asks for; return the pool's key.
    ``tenant`` (default: the engine's owner) is whose network group its members join, if any."""
    tg = core.task_group()
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidParameter(
            f"size: expected a whole number >= 0, got {size!r}", field="size", value=size
        )
    spec = attrs.evolve(spec_from_start_request(request), tenant=tenant or core.owner)
    validate(core, spec)
    if spec.pull is PullPolicy.ALWAYS and size:
        raise InvalidParameter(
            "pull: 'always' asks for a fresh pull at every start, which sandboxes started ahead of "
            "time cannot honour; keep warm pools with pull 'missing' or 'never'",
            field="pull",
            value=spec.pull.value,
            attempted="set_warm_pool",
        )
    key = pool_key(spec)
    pools = core.pools
    others = sum(p.size for k, p in pools.items() if k != key)
    if others + size > core.config.max_warm_pool_members:
        raise InvalidParameter(
            f"size: {size} would keep {others + size} sandboxes ready in warm pools, above the engine's "
            f"maximum of {core.config.max_warm_pool_members} (max_warm_pool_members)",
            field="size",
            value=size,
            attempted="set_warm_pool",
        )
    pool = pools.get(key)
    if pool is not None:
        if size == 0:
            del pools[key]
            core.pool_scopes.pop(key).cancel()
            surplus = pool.drain()
        else:
            surplus = pool.resize(size)
        for member in surplus:
            tg.start_soon(remove_quietly, core.runtime, member.handle)
        return key
    if size == 0:
        return key
    runtime = core.runtime
    pool = WarmPool(
        with_defaults(core, spec),
        size,
        key=key,
        runtime=runtime,
        labels=core.labels(None),
        http=core.http,
        queue=core.queue,
        startup_timeout=startup_timeout(core, spec),
    )
    pools[key] = pool
    scope = core.pool_scopes[key] = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await pool.run(functools.partial(remove_quietly, runtime))

    tg.start_soon(run)
    return key


async def warmup(
    core: EngineCore,
    request: SandboxStartRequest,
    size: int | None = None,
    tenant: str | None = None,
) -> str | None:
    """:meth:`SandboxManager.warmup <rock_core.engine.manager.SandboxManager.warmup>`: pull the
    image of ``request`` in the background, or (with ``size``) keep a warm pool of that kind."""
    tg = core.task_group()
    if size is not None:
        return await set_warm_pool(core, request, size, tenant)
    spec = spec_from_start_request(request)
    validate(core, spec)

    async def pull() -> None:
        try:
            await core.runtime.prepare(spec)
            log.info("warm-up: image %s is ready", spec.image)
        except RockError as exc:
            log.warning("warm-up of image %s failed: %s", spec.image, exc.message)

    tg.start_soon(pull)
    return None


def warm_pools(core: EngineCore) -> list[WarmPoolStatus]:
    """The status of every warm pool of the engine."""
    return [pool.status() for pool in core.pools.values()]


async def wait_warm(core: EngineCore, timeout: float | None = None) -> list[WarmPoolStatus]:
    """Wait until every pool holds its target size, or has failed to make a member; return their status.

    :raises StartupTimeout: ``timeout`` seconds passed first (the pools go on filling).
    """
    with anyio.move_on_after(timeout) as scope:
        while True:
            pending = [p for p in core.pools.values() if not p.full and p.last_error is None]
            if not pending:
                break
            await pending[0].wait_changed()
    if scope.cancelled_caught:
        raise StartupTimeout(
            f"warm pools not full within {timeout:g}s: {warm_pools(core)}", attempted="wait_warm"
        )
    return warm_pools(core)


async def remove_members(core: EngineCore) -> None:
    """Remove this engine's unclaimed pool members (those in a pool and those still starting)."""
    try:
        units = await core.runtime.list({LABEL_ENGINE_ID: core.engine_id})
    except RockError as exc:
        log.warning("could not list this engine's pool members at close: %s", exc)
        return
    claimed = core.claimed_units()
    async with anyio.create_task_group() as tg:
        for handle in units:
            if is_unclaimed_member(handle, claimed):
                tg.start_soon(remove_quietly, core.runtime, handle)


async def claim_warm(core: EngineCore, live: LiveSandbox) -> bool:
    """Serve a start from its warm pool, if one has a live member; whether it was served."""
    pool = core.pools.get(pool_key(live.record.spec))
    if pool is None:
        return False
    while (member := pool.take()) is not None:
        if await _claim(core, live, pool, member):
            return True
    log.debug(
        "warm pool %s is empty: starting sandbox %s the ordinary way",
        pool.key,
        live.record.sandbox_id,
    )
    return False


async def _holds_another_tenants_commit(
    core: EngineCore, live: LiveSandbox, member: Member
) -> bool:
    """Whether ``member`` must not become a tenant's sandbox: its unit was made from another
    tenant's commit (the pool's tag named one when the member was made), by the image the unit
    holds, as :func:`rock_core.engine.bringup.bring_up` checks a tenant's new unit. Without keys
    (the spec's tenant is the engine's owner) nothing is asked; a unit that cannot be looked at
    is not handed out either."""
    spec = live.record.spec
    if spec.tenant is None or spec.tenant == core.owner:
        return False
    try:
        labels = await core.runtime.unit_image_labels(member.handle)
    except RockError as exc:
        log.warning("could not look at pool member %s's image: %s", member.handle.sandbox_id, exc)
        return True
    return commit_refusal(spec.image, spec.tenant, labels) is not None


async def _claim(core: EngineCore, live: LiveSandbox, pool: WarmPool, member: Member) -> bool:
    sandbox_id = live.record.sandbox_id
    runtime = core.runtime
    if await _holds_another_tenants_commit(core, live, member):
        log.warning(
            "pool member %s of %s was made from another tenant's commit: removed, not claimed "
            "for %s",
            member.handle.sandbox_id,
            pool.key,
            sandbox_id,
        )
        core.task_group(while_closing=True).start_soon(remove_quietly, runtime, member.handle)
        return False
    # The unit keeps its pool name until the sandbox runs: a runtime that renames claimed units
    # (Docker) does it afterwards (_assign_later), off the claim's path; the record says whose
    # unit it is either way.
    handle = attrs.evolve(member.handle, sandbox_id=sandbox_id)
    live.handle = handle
    assert member.status.rocklet_address is not None
    # The member's secret was made for it alone and never handed out: it becomes the sandbox's.
    core.save(attrs.evolve(live.record, rocklet_token=member.token))
    client = RockletClient(
        core.http, *member.status.rocklet_address, sandbox_id, token=member.token
    )
    try:
        await egress.apply(core, live, handle)  # before the sandbox's first command
        alive = await client.is_alive(timeout=2.0)
    except RockError as exc:
        log.warning("could not put sandbox %s's egress policy on its unit: %s", sandbox_id, exc)
        alive = False
    if not alive:
        log.warning(
            "pool member claimed for %s did not answer; starting it the ordinary way", sandbox_id
        )
        live.handle = None
        # Removed before the ordinary start, which needs the name the member now has.
        with anyio.CancelScope(shield=True):
            await remove_quietly(runtime, handle)
        return False
    message = f"warm pool {pool.key}: image present"
    core.set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, message)
    note_unit(core, live, attrs.evolve(handle, security=member.handle.security))
    await became_ready(core, live, client, member.status, f"claimed from warm pool {pool.key}")
    if runtime.can_assign:
        # while_closing: a claim that finishes as the engine closes still gets its rename (a
        # kept sandbox must not be left under a pool name), not an error after it runs.
        core.start_soon(_assign_later, core, live, handle, while_closing=True)
    return True


async def _assign_later(core: EngineCore, live: LiveSandbox, handle: UnitHandle) -> None:
    """Name a claimed member's unit after its sandbox (``docker rename``), once the sandbox runs.

    Off the claim's path: with dockerd busy with the pool's refill, a rename took 11 ms of a
    15 ms claim. Until it is done, and if it fails, the unit goes by its pool name, which the
    engine handles as on a runtime that cannot rename (it finds a unit's sandbox by unit id). A
    sandbox stopped meanwhile is not renamed: its unit is on its way out."""
    sandbox_id = handle.sandbox_id
    # Shielded throughout: an engine closing right after the claim (its sandboxes kept running)
    # waits for the rename rather than leaving a sandbox under a pool member's name.
    with anyio.CancelScope(shield=True):
        async with live.lock:
            if live.handle is None or live.handle.unit_id != handle.unit_id:
                return
            try:
                renamed = await core.runtime.assign(handle, sandbox_id)
            except RockError as exc:
                log.warning("claimed unit of sandbox %s keeps its pool name: %s", sandbox_id, exc)
                return
            if live.handle is not None and live.handle.unit_id == handle.unit_id:
                live.handle = attrs.evolve(live.handle, sandbox_id=renamed.sandbox_id)
