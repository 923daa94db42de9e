"""``rock bench e2b``: E2B's unmodified Python SDK against rock (rock-e2b's routes on the admin),
beside rock's own SDK, in the same run on the same admin (issue #29 point 5: E2B's figures within
1.2x of rock's own).

Two figures, for each SDK: create -> first command (``true``; E2B's SDK runs it as
``bash -l -c true``) latency over ``rounds`` sandboxes one after another (p50, p95), and a
rollout of ``parallel`` sandboxes at once, each created, run a command in and removed (the
better wall time of two, and each one's create -> first command). The two SDKs take turns,
round by round, so a machine's changing load falls on both alike. E2B's SDK runs in a virtual
environment of its own (``scripts/ensure-e2b-sdk.sh``) as a driver process asked one round at a
time, timed in it; rock's SDK runs in this process. One unmeasured warm-up sandbox goes first
for each SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rock.bench.rollout import percentile

__all__ = ["GOAL_RATIO", "run_e2b_bench"]

#: E2B's figures may be at most this many times rock's own.
GOAL_RATIO = 1.2

DRIVER = r"""
import concurrent.futures, json, sys, time
from e2b import Sandbox

image = sys.argv[1]


def one():
    t = time.perf_counter()
    sbx = Sandbox.create(template=image, timeout=600)
    try:
        result = sbx.commands.run("true")
        first = time.perf_counter() - t
        assert result.exit_code == 0, result
    finally:
        sbx.kill()
    return first


# One line asked, one line answered: "one" -> [seconds]; "parallel N" -> [seconds...] + wall.
for line in sys.stdin:
    asked = line.split()
    if asked[0] == "one":
        answer = {"firsts": [one()]}
    else:
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(int(asked[1])) as pool:
            firsts = list(pool.map(lambda _: one(), range(int(asked[1]))))
        answer = {"firsts": firsts, "wall": time.perf_counter() - t}
    print(json.dumps(answer), flush=True)
"""


async def _rock_one(url: str, image: str) -> float:
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig
    from rock_core.actions import Command

    t = time.perf_counter()
    sandbox = Sandbox(SandboxConfig(base_url=url, image=image, auto_clear_seconds=600))
    try:
        await sandbox.start()
        result = await sandbox.execute(Command(command=["true"], timeout=60))
        first = time.perf_counter() - t
        if result.exit_code != 0:
            raise RuntimeError(f"`true` exited {result.exit_code}: {result.stderr}")
    finally:
        await sandbox.stop()
    return first


async def _rock_parallel(url: str, image: str, parallel: int) -> tuple[list[float], float]:
    t = time.perf_counter()
    firsts = await asyncio.gather(*(_rock_one(url, image) for _ in range(parallel)))
    return list(firsts), time.perf_counter() - t


class _Driver:
    """E2B's SDK in its own Python, asked one line at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def ask(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()
        answer = await self.process.stdout.readline()
        if not answer:
            assert self.process.stderr is not None
            err = await self.process.stderr.read()
            raise RuntimeError(f"E2B's SDK driver failed:\n{err.decode(errors='replace')[-3000:]}")
        found: dict[str, Any] = json.loads(answer)
        return found


async def _both(
    driver: _Driver, url: str, image: str, rounds: int, parallel: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each SDK's figures, their rounds taken in turn (so a machine's changing load falls on
    both alike): first the single sandboxes, then the parallel rollouts (twice each)."""
    rock: dict[str, Any] = {"first_command_s": [], "parallel_first_command_s": [], "walls": []}
    e2b: dict[str, Any] = {"first_command_s": [], "parallel_first_command_s": [], "walls": []}
    await _rock_one(url, image)  # warm-up, both
    await driver.ask("one")
    for n in range(rounds):
        if n % 2 == 0:
            rock["first_command_s"].append(await _rock_one(url, image))
            e2b["first_command_s"] += (await driver.ask("one"))["firsts"]
        else:
            e2b["first_command_s"] += (await driver.ask("one"))["firsts"]
            rock["first_command_s"].append(await _rock_one(url, image))
    for n in range(2):
        if n == 0:
            firsts, wall = await _rock_parallel(url, image, parallel)
            answer = await driver.ask(f"parallel {parallel}")
        else:
            answer = await driver.ask(f"parallel {parallel}")
            firsts, wall = await _rock_parallel(url, image, parallel)
        rock["parallel_first_command_s"] += firsts
        rock["walls"].append(wall)
        e2b["parallel_first_command_s"] += answer["firsts"]
        e2b["walls"].append(answer["wall"])
    for figures in (rock, e2b):
        figures["parallel_wall_s"] = sorted(figures.pop("walls"))[0]  # the better of two
    return rock, e2b


async def _figures(
    python: str, url: str, image: str, rounds: int, parallel: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(DRIVER)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "E2B_API_URL": f"{url}/e2b",
        "E2B_SANDBOX_URL": f"{url}/e2b/envd",
        "E2B_API_KEY": os.environ.get("ROCK_API_KEY") or "rock-bench",
    }
    process = await asyncio.create_subprocess_exec(
        python,
        handle.name,
        image,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        return await _both(_Driver(process), url, image, rounds, parallel)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        await process.wait()
        Path(handle.name).unlink(missing_ok=True)


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    def ms(values: list[float], q: float) -> float | None:
        found = percentile(values, q)
        return None if found is None else round(found * 1000, 1)

    return {
        "first_command_ms": {
            "p50": ms(raw["first_command_s"], 50),
            "p95": ms(raw["first_command_s"], 95),
        },
        "parallel_first_command_ms": {
            "p50": ms(raw["parallel_first_command_s"], 50),
            "max": ms(raw["parallel_first_command_s"], 100),
        },
        "parallel_wall_ms": round(raw["parallel_wall_s"] * 1000, 1),
    }


async def run_e2b_bench(
    *,
    rounds: int,
    parallel: int,
    image: str,
    e2b_python: str,
    url: str | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Both SDKs' figures and their ratios (``url``: an admin's; else one of this run's own)."""
    if not Path(e2b_python).exists():
        raise RuntimeError(
            f"no Python with E2B's SDK at {e2b_python} (make it with scripts/ensure-e2b-sdk.sh)"
        )
    if url is None:
        from rock.bench.admin import started_admin

        async with started_admin() as (own_url, _pid):
            return await run_e2b_bench(
                rounds=rounds,
                parallel=parallel,
                image=image,
                e2b_python=e2b_python,
                url=own_url,
                say=say,
            )
    say(
        f"rock's and E2B's SDKs in turn: {rounds} sandboxes one by one, then {parallel} at "
        f"once, twice ({url})"
    )
    rock_raw, e2b_raw = await _figures(e2b_python, url, image, rounds, parallel)
    rock, e2b = _summary(rock_raw), _summary(e2b_raw)
    first = e2b["first_command_ms"]["p50"] / rock["first_command_ms"]["p50"]
    wall = e2b["parallel_wall_ms"] / rock["parallel_wall_ms"]
    return {
        "bench": "e2b",
        "settings": {"rounds": rounds, "parallel": parallel, "image": image},
        "python": sys.version.split()[0],
        "figures": {
            "rock": rock,
            "e2b": e2b,
            "first_command_p50_ratio": round(first, 2),
            "parallel_wall_ratio": round(wall, 2),
            "goal_ratio": GOAL_RATIO,
            "goal_met": first <= GOAL_RATIO and wall <= GOAL_RATIO,
        },
    }
