"""What one egress policy apply (and its removal) costs with many other sandboxes' chains on
the host: ``python egress_apply.py [--others 300] [--rounds 20]``, as root on a host with
iptables. No containers: units are made-up ids on a made-up bridge (``rockbench0``) with
addresses in 198.18.0.0/15 (the range set aside for benchmarks), which no packet of this host
matches; every chain made is removed at the end. Prints JSON: the times (ms, p50 and p95) of a first apply, a rewrite (another
policy, as ``update_egress``) and a removal, with 0 and with ``--others`` other units' chains
present."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from typing import Any

from rock_core.egress import EgressPolicy, EgressRule, egress_policy
from rock_docker._firewall import Firewall

POLICY = egress_policy(
    EgressPolicy(
        "deny", (EgressRule.allow("203.0.113.0/24", [443]), EgressRule.deny("192.0.2.0/24"))
    )
)
OPENED = egress_policy(EgressPolicy("allow", (EgressRule.deny("192.0.2.0/24"),)))


class _NoContainers(Firewall):
    """A firewall whose units are made up: an address per unit, one bridge for all."""

    def _where(self, api: Any, unit_id: str) -> tuple[str, str]:
        number = int(unit_id[4:16], 16)
        return f"198.18.{number // 250}.{number % 250 + 1}", "rockbench0"


def _unit(number: int) -> str:
    return f"beef{number:012x}" + "0" * 48


def _lines_of_bench() -> int:
    """The host's rule lines of this bench's units (another engine's sweep may remove them: its
    containers are not running)."""
    saved = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True)
    return sum("beef" in line for line in saved.stdout.splitlines())


def _times(firewall: Firewall, rounds: int, first: int) -> dict[str, dict[str, float]]:
    applies, rewrites, drops = [], [], []
    for n in range(first, first + rounds):
        begun = time.perf_counter()
        firewall.apply(None, _unit(n), POLICY)
        applies.append((time.perf_counter() - begun) * 1000)
        begun = time.perf_counter()
        firewall.apply(None, _unit(n), OPENED)  # as update_egress: its chains written again
        rewrites.append((time.perf_counter() - begun) * 1000)
        begun = time.perf_counter()
        firewall.drop(_unit(n))
        drops.append((time.perf_counter() - begun) * 1000)

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {
            "p50": round(statistics.median(ordered), 2),
            "p95": round(ordered[int(len(ordered) * 0.95) - 1], 2),
        }

    return {
        "apply_ms": summary(applies),
        "rewrite_ms": summary(rewrites),
        "drop_ms": summary(drops),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--others", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    firewall = _NoContainers((), 30.0)
    others = [_unit(10_000 + n) for n in range(args.others)]
    try:
        alone = _times(firewall, args.rounds, 0)
        begun = time.perf_counter()
        for unit in others:
            firewall.apply(None, unit, POLICY)
        filled = time.perf_counter() - begun
        lines_before = _lines_of_bench()
        crowded = _times(firewall, args.rounds, 1_000)
        lines_after = _lines_of_bench()
    finally:
        firewall.drop_all(others)
    print(
        json.dumps(
            {
                "others": args.others,
                "with_0_others": alone,
                f"with_{args.others}_others": crowded,
                "fill_s": round(filled, 2),
                "other_rule_lines_before_and_after": [lines_before, lines_after],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
