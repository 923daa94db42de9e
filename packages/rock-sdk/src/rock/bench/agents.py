"""``rock bench agents``: N sandboxes, each running the test agent for K model calls, every call
answered by the trainer's side through one :class:`~rock.sdk.sandbox.model_service.ModelCallHub`.

Each sandbox gets the test agent (``rock.sdk.sandbox.agent.shell_agent``) installed by
RockAgent with the model service in ``local`` mode; the trainer answers ``true`` K-1 times, then
``done``. The agent times each call (``ROCK_AGENT_TIMINGS``). Then, in the same sandboxes, the
bare answer: the same agent against the same service in ``proxy`` mode replaying a recorded
trajectory (no trainer). The figures:

- ``calls_per_second``: model calls answered per second over the run (all sandboxes);
- ``call_ms``: the agent's view of a call through the trainer (p50, p99), ``bare_call_ms``: the
  replayed answer (p50, p99), ``added_ms``: the difference (issue #27's goal at N=1: p50 <= 2 ms);
- ``trainer_cpu_percent``: this process's CPU (user + system) over the answering phase, in
  percent of one core (embedded: the engine and its port forwards run in this process too);
- ``service_rss_mb``: the model service's resident memory in each sandbox after the run (median,
  max; it holds the episode's trajectory), ``service_rss_idle_mb`` before it.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rock.sdk.sandbox import agent as agent_package
from rock.sdk.sandbox.agent import RockAgentConfig
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock.sdk.sandbox.model_service import ModelCallHub
from rock_core.actions import Command

__all__ = ["GOAL_ADDED_P50_MS", "run_agents_bench"]

GOAL_ADDED_P50_MS = 2.0
TIMINGS = "/tmp/rock_agent_timings.txt"


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3)}


def _completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _sh(sandbox: Sandbox, script: str) -> str:
    result = await sandbox.execute(Command(command=["bash", "-c", script], timeout=120))
    if result.exit_code != 0:
        raise RuntimeError(f"{script}: exit {result.exit_code}: {result.stdout}{result.stderr}")
    return result.stdout


async def _timings(sandbox: Sandbox) -> list[float]:
    text = await _sh(sandbox, f"cat {TIMINGS} 2>/dev/null; rm -f {TIMINGS}")
    return [float(x) for x in text.split()]


async def _rss_mb(sandbox: Sandbox) -> float:
    pid = (await _sh(sandbox, "cat /tmp/rock-model-service/pid.txt")).strip()
    status = await _sh(sandbox, f"grep VmRSS /proc/{shlex.quote(pid)}/status")
    return round(int(status.split()[1]) / 1024, 1)


async def run_agents_bench(
    *,
    sandboxes: int,
    calls: int,
    image: str,
    memory: str,
    cpus: float,
    base_url: str | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Run the bench; the figures as a JSON-ready document."""
    agent_file = Path(agent_package.__file__).parent / "shell_agent.py"
    work = Path(tempfile.mkdtemp(prefix="rock-bench-agents-"))
    (work / "shell_agent.py").write_bytes(agent_file.read_bytes())
    config = SandboxConfig(image=image, memory=memory, cpus=cpus, base_url=base_url)
    boxes = [Sandbox(config) for _ in range(sandboxes)]
    began = time.monotonic()
    try:
        say(f"starting {sandboxes} sandboxes and installing the agent")
        await asyncio.gather(*(b.start() for b in boxes))

        async def install(box: Sandbox) -> None:
            await box.agent.install(
                RockAgentConfig(
                    working_dir=str(work),
                    run_cmd="python3 ${working_dir}/shell_agent.py ${prompt} --max-steps "
                    f"{calls + 1}",
                    env={"ROCK_AGENT_TIMINGS": TIMINGS},
                    model_service_config={"enabled": True},
                    agent_run_timeout=3600,
                    agent_run_check_interval=10,
                )
            )

        await asyncio.gather(*(install(b) for b in boxes))
        ready = time.monotonic() - began
        idle_rss = [await _rss_mb(b) for b in boxes]
        say(f"ready in {ready:.1f} s; {calls} calls per agent")
        runs = [asyncio.create_task(b.agent.run("bench")) for b in boxes]
        hub = ModelCallHub()
        for b in boxes:
            hub.add(b.agent.model_service)
        answered: dict[str, int] = {}
        cpu0, t0 = _cpu(), time.monotonic()
        ended = 0
        async with hub:
            while ended < sandboxes:
                call = await hub.next_call(timeout=600)
                if call.error:
                    raise RuntimeError(f"sandbox {call.sandbox_id}: {call.error}")
                if call.session_end:
                    ended += 1
                    continue
                n = answered[call.sandbox_id] = answered.get(call.sandbox_id, 0) + 1
                await call.answer(_completion("done" if n >= calls else "true"))
        elapsed, cpu = time.monotonic() - t0, _cpu() - cpu0
        results = await asyncio.gather(*runs)
        failed = [r for r in results if r.exit_code != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} agents failed: {failed[0]}")
        call_ms = [t for b in boxes for t in await _timings(b)]
        rss = [await _rss_mb(b) for b in boxes]

        say("the bare answer: the same agents against a replayed trajectory")
        bare_ms = await _bare(boxes, calls)
        total = sum(answered.values())
        local, bare = _pcts(call_ms), _pcts(bare_ms)
        added = {k: round(local[k] - bare[k], 3) for k in local}
        return {
            "bench": "agents",
            "settings": {
                "sandboxes": sandboxes,
                "calls": calls,
                "image": image,
                "memory": memory,
                "cpus": cpus,
                "mode": "remote" if base_url else "embedded",
            },
            "figures": {
                "model_calls": total,
                "seconds": round(elapsed, 3),
                "calls_per_second": round(total / elapsed, 1),
                "call_ms": local,
                "bare_call_ms": bare,
                "added_ms": added,
                "trainer_cpu_percent": round(100 * cpu / elapsed, 1),
                "service_rss_mb": {"median": statistics.median(rss), "max": max(rss)},
                "service_rss_idle_mb": statistics.median(idle_rss),
                "setup_seconds": round(ready, 1),
                "goal_added_p50_ms": GOAL_ADDED_P50_MS,
                "goal_met": added["p50"] <= GOAL_ADDED_P50_MS,
            },
        }
    finally:
        await asyncio.gather(*(b.stop() for b in boxes), return_exceptions=True)


async def _bare(boxes: list[Sandbox], calls: int) -> list[float]:
    """Each agent again, answered by the service replaying ``calls`` recorded answers."""
    records = [
        {"status": "success", "response": _completion("done" if i >= calls else "true")}
        for i in range(1, calls + 1)
    ]
    lines = "".join(json.dumps(r) + "\n" for r in records)

    async def one(box: Sandbox) -> list[float]:
        service = box.agent.model_service
        await box.write_file_by_path(lines, "/tmp/rock_bench_replay.jsonl")
        await service.stop()
        service.config.type = "proxy"
        service.config.replay_file = "/tmp/rock_bench_replay.jsonl"
        await service.start()
        result = await box.agent.run("bench")
        if result.exit_code != 0:
            raise RuntimeError(f"the bare run failed: {result}")
        return await _timings(box)

    out: list[float] = []
    for chunk in await asyncio.gather(*(one(b) for b in boxes)):
        out += chunk
    return out
