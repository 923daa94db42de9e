"""``rock bench gem``: GEM envs' figures on this machine (issue #11 point 6).

- step round trip of one env (``rock.make``, synchronous), p50 and p99;
- aggregate env-steps/s of N Sokoban-easy envs stepped as batches from one async client
  (``rock.amake_vec``, the envs split in G vector envs whose loops run concurrently); the envs
  whose episode ended are reset while the others of their group step (their resets count in
  the time, not in the steps);
- ``make`` → first observation (make + reset), p50 and p90, envs made one after another;
- proportional set size (PSS) per idle env: the env processes and their fork server, read from
  ``/proc/<pid>/smaps_rollup`` inside the sandbox, divided by the envs;
- for scale, GEM alone: the same step-and-reset loop over 32 envs in one process of an env
  sandbox, no rock in between (one core).

Embedded by default; ``base_url`` measures through an admin (memory is then not measured).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

__all__ = ["run_gem_bench"]

ENV_ID = "game:Sokoban-v0-easy"
DIRECTIONS = ("up", "down", "left", "right")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(value: float) -> float:
    return round(value * 1000, 3)


def step_round_trip(steps: int, base_url: str | None) -> dict[str, Any]:
    """Steps of one env, timed one by one (resets not timed)."""
    import rock

    rng = random.Random(0)
    env = rock.make(ENV_ID, base_url=base_url)
    try:
        env.reset(seed=0)
        for _ in range(20):  # warm the path
            _, _, terminated, truncated, _ = env.step("\\boxed{left}")
            if terminated or truncated:
                env.reset(seed=rng.randrange(1 << 30))
        times: list[float] = []
        while len(times) < steps:
            action = "\\boxed{%s}" % rng.choice(DIRECTIONS)
            started = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            times.append(time.perf_counter() - started)
            if terminated or truncated:
                env.reset(seed=rng.randrange(1 << 30))
    finally:
        env.close()
    return {
        "steps": steps,
        "p50_ms": _ms(_pct(times, 0.5)),
        "p99_ms": _ms(_pct(times, 0.99)),
        "mean_ms": _ms(statistics.fmean(times)),
    }


async def batched_throughput(
    num_envs: int, groups: int, seconds: float, base_url: str | None
) -> dict[str, Any]:
    """``num_envs`` envs in ``groups`` vector envs, each stepping its batches in a task of one
    asyncio client for ``seconds``: a group waits only for its own slowest env (a reset)."""
    import rock

    sizes = [num_envs // groups + (1 if g < num_envs % groups else 0) for g in range(groups)]
    made = time.perf_counter()
    vecs = await asyncio.gather(
        *(
            rock.amake_vec(ENV_ID, n, seed=1000 * (g + 1), base_url=base_url)
            for g, n in enumerate(sizes)
        )
    )
    make_seconds = time.perf_counter() - made
    counts = {"steps": 0, "batches": 0, "resets": 0}

    async def run(g: int, vec: Any, deadline: float) -> None:
        # What an async trainer does with autoreset disabled: the envs whose episode ended are
        # reset while the others take their next step (two batches in flight).
        rng = random.Random(g)
        await vec.reset()
        ended: list[int] = []
        while time.perf_counter() < deadline:
            live = [i for i in range(vec.num_envs) if i not in ended]
            stepping = vec.step({i: "\\boxed{%s}" % rng.choice(DIRECTIONS) for i in live})
            if ended:
                resetting = vec.reset(seed=[rng.randrange(1 << 30) for _ in ended], indices=ended)
                _, (_, _, terminations, truncations, _) = await asyncio.gather(resetting, stepping)
                counts["resets"] += len(ended)
            else:
                _, _, terminations, truncations, _ = await stepping
            counts["steps"] += len(live)
            counts["batches"] += 1
            ended = [live[k] for k, (a, b) in enumerate(zip(terminations, truncations)) if a or b]

    try:
        started = time.perf_counter()
        await asyncio.gather(*(run(g, vec, started + seconds) for g, vec in enumerate(vecs)))
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(vec.aclose() for vec in vecs))
    return {
        "envs": num_envs,
        "groups": groups,
        "make_all_seconds": round(make_seconds, 3),
        "env_steps_per_second": round(counts["steps"] / elapsed),
        "batches_per_second": round(counts["batches"] / elapsed, 1),
        "resets": counts["resets"],
        "seconds": round(elapsed, 2),
    }


def make_to_first_observation(count: int, base_url: str | None) -> dict[str, Any]:
    """``make`` + ``reset`` of ``count`` envs one after another (each kept until the end, so the
    next one joins a sandbox with room, or needs a new one when the last is full)."""
    import rock

    times = []
    envs = []
    try:
        for i in range(count):
            started = time.perf_counter()
            env = rock.make(ENV_ID, base_url=base_url)
            env.reset(seed=i)
            times.append(time.perf_counter() - started)
            envs.append(env)
    finally:
        for env in envs:
            env.close()
    return {
        "envs": count,
        "first_seconds": round(times[0], 3),
        "p50_ms": _ms(_pct(times, 0.5)),
        "p90_ms": _ms(_pct(times, 0.9)),
        "max_ms": _ms(max(times)),
    }


#: GEM alone in one process, in an env sandbox: the same envs' step-and-reset loop with no rock
#: in between (one core), for scale.
BASELINE = r"""
import random, sys, time, types
try:
    import reasoning_gym
except ImportError:
    sys.modules["reasoning_gym"] = types.SimpleNamespace(factory=types.SimpleNamespace(DATASETS={}))
import logging
import gem
logging.getLogger().setLevel(logging.WARNING)
rng = random.Random(1)
envs = [gem.make("game:Sokoban-v0-easy") for _ in range(32)]
for i, env in enumerate(envs):
    env.reset(seed=i)
steps, started = 0, time.perf_counter()
while time.perf_counter() - started < 5:
    for env in envs:
        _, _, terminated, truncated, _ = env.step("\\boxed{%s}" % rng.choice(["up", "down", "left", "right"]))
        steps += 1
        if terminated or truncated:
            env.reset(seed=rng.randrange(1 << 30))
print(steps / (time.perf_counter() - started))
"""


def idle_memory(count: int) -> dict[str, Any]:
    """PSS per idle env (embedded only): ``count`` envs made and reset, then measured; and GEM's
    own step-and-reset rate in one process of the same sandbox (:data:`BASELINE`)."""
    import rock
    from rock.sdk.envs._backend import backend_for
    from rock_core.actions import Command

    backend: Any = backend_for(None)
    envs = [rock.make(ENV_ID) for _ in range(count)]
    try:
        for i, env in enumerate(envs):
            env.reset(seed=i)
        by_sandbox: dict[str, list[int]] = {}
        for env in envs:
            inner = backend._envs[env.sandbox_id]
            by_sandbox.setdefault(inner.sandbox_id, []).append(inner.pid)
        total_kib = 0
        worker_kib = 0
        for sandbox_id, pids in by_sandbox.items():
            script = (
                "import glob,os,sys\n"
                "pids=[int(p) for p in sys.argv[1:]]\n"
                "def pss(p):\n"
                "    for line in open('/proc/%d/smaps_rollup'%p):\n"
                "        if line.startswith('Pss:'): return int(line.split()[1])\n"
                "    return 0\n"
                "parents={int(open('/proc/%d/stat'%p).read().split(')')[1].split()[1]) for p in pids}\n"
                "print(sum(pss(p) for p in pids), sum(pss(p) for p in parents))\n"
            )

            async def measure(
                sandbox_id: str = sandbox_id, pids: list[int] = pids, script: str = script
            ) -> str:
                client = backend.engine.manager.rocklet(sandbox_id)
                result = await client.execute(
                    Command(command=["python3", "-c", script, *map(str, pids)])
                )
                return str(result.stdout)

            envs_kib, workers_kib = (int(x) for x in backend.engine.call_blocking(measure).split())
            total_kib += envs_kib
            worker_kib += workers_kib

        async def baseline(sandbox_id: str = next(iter(by_sandbox))) -> str:
            client = backend.engine.manager.rocklet(sandbox_id)
            command = (
                'PYTHONPATH="${ROCK_ENV_PYTHONPATH:-/tmp/rock-gem-runtime}" exec python3 -c "$0"'
            )
            result = await client.execute(
                Command(command=["sh", "-c", command, BASELINE], timeout=300)
            )
            return str(result.stdout).strip()

        in_process = float(backend.engine.call_blocking(baseline))
    finally:
        for env in envs:
            env.close()
    return {
        "gem_in_one_process_steps_per_second": round(in_process),
        "envs": count,
        "sandboxes": len(by_sandbox),
        "pss_per_env_mb": round(total_kib / count / 1024, 2),
        "pss_per_env_with_fork_server_mb": round((total_kib + worker_kib) / count / 1024, 2),
        "fork_server_pss_mb": round(worker_kib / 1024, 1),
    }


def run_gem_bench(
    *,
    steps: int,
    num_envs: int,
    groups: int,
    seconds: float,
    makes: int,
    idle_envs: int,
    base_url: str | None,
    say: Any,
) -> dict[str, Any]:
    """Every figure; ``say`` reports progress."""
    figures: dict[str, Any] = {"env_id": ENV_ID, "through": base_url or "embedded"}
    say("make → first observation")
    figures["make_to_first_observation"] = make_to_first_observation(makes, base_url)
    say(f"step round trip ({steps} steps)")
    figures["step_round_trip"] = step_round_trip(steps, base_url)
    say(f"{num_envs} envs in {groups} groups stepped as batches for {seconds:g} s")
    figures["batched"] = asyncio.run(batched_throughput(num_envs, groups, seconds, base_url))
    if base_url is None and idle_envs:
        say(f"memory of {idle_envs} idle envs")
        figures["idle_memory"] = idle_memory(idle_envs)
    return figures
