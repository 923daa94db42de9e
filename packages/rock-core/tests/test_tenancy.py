"""rock_core.tenancy: names within a tenant's namespace, and quotas (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rock_core.models import SandboxRecord, SandboxSpec
from rock_core.states import State
from rock_core.tenancy import (
    Quota,
    Usage,
    archive_key,
    group_network_id,
    quota_refusal,
    tenant_usage,
    usage_by_tenant,
)

GiB = 2**30


def _spec(tenant: str | None, group: str | None = "g", **fields: object) -> SandboxSpec:
    options = {"network_group": group} if group is not None else {}
    return SandboxSpec(image="python:3.11", tenant=tenant, runtime_options=options, **fields)  # type: ignore[arg-type]


def _record(
    spec: SandboxSpec, state: State = State.RUNNING, sandbox_id: str = "x"
) -> SandboxRecord:
    return SandboxRecord(
        sandbox_id=sandbox_id, spec=spec, create_time=datetime.now(UTC), state=state
    )


def test_a_group_name_is_one_network_per_tenant() -> None:
    assert group_network_id(_spec("team-a")) == group_network_id(_spec("team-a"))
    assert group_network_id(_spec("team-a")) != group_network_id(_spec("team-b"))
    # Neither part can be shifted into the other to meet another tenant's id.
    assert group_network_id(_spec("team-a", "bg")) != group_network_id(_spec("team-ab", "g"))
    assert group_network_id(_spec("team-a", None)) is None
    assert all(c in "0123456789abcdef" for c in group_network_id(_spec("t:proc@host")) or "")


def test_archive_keys_carry_the_tenant_but_records_without_one_keep_their_id() -> None:
    a, b = archive_key(_record(_spec("team-a"))), archive_key(_record(_spec("team-b")))
    assert a != b and a.endswith("-x") and b.endswith("-x") and "/" not in a
    assert archive_key(_record(_spec(None))) == "x"


@pytest.mark.parametrize(
    ("quota", "asked", "refusal"),
    [
        (
            Quota(max_memory=8 * GiB),
            Usage(sandboxes=1, memory=4 * GiB, cpus=1),
            ("max_memory", "tenant 'team-a': max_memory 8.00g reached (using 6.00g, asked 4.00g)"),
        ),
        (
            Quota(max_sandboxes=3),
            Usage(sandboxes=1, memory=1, cpus=1),
            ("max_sandboxes", "tenant 'team-a': max_sandboxes 3 reached (using 3, asked 1)"),
        ),
        (
            Quota(max_cpus=4),
            Usage(sandboxes=1, memory=1, cpus=1.5),
            ("max_cpus", "tenant 'team-a': max_cpus 4 reached (using 3, asked 1.5)"),
        ),
        (Quota(max_cpus=4.5, max_memory=7 * GiB), Usage(sandboxes=1, memory=GiB, cpus=1.5), None),
        (None, Usage(sandboxes=9, memory=9, cpus=9), None),
    ],
)
def test_a_refusal_names_the_quota_the_use_and_the_ask(
    quota: Quota | None, asked: Usage, refusal: object
) -> None:
    using = Usage(sandboxes=3, memory=6 * GiB, cpus=3)
    assert quota_refusal("team-a", quota, using, asked) == refusal


def test_use_counts_pending_and_running_sandboxes_at_their_cpu_ceiling() -> None:
    records = [
        _record(_spec("a", cpus=1, memory=GiB), State.RUNNING, "r"),
        _record(_spec("a", cpus=0.5, limit_cpus=2, memory=GiB), State.PENDING, "p"),
        _record(_spec("a", cpus=4, memory=GiB), State.STOPPED, "s"),
        _record(_spec("b", cpus=1, memory=GiB), State.RUNNING, "o"),
    ]
    assert tenant_usage(records, "a") == Usage(sandboxes=2, memory=2 * GiB, cpus=3.0)
    assert usage_by_tenant(records) == {
        "a": Usage(sandboxes=2, memory=2 * GiB, cpus=3.0),
        "b": Usage(sandboxes=1, memory=GiB, cpus=1.0),
    }
