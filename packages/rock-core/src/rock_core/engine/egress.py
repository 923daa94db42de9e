"""A sandbox's egress policy, as the engine runs it (:mod:`rock_core.egress` says what one is).

- :func:`refusal`: what :func:`~rock_core.engine.admission.validate` says of a policy its
  runtime cannot enforce (capability ``egress``, naming it).
- :func:`apply`: the policy of a sandbox put on its unit after the runtime started it and
  before its rocklet is asked anything (a start, a restart, a claimed warm-pool member): the
  sandbox's first command already runs under it. A policy that cannot be applied fails the start.
- :func:`update_egress`: a running sandbox's policy replaced (the rules changed before the call
  returns, then the record saved: a restart of the engine applies what the record says); never
  at the same time as :func:`sync` (``EngineCore.egress_changes``), whose policies read before
  the update would otherwise put the old rules back after it.
- :func:`sync`: every reconcile interval, the runtime puts back what is missing of the running
  sandboxes' rules (an admin restart, a firewall flushed, dockerd restarted) and removes the
  rules of units that are gone.
"""

from __future__ import annotations

import logging

import attrs

from rock_core.egress import EgressPolicy, egress_policy
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LiveSandbox, not_running_error
from rock_core.errors import BadRequestRockError, NotSupported, RockError
from rock_core.models import SandboxRecord, SandboxSpec
from rock_core.runtime import UnitHandle
from rock_core.states import State

__all__ = ["apply", "refusal", "sync", "update_egress"]

log = logging.getLogger("rock.engine")


def refusal(core: EngineCore, spec: SandboxSpec) -> str | None:
    """Why ``spec``'s egress policy cannot be had here, in words; ``None`` if it can."""
    if spec.egress is None:
        return None
    runtime = core.runtime
    if not runtime.capabilities.egress:
        return f"egress: {runtime.capabilities.missing('egress', runtime.name)}"
    network = spec.runtime_options.get("network")
    if network in ("host", "none"):
        return f"egress: a sandbox on network {network!r} cannot have an egress policy"
    return None


async def apply(core: EngineCore, live: LiveSandbox, handle: UnitHandle) -> None:
    """Put the sandbox's policy on its started unit (nothing without one)."""
    policy = live.record.spec.egress
    if policy is not None:
        await core.runtime.set_egress(handle, policy)


async def update_egress(
    core: EngineCore, sandbox_id: str, policy: EgressPolicy | dict[str, object] | None
) -> SandboxRecord:
    """:meth:`SandboxManager.update_egress <rock_core.engine.manager.SandboxManager.update_egress>`."""
    checked = None if policy is None else egress_policy(policy)
    runtime = core.runtime
    if not runtime.capabilities.egress:
        raise NotSupported(
            runtime.capabilities.missing("egress", runtime.name),
            sandbox_id=sandbox_id,
            attempted="update_egress",
        )
    live = core.live.get(sandbox_id)
    if live is None:
        raise not_running_error(core.get_record(sandbox_id), "update_egress")
    async with live.lock:
        record = live.record
        if record.state is not State.RUNNING or live.handle is None:
            raise BadRequestRockError(
                f"sandbox {sandbox_id} cannot change its egress policy: it is {record.state.value}",
                sandbox_id=sandbox_id,
                attempted="update_egress",
            )
        spec = attrs.evolve(record.spec, egress=checked)
        problem = refusal(core, spec)
        if problem is not None:
            raise BadRequestRockError(problem, sandbox_id=sandbox_id, attempted="update_egress")
        async with core.egress_changes:  # never beside a reconcile (see sync)
            await runtime.set_egress(live.handle, checked)
            core.save(attrs.evolve(live.record, spec=spec))
        return live.record


async def sync(core: EngineCore) -> None:
    """Have the runtime match the rules of every running sandbox with a policy (and drop those
    of units gone); a failure is logged and tried again at the next interval."""
    if not core.runtime.capabilities.egress:
        return
    # One at a time with updates: policies read before an update, handed to the runtime after
    # it, would put the old rules back (the runtime rewrites a unit's rules that differ).
    async with core.egress_changes:
        wanted = {
            live.handle.unit_id: (live.handle, live.record.spec.egress)
            for live in list(core.live.values())
            if live.record.state is State.RUNNING
            and live.handle is not None
            and live.record.spec.egress is not None
        }
        try:
            await core.runtime.sync_egress(wanted)
        except RockError as exc:
            log.warning("could not check the sandboxes' egress rules: %s", exc)
