"""``rock bench egress``: what an egress policy costs, on the embedded engine and the local Docker.

1. **Start**: ``rounds`` pairs of starts, one without a policy and one with (deny by default,
   one allow rule and the link-local refusal), one after the other in the same run; the p50
   and p95 of each and their ratio (issue #26's goal: with / without <= 1.1 at the p50).
2. **Connection setup through the rules**: ``connects`` TCP connections from inside a sandbox
   with a policy and one without to a server the bench runs on the bridge gateway's address
   (the sandbox's "outside"), each timed inside the sandbox; the p50 and p95 of each, in
   microseconds.
3. **Scale**: ``scale`` sandboxes with policies started ``concurrency`` at a time: their start
   rate, the host's rule count (every line of the filter table that belongs to rock's egress
   chains, and per sandbox), the time of ``update_egress`` (its chains rewritten) with all of
   them on the host, then all stopped and the rules left counted (0 expected).
"""

from __future__ import annotations

import json
import re
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio

from rock.bench._host import docker
from rock_core.actions import Command, SandboxStartRequest
from rock_core.egress import EgressPolicy, EgressRule
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import NonBlankStr, NonNegativeFloat, PositiveFloat, SizeStr

__all__ = ["GOAL_START_RATIO", "run_egress_bench"]

_KEY = re.compile(r"(?:ROCK-EGI?-|rock-egress:)([0-9a-f]{16})")

#: Issue #26's goal: a start with a policy at most 10% slower than one without (p50).
GOAL_START_RATIO = 1.1

_CONNECTS = r"""
import json, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spent = []
for _ in range(n):
    began = time.perf_counter()
    s = socket.create_connection((host, port), timeout=10)
    spent.append(time.perf_counter() - began)
    s.close()
print(json.dumps(spent))
"""


def _ms(values: list[float], scale: float = 1000) -> dict[str, float]:
    """The p50 and p95 of ``values`` (seconds) in milliseconds (``scale=1e6``: microseconds)."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * scale, 2), "p95": round(p95 * scale, 2)}


def _egress_lines(keys: set[str]) -> int:
    """Lines of the host's filter table that belong to the units of ``keys`` (16-digit prefixes
    of their container ids: rock's chains and jumps name them)."""
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    found = (_KEY.search(line) for line in saved.splitlines())
    return sum(1 for match in found if match is not None and match[1] in keys)


class _Acceptor:
    """A TCP server on ``address`` that accepts and closes each connection."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_server((address, 0), backlog=512)
        self.port = int(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.close()


async def run_egress_bench(
    *,
    rounds: int,
    connects: int,
    scale: int,
    concurrency: int,
    image: str,
    memory: str,
    cpus: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The three measures of the module docstring; the figures as a JSON-ready document."""
    config = EngineConfig(stats_interval=NonNegativeFloat(0), reap_orphans=False)
    request = SandboxStartRequest(
        image=NonBlankStr(image), memory=SizeStr(memory), cpus=PositiveFloat(cpus)
    )
    async with SandboxManager(config) as engine:
        first = await engine.start(request)
        unit = engine.get_record(first.sandbox_id).unit_id or ""
        gateway = docker(
            "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}", unit
        ).strip()
        acceptor = _Acceptor(gateway)
        policy = EgressPolicy.deny_all([EgressRule.allow(gateway, [acceptor.port], "tcp")])
        with_policy = SandboxStartRequest(
            image=NonBlankStr(image),
            memory=SizeStr(memory),
            cpus=PositiveFloat(cpus),
            egress=policy.to_dict(),
        )
        try:
            say(f"measuring {rounds} pairs of starts, without and with a policy")
            plain: list[float] = []
            policed: list[float] = []
            for _ in range(rounds):
                for kind, spent in ((request, plain), (with_policy, policed)):
                    began = time.perf_counter()
                    status = await engine.start(kind)
                    spent.append(time.perf_counter() - began)
                    await engine.stop(status.sandbox_id)
            say(f"timing {connects} connections from inside, without and with a policy")
            second = await engine.start(with_policy)
            setup = {}
            for name, sandbox_id in (("without", first.sandbox_id), ("with", second.sandbox_id)):
                done = await engine.rocklet(sandbox_id).execute(
                    Command(
                        command=[
                            "python3",
                            "-c",
                            _CONNECTS,
                            gateway,
                            str(acceptor.port),
                            str(connects),
                        ]
                    )
                )
                setup[name] = _ms(json.loads(done.stdout), scale=1e6)
            await engine.stop(second.sandbox_id)
            say(f"starting {scale} sandboxes with policies, {concurrency} at a time")
            scaled = await _scale(engine, with_policy, scale, concurrency)
        finally:
            acceptor.close()
            await engine.stop(first.sandbox_id)
    start_plain, start_policed = _ms(plain), _ms(policed)
    ratio = round(start_policed["p50"] / start_plain["p50"], 3) if start_plain["p50"] else None
    return {
        "bench": "egress",
        "rounds": rounds,
        "image": image,
        "figures": {
            "start_without_policy_ms": start_plain,
            "start_with_policy_ms": start_policed,
            "start_p50_ratio": ratio,
            "goal_start_p50_ratio": GOAL_START_RATIO,
            "goal_met": ratio is not None and ratio <= GOAL_START_RATIO,
            "connect_without_policy_us": setup["without"],
            "connect_with_policy_us": setup["with"],
            **scaled,
        },
    }


async def _scale(
    engine: SandboxManager, request: SandboxStartRequest, count: int, concurrency: int
) -> dict[str, Any]:
    ids: list[str] = []
    gate = anyio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            status = await engine.start(request)
            ids.append(status.sandbox_id)

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    spent = time.perf_counter() - began
    keys = {(engine.get_record(i).unit_id or "")[:16] for i in ids}
    lines = _egress_lines(keys)
    updates: list[float] = []
    if ids:  # a policy replaced with every other sandbox's rules on the host
        policy = request.egress or {}
        opened = {
            **policy,
            "rules": [*policy.get("rules", []), {"action": "allow", "cidr": "192.0.2.0/24"}],
        }
        for i in range(20):
            began = time.perf_counter()
            await engine.update_egress(ids[0], opened if i % 2 == 0 else policy)
            updates.append(time.perf_counter() - began)
    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(engine.stop, sandbox_id)
    left = _egress_lines(keys)
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:  # removals go at the queue's pace
        await anyio.sleep(0.5)
        left = _egress_lines(keys)
    return {
        "scale_sandboxes": count,
        "scale_starts_per_second": round(count / spent, 2),
        "scale_rule_lines": lines,
        "scale_rule_lines_per_sandbox": round(lines / count, 1) if count else 0,
        "scale_rule_lines_left_after_stop": left,
        "scale_update_egress_ms": _ms(updates) if updates else None,
    }
