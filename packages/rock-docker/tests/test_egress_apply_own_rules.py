"""An egress policy's apply and removal change only that sandbox's own chains and jumps on the
host, without reading every other sandbox's rules (what made applies slower as the host
filled: the whole filter table read, and parsed, at each one), and still leave nothing behind
when another process changed the same rules, or left a chain of its own.

Real iptables on this host; the units are made up (ids, addresses in 198.18.0.0/15, the range
set aside for benchmarks, on a bridge ``rockh0`` no packet of this host crosses), so no container
is needed for the rules themselves.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from rock_core.egress import EgressPolicy, EgressRule, egress_policy
from rock_docker._firewall import Firewall, chain_names

pytestmark = pytest.mark.docker

OPEN = egress_policy(EgressPolicy("allow", ()))
CLOSED = egress_policy(
    EgressPolicy(
        "deny", (EgressRule.allow("203.0.113.0/24", [443]), EgressRule.deny("192.0.2.0/24"))
    )
)


class _MadeUp(Firewall):
    """A firewall whose units' addresses are set by the test (``where``), on one bridge."""

    def __init__(self) -> None:
        super().__init__((), 30.0)
        self.where: dict[str, str] = {}
        self.saves = 0

    def _where(self, api: Any, unit_id: str) -> tuple[str, str]:
        return self.where[unit_id], "rockh0"

    def _save(self, counters: bool = False) -> list[str]:
        self.saves += 1
        return super()._save(counters)


def _host(*units: str) -> list[str]:
    """This host's rule lines naming any of ``units``."""
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in saved.splitlines() if any(u[:16] in line for u in units)]


def _jumps(unit: str) -> list[str]:
    return [line for line in _host(unit) if line.startswith("-A ") and "comment" in line]


@pytest.fixture
def units() -> Iterator[list[str]]:
    made = [f"cafe{uuid.uuid4().hex}{uuid.uuid4().hex}"[:64] for _ in range(4)]
    yield made
    Firewall((), 30.0).drop_all(made)  # whatever a failing test left


def test_an_apply_and_a_removal_change_only_their_own_rules_and_read_no_others(
    units: list[str],
) -> None:
    a, b, c, _ = units
    firewall = _MadeUp()
    firewall.where = {a: "198.18.7.1", b: "198.18.7.2", c: "198.18.7.3"}
    firewall.apply(None, a, CLOSED)
    read_once = firewall.saves  # the host is read once per process
    firewall.apply(None, b, OPEN)
    firewall.apply(None, c, CLOSED)
    firewall.apply(None, a, OPEN)  # rewritten
    firewall.where[a] = "198.18.7.9"  # a restart gave a another address
    firewall.apply(None, a, CLOSED)
    firewall.drop(b)
    assert firewall.saves == read_once, "an apply or a removal read the whole table again"

    assert _host(b) == [], "b's rules outlived its removal"
    jumps = _jumps(a)
    assert len(jumps) == 2 and all("198.18.7.9/32" in line for line in jumps), jumps
    forward, local = chain_names(a)
    assert {f":{forward} - [0:0]", f":{local} - [0:0]"} <= set(_host(a))
    assert any("REJECT" in line for line in _host(a)), "a's second policy denies by default"
    assert len(_jumps(c)) == 2

    firewall.drop_all([a, c])
    assert _host(a, c) == []


def test_rules_another_process_changed_or_left_are_still_replaced_and_swept(
    units: list[str], docker_client: Any
) -> None:
    a, b, _, orphan = units
    mine, other = _MadeUp(), _MadeUp()
    mine.where = {a: "198.18.8.1", b: "198.18.8.2"}
    other.where = {a: "198.18.8.5"}
    mine.apply(None, a, CLOSED)
    mine.apply(None, b, CLOSED)
    other.drop(b)  # another process removed b's rules, and moved a's jumps
    other.apply(None, a, OPEN)

    mine.apply(None, a, OPEN)  # its jumps are not where this process put them
    jumps = _jumps(a)
    assert len(jumps) == 2 and all("198.18.8.1/32" in line for line in jumps), jumps
    mine.drop(b)  # already gone: nothing to do, no error
    assert _host(b) == []

    # A chain left without its jumps (another process ended between its two changes).
    forward, _local = chain_names(orphan)
    subprocess.run(["iptables", "-w", "-t", "filter", "-N", forward], check=True)

    def running() -> set[str]:
        rows = docker_client.api.containers(quiet=True, filters={"status": ["running", "paused"]})
        return {str(row["Id"]) for row in rows}

    mine.sync(None, {}, running)  # the reconcile's sweep
    assert _host(orphan) == [], "an orphan chain outlived the sweep"
    assert _host(a) == [], "a's rules outlived the sweep (no container runs as a)"
