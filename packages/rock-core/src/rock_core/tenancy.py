"""Tenants: the namespace each sandbox belongs to, and what a tenant may hold at once.

Every sandbox has a tenant (:attr:`~rock_core.models.SandboxSpec.tenant`), set by the engine at
its start: the tenant the caller names (the admin passes its API key's tenant), else the engine's
owner (:attr:`SandboxManager.owner <rock_core.engine.manager.SandboxManager.owner>`: the process,
``proc:<host>:<pid>:<start>``, in embedded mode; ``admin:<store>`` for an admin without keys).
A start request cannot set it.

What a sandbox names lives in its tenant's namespace, so the same name from two tenants names two
things: a network group is a network per tenant and name (:func:`group_network_id`), an archive is
kept under a key of its tenant (:func:`archive_key`). Both are derived with :func:`scoped_name`,
which a runtime or a store uses as it is (hex digits fit every backend's naming rules).

Quotas (:class:`Quota`) cap what one tenant holds at once: sandboxes, memory and CPUs, counted
over its ``pending`` and ``running`` sandboxes (:data:`~rock_core.states.LIVE_STATES`; stopped
and archived ones hold no memory or CPU). The engine checks them in the same step that records a
start, so concurrent starts cannot both take the last slot (:func:`quota_refusal`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

import attrs

from rock_core.errors import InvalidParameter
from rock_core.models import SandboxRecord, SandboxSpec
from rock_core.sizes import format_size
from rock_core.states import LIVE_STATES

__all__ = [
    "Quota",
    "Usage",
    "archive_key",
    "check_image_by_name",
    "group_network_id",
    "quota_refusal",
    "scoped_name",
    "tenant_usage",
    "usage_by_tenant",
    "usage_of",
]


def scoped_name(tenant: str | None, name: str, *, length: int = 24) -> str:
    """``name`` within ``tenant``'s namespace: ``length`` hex digits of a SHA-256 of both
    (at most 64). Another tenant's same ``name`` gives another value."""
    digest = hashlib.sha256(f"{tenant or ''}\0{name}".encode()).hexdigest()
    return digest[:length]


def group_network_id(spec: SandboxSpec) -> str | None:
    """The id of the network of ``spec``'s network group (``runtime_options["network_group"]``)
    within its tenant, or ``None`` when it names no group. Runtimes name the group's network
    after it (Docker: ``rock-group-<id>``)."""
    group = spec.runtime_options.get("network_group")
    return None if group is None else scoped_name(spec.tenant, str(group))


def archive_key(record: SandboxRecord) -> str:
    """The key the sandbox's archive is kept under in the archive store: ``<tenant digest>-<id>``.

    One path segment (:func:`rock_core.archive.check_archive_address`); another tenant's sandbox
    of the same id (on another engine sharing the store) has another key. A sandbox recorded
    before tenants existed (no tenant) keeps its plain id, where its archive already is.
    """
    if record.spec.tenant is None:
        return record.sandbox_id
    return f"{scoped_name(record.spec.tenant, '', length=16)}-{record.sandbox_id}"


@attrs.frozen(kw_only=True)
class Quota:
    """What one tenant may hold at once (``None``: no limit): ``max_sandboxes`` pending and
    running sandboxes, ``max_memory`` bytes of their memory limits, ``max_cpus`` CPUs of their
    CPU ceilings (``limit_cpus`` where set, else ``cpus``); ``max_snapshots`` snapshots kept on
    the node (a fork's own snapshot among them)."""

    max_sandboxes: int | None = None
    max_memory: int | None = None
    max_cpus: float | None = None
    max_snapshots: int | None = None

    def __bool__(self) -> bool:
        limits = (self.max_sandboxes, self.max_memory, self.max_cpus, self.max_snapshots)
        return limits != (None, None, None, None)


@attrs.frozen(kw_only=True)
class Usage:
    """What a tenant's pending and running sandboxes hold: how many, their memory (bytes) and CPUs."""

    sandboxes: int = 0
    memory: int = 0
    cpus: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            sandboxes=self.sandboxes + other.sandboxes,
            memory=self.memory + other.memory,
            cpus=self.cpus + other.cpus,
        )


def usage_of(spec: SandboxSpec) -> Usage:
    """What one sandbox of ``spec`` holds: itself, its memory limit and its CPU ceiling."""
    cpus = spec.limit_cpus if spec.limit_cpus is not None else spec.cpus
    return Usage(sandboxes=1, memory=spec.memory, cpus=float(cpus))


def tenant_usage(records: Iterable[SandboxRecord], tenant: str) -> Usage:
    """The use of ``tenant`` among ``records`` (only pending and running ones count): what a
    start's quota check sums, once per start, so kept to plain arithmetic."""
    sandboxes = memory = 0
    cpus = 0.0
    for record in records:
        spec = record.spec
        if spec.tenant == tenant and record.state in LIVE_STATES:
            sandboxes += 1
            memory += spec.memory
            cpus += spec.limit_cpus if spec.limit_cpus is not None else spec.cpus
    return Usage(sandboxes=sandboxes, memory=memory, cpus=cpus)


def usage_by_tenant(records: Iterable[SandboxRecord]) -> dict[str, Usage]:
    """The use of each tenant among ``records`` (only pending and running ones count)."""
    sums: dict[str, list[float]] = {}
    for record in records:
        spec = record.spec
        if spec.tenant is not None and record.state in LIVE_STATES:
            use = sums.setdefault(spec.tenant, [0, 0, 0.0])
            use[0] += 1
            use[1] += spec.memory
            use[2] += spec.limit_cpus if spec.limit_cpus is not None else spec.cpus
    return {
        t: Usage(sandboxes=int(n), memory=int(m), cpus=float(c)) for t, (n, m, c) in sums.items()
    }


def _count(n: float) -> str:
    return f"{n:g}"


def _bytes(n: float) -> str:
    return format_size(int(n))


def quota_refusal(
    tenant: str, quota: Quota | None, using: Usage, asked: Usage
) -> tuple[str, str] | None:
    """Why ``asked`` on top of ``using`` takes ``tenant`` past ``quota``: ``(field, message)``,
    e.g. ``("max_memory", "tenant 'team-a': max_memory 8g reached (using 6g, asked 4g)")``;
    ``None`` when it fits."""
    if quota is None:
        return None
    checks: list[tuple[str, float | None, float, float, Callable[[float], str]]] = [
        ("max_sandboxes", quota.max_sandboxes, using.sandboxes, asked.sandboxes, _count),
        ("max_memory", quota.max_memory, using.memory, asked.memory, _bytes),
        ("max_cpus", quota.max_cpus, using.cpus, asked.cpus, _count),
    ]
    for field, limit, used, more, show in checks:
        if limit is not None and used + more > limit + 1e-9:
            return (
                field,
                f"tenant {tenant!r}: {field} {show(limit)} reached (using {show(used)}, asked {show(more)})",
            )
    return None


#: An image named by Docker's id (``sha256:<hex>``, or any unique prefix of the hex).
_IMAGE_ID = re.compile(r"^(sha256:)?[0-9a-f]{1,64}$")
#: rock's own repository of snapshot images (rock_docker._commit.REPOSITORY).
_SNAPSHOT_REPOSITORY = "rock-snapshot"


def check_image_by_name(image: str, tenant: str | None) -> None:
    """A tenant's start names its image by name: never by Docker's image id (any unique prefix
    of which Docker takes, so a key could start from an image only another tenant has, such as
    its snapshot, and read its files), nor in rock's snapshot repository (its own snapshots are
    started with ``snapshot=NAME``). Without keys (``tenant`` None) every caller is the operator.

    :raises InvalidParameter: (field ``image``) ``image`` is such a reference.
    """
    if tenant is None:
        return
    ref = image.strip()
    if _IMAGE_ID.match(ref) or ref.split(":", 1)[0] == _SNAPSHOT_REPOSITORY:
        raise InvalidParameter(
            f"image: {ref!r}: a tenant names the image it starts by name (not by its id, nor in "
            f"rock's {_SNAPSHOT_REPOSITORY!r} repository; a snapshot of its own starts with "
            "snapshot=NAME)",
            field="image",
            value=ref,
        )
