"""What a start may ask for, and what its unit is made from.

:func:`validate` checks a spec against the engine's maximums and what its runtime and archive
store offer; :func:`check_quota` against its tenant's quota; :func:`with_defaults` is the spec
the runtime gets (the engine's defaults where the request left a field unset),
:func:`startup_timeout` the budget of its start, and :func:`waiting_phases` the phases of a
start not begun; :func:`commit_refusal` is the refusal of another tenant's commit as an image
(checked when a start is accepted, and again on the unit made for it). Used by every way into a running sandbox: a start
(:mod:`~rock_core.engine.starting`), a warm pool (:mod:`~rock_core.engine.claims`), a restore
(:mod:`~rock_core.engine.archiving`).
"""

from __future__ import annotations

from collections.abc import Mapping

from rock_core._evolve import evolve
from rock_core.engine import egress
from rock_core.engine.core import EngineCore
from rock_core.errors import InvalidParameter, QuotaExceeded
from rock_core.models import PHASE_DOCKER_RUN, PHASE_IMAGE_PULL, Phase, PhaseStatus, SandboxSpec
from rock_core.sizes import format_size
from rock_core.tenancy import Quota, quota_refusal, tenant_usage, usage_of

__all__ = [
    "LABEL_COMMIT_TENANT",
    "check_quota",
    "commit_refusal",
    "startup_timeout",
    "validate",
    "waiting_phases",
    "with_defaults",
]

#: The label of a commit's image (:mod:`rock_core.engine.commits`): the tenant that made it.
LABEL_COMMIT_TENANT = "rock.commit.tenant"


def commit_refusal(
    image: str, tenant: str | None, labels: Mapping[str, str] | None
) -> InvalidParameter | None:
    """The refusal of a start of ``tenant`` (``None``: no keys, the operator's) from ``image``,
    whose ``labels`` (``None``: the runtime cannot tell) say it is another tenant's commit:
    answered as an unknown image, not saying whose."""
    owner = (labels or {}).get(LABEL_COMMIT_TENANT)
    if tenant is None or not owner or owner == tenant:
        return None
    return InvalidParameter(
        f"image: {image!r}: no such image on this node (a sandbox starts from a base image "
        "or a commit of its own tenant)",
        field="image",
        value=image,
    )


def waiting_phases() -> dict[str, Phase]:
    """The phases of a start that has not begun: ``image_pull`` and ``docker_run`` waiting."""
    return {
        PHASE_IMAGE_PULL: Phase(status=PhaseStatus.WAITING),
        PHASE_DOCKER_RUN: Phase(status=PhaseStatus.WAITING),
    }


def with_defaults(core: EngineCore, spec: SandboxSpec) -> SandboxSpec:
    """What the runtime gets: ``spec`` with the engine's defaults where the request left a
    unit-shaping field unset. (The record keeps the request's ``None``, so the warm pool a
    client names by its request is the pool its starts are served from.)"""
    if spec.pids_limit is None:
        spec = evolve(spec, pids_limit=core.config.default_pids_limit)
    return spec


def startup_timeout(core: EngineCore, spec: SandboxSpec) -> float:
    """Seconds a start of ``spec`` may take once it leaves the queue."""
    return float(spec.startup_timeout or core.config.default_startup_timeout)


def validate(core: EngineCore, spec: SandboxSpec) -> None:
    """Check ``spec`` against the engine's maximums and what its runtime and archive store offer.

    :raises InvalidParameter: every problem at once, each field named.
    """
    c = core.config
    runtime = core.runtime
    problems: list[tuple[str, str, object]] = []
    if spec.cpus > c.max_cpus:
        problems.append(
            ("cpus", f"cpus: {spec.cpus:g} is above the maximum of {c.max_cpus:g}", spec.cpus)
        )
    if spec.limit_cpus is not None and spec.limit_cpus > c.max_cpus:
        problems.append(
            (
                "limit_cpus",
                f"limit_cpus: {spec.limit_cpus:g} is above the maximum of {c.max_cpus:g}",
                spec.limit_cpus,
            )
        )
    if spec.memory > c.max_memory:
        problems.append(
            (
                "memory",
                f"memory: {format_size(spec.memory)} is above the maximum of {format_size(c.max_memory)}",
                spec.memory,
            )
        )
    if spec.disk is not None and spec.disk > c.max_disk:
        problems.append(
            (
                "disk",
                f"disk: {format_size(spec.disk)} is above the maximum of {format_size(c.max_disk)}",
                spec.disk,
            )
        )
    network = spec.runtime_options.get("network")
    modes = runtime.network_modes
    if network is not None and network not in modes:
        problems.append(
            (
                "network",
                f"network: expected one of {', '.join(modes)}, got {network!r} (what runtime {runtime.name!r} offers)",
                network,
            )
        )
    group = spec.runtime_options.get("network_group")
    if group is not None and not runtime.capabilities.network_groups:
        problems.append(
            (
                "network_group",
                f"network_group: {runtime.capabilities.missing('network_groups', runtime.name)}; got {group!r}",
                group,
            )
        )
    problem = egress.refusal(core, spec)
    if problem is not None:
        problems.append(("egress", problem, None))
    if spec.pids_limit is not None and spec.pids_limit > c.max_pids_limit:
        problems.append(
            (
                "pids_limit",
                f"pids_limit: {spec.pids_limit} is above the maximum of {c.max_pids_limit}",
                spec.pids_limit,
            )
        )
    refused = [name for name in spec.cap_add if name not in c.allowed_cap_add]
    if refused:
        allowed = ", ".join(c.allowed_cap_add) or "none"
        problems.append(
            (
                "cap_add",
                f"cap_add: {', '.join(refused)} may not be added here (allowed: {allowed}; see docs/security.md)",
                list(spec.cap_add),
            )
        )
    if spec.auto_archive_seconds is not None and (
        core.archive_store is None or not runtime.can_snapshot
    ):
        why = (
            "no archive store is configured (archive_store; rock-archive-s3)"
            if core.archive_store is None
            else f"the runtime {runtime.name!r} cannot snapshot sandboxes"
        )
        problems.append(
            (
                "auto_archive_seconds",
                f"auto_archive_seconds: sandboxes cannot be archived here: {why}; unset it",
                spec.auto_archive_seconds,
            )
        )
    if problems:
        field = ", ".join(p[0] for p in problems)
        raise InvalidParameter(
            "; ".join(p[1] for p in problems), field=field, value=problems[0][2], attempted="start"
        )


def check_quota(
    core: EngineCore, spec: SandboxSpec, quota: Quota | None, *, attempted: str
) -> None:
    """Refuse a start of ``spec`` that would take its tenant past ``quota``, counted over the
    tenant's pending and running sandboxes (:mod:`rock_core.tenancy`).

    Synchronous, and the caller makes the sandbox pending before it next awaits: two starts
    cannot both pass for the last slot.

    :raises QuotaExceeded: naming the quota, the tenant's use and what was asked, e.g.
        ``tenant 'team-a': max_memory 8.00g reached (using 6.00g, asked 4.00g)``.
    """
    if not quota or spec.tenant is None:
        return
    using = tenant_usage((live.record for live in core.live.values()), spec.tenant)
    refusal = quota_refusal(spec.tenant, quota, using, usage_of(spec))
    if refusal is not None:
        _quota_field, message = refusal
        raise QuotaExceeded(message, sandbox_id=spec.sandbox_id, attempted=attempted)
