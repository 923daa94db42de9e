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
  sandbox, no rock in between (one core);
- the floor of the batched figure, GEM over pipes with one process per core: the same envs,
  actions and resets, in a sandbox of the same size and image, stepped by a main process that
  sends each worker process (one per core, each holding its share of the envs) the round's
  calls over a pipe and waits for all answers; ``batched.ratio_to_floor`` is rock's figure
  over it, measured in the same run.

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
    num_envs: int,
    groups: int,
    seconds: float,
    base_url: str | None,
    rounds: int = 1,
    floor: Any = None,
) -> dict[str, Any]:
    """``num_envs`` envs in ``groups`` vector envs, each stepping its batches in a task of one
    asyncio client for ``seconds``: a group waits only for its own slowest env (a reset).
    ``rounds`` times, each followed by a round of ``floor`` (an awaitable of env-steps/s,
    ``None``: no floor), so that the two take turns under the same load."""
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

    rates: list[int] = []
    floors: list[int] = []
    total = 0.0
    try:
        for _ in range(rounds):
            # every env's first reset before the clock starts, as the floor's
            await asyncio.gather(*(vec.reset() for vec in vecs))
            steps = counts["steps"]
            started = time.perf_counter()
            await asyncio.gather(*(run(g, vec, started + seconds) for g, vec in enumerate(vecs)))
            elapsed = time.perf_counter() - started
            total += elapsed
            rates.append(round((counts["steps"] - steps) / elapsed))
            if floor is not None:
                floors.append(await floor())
    finally:
        await asyncio.gather(*(vec.aclose() for vec in vecs))
    figures: dict[str, Any] = {
        "envs": num_envs,
        "groups": groups,
        "make_all_seconds": round(make_seconds, 3),
        "env_steps_per_second": round(statistics.median(rates)),
        "batches_per_second": round(counts["batches"] / total, 1),
        "resets": counts["resets"],
        "seconds": round(total, 2),
    }
    if rounds > 1:
        figures["rounds_env_steps_per_second"] = rates
    if floors:
        figures["floor_env_steps_per_second"] = round(statistics.median(floors))
        figures["rounds_floor_env_steps_per_second"] = floors
        # each round beside the floor's right after it (the same load), the median of those
        figures["ratio_to_floor"] = round(
            statistics.median(r / max(1, f) for r, f in zip(rates, floors)), 3
        )
    return figures


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


#: The floor of the batched figure: GEM over pipes, one worker process per core (argv: envs,
#: processes, seconds); prints env-steps/s. Each round every env takes a step, or a reset once
#: its episode ended (resets take time, not steps), as rock's batches do.
FLOOR = r"""
import multiprocessing, random, sys, time, types
try:
    import reasoning_gym
except ImportError:
    sys.modules["reasoning_gym"] = types.SimpleNamespace(factory=types.SimpleNamespace(DATASETS={}))
import logging
import gem
logging.getLogger().setLevel(logging.WARNING)
ENV_ID = "game:Sokoban-v0-easy"
num_envs, processes, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

def serve(conn, keys):
    envs = {i: gem.make(ENV_ID) for i in keys}
    while True:
        calls = conn.recv()
        if calls is None:
            return
        conn.send([(i, envs[i].reset(seed=arg) if op == "r" else envs[i].step(arg)) for i, op, arg in calls])

ctx = multiprocessing.get_context("fork")
pipes, workers = [], []
for w in range(processes):
    ours, theirs = ctx.Pipe()
    worker = ctx.Process(target=serve, args=(theirs, range(w, num_envs, processes)), daemon=True)
    worker.start()
    pipes.append(ours)
    workers.append(worker)
rng = random.Random(1)
def run(calls):
    for w, conn in enumerate(pipes):
        conn.send([c for c in calls if c[0] % processes == w])
    return [answer for conn in pipes for answer in conn.recv()]
run([(i, "r", 1000 + i) for i in range(num_envs)])
ended, steps, started = set(), 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    calls = [
        (i, "r", rng.randrange(1 << 30)) if i in ended
        else (i, "s", "\\boxed{%s}" % rng.choice(["up", "down", "left", "right"]))
        for i in range(num_envs)
    ]
    steps += num_envs - len(ended)
    stepped = {i for i, op, _ in calls if op == "s"}
    ended = {i for i, answer in run(calls) if i in stepped and (answer[2] or answer[3])}
elapsed = time.perf_counter() - started
for conn in pipes:
    conn.send(None)
print(round(steps / elapsed))
"""


class PipesFloor:
    """GEM over pipes with ``processes`` worker processes (:data:`FLOOR`), in a sandbox of
    ``image`` (with GEM) and ``cpus`` started for it (through ``base_url`` when given): ``await
    floor()`` runs it once for ``seconds`` and answers its env-steps/s."""

    def __init__(
        self,
        num_envs: int,
        processes: int,
        seconds: float,
        image: str,
        cpus: float,
        base_url: str | None,
    ) -> None:
        from rock.sdk.sandbox.client import Sandbox
        from rock.sdk.sandbox.config import SandboxConfig

        config: dict[str, Any] = {"image": image, "memory": "4g", "cpus": cpus}
        if base_url:
            config["base_url"] = base_url
        self.sandbox = Sandbox(SandboxConfig(experiment_id="bench-gem-floor", **config))
        self.args = [str(num_envs), str(processes), str(seconds)]
        self.image = image
        self.timeout = seconds + 300

    async def __aenter__(self) -> PipesFloor:
        await self.sandbox.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sandbox.stop()

    async def __call__(self) -> int:
        from rock_core.actions import Command

        command = (
            'PYTHONPATH="${ROCK_ENV_PYTHONPATH:-/tmp/rock-gem-runtime}" exec python3 -c "$0" "$@"'
        )
        result = await self.sandbox.execute(
            Command(command=["sh", "-c", command, FLOOR, *self.args], timeout=self.timeout)
        )
        if result.exit_code != 0:
            raise RuntimeError(
                f"GEM over pipes failed in {self.image}: {result.stderr.strip()[-800:]}"
            )
        return int(str(result.stdout).strip().splitlines()[-1])


async def batched_and_floor(
    num_envs: int,
    groups: int,
    seconds: float,
    base_url: str | None,
    rounds: int,
    floor_processes: int,
    floor_image: str,
    floor_cpus: float,
) -> dict[str, Any]:
    """:func:`batched_throughput` taking turns with its floor (``floor_processes`` 0: none)."""
    if not floor_processes:
        return await batched_throughput(num_envs, groups, seconds, base_url, rounds)
    floor = PipesFloor(num_envs, floor_processes, seconds, floor_image, floor_cpus, base_url)
    async with floor:
        figures = await batched_throughput(num_envs, groups, seconds, base_url, rounds, floor)
    figures["floor"] = f"GEM over pipes, {floor_processes} processes, {floor_image}"
    return figures


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
    floor_image: str = "rock-gem/python:3.11",
    floor_processes: int = 2,
    floor_cpus: float = 2.0,
    rounds: int = 1,
) -> dict[str, Any]:
    """Every figure; ``say`` reports progress. The batched figure's floor (GEM over pipes,
    ``floor_processes`` processes in a sandbox of ``floor_image`` and ``floor_cpus``) runs right
    after it (0 processes: no floor)."""
    figures: dict[str, Any] = {"env_id": ENV_ID, "through": base_url or "embedded"}
    say("make → first observation")
    figures["make_to_first_observation"] = make_to_first_observation(makes, base_url)
    say(f"step round trip ({steps} steps)")
    figures["step_round_trip"] = step_round_trip(steps, base_url)
    say(
        f"{num_envs} envs in {groups} groups stepped as batches for {seconds:g} s, {rounds} times"
        + (
            f", each followed by GEM over pipes in {floor_processes} processes"
            if floor_processes
            else ""
        )
    )
    figures["batched"] = asyncio.run(
        batched_and_floor(
            num_envs,
            groups,
            seconds,
            base_url,
            rounds,
            floor_processes,
            floor_image,
            floor_cpus,
        )
    )
    if base_url is None and idle_envs:
        say(f"memory of {idle_envs} idle envs")
        figures["idle_memory"] = idle_memory(idle_envs)
    return figures
