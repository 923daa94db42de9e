"""The batch RL rollout: rock's main job, and a benchmark comparable to published figures.

Each episode gets its own fresh sandbox (nothing shared) and plays a tiny agentic-RL loop:

1. write ``shipping.py`` with a boundary bug (``return 0 if total > 99 else 10``) and a
   three-case unittest ``test_shipping.py``; record ``ready``;
2. run the tests: they must FAIL (else the episode is invalid);
3. apply the fix (``>`` → ``>=``, a stand-in for a model's action);
4. run the tests again: they must PASS; reward 1; record ``reward``;
5. remove the sandbox.

Every episode is reported; a run with any failed check fails as a whole. Metric names follow
the published demo (``reference/rollout-benchmark.md``): ``batch_to_all_ready_seconds``,
``sandbox_to_ready_p50_seconds`` / ``p95`` / ``max``, ``batch_to_all_rewards_seconds``,
``client_job_complete_seconds``.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import attrs

__all__ = [
    "EpisodeResult",
    "RolloutSettings",
    "run_docker_baseline",
    "run_rollout",
    "summarize",
    "percentile",
    "machine_info",
]

WORKDIR = "/tmp/episode"

SHIPPING = """\
def shipping(total):
    \"\"\"Shipping cost for an order: free from 99 on.\"\"\"
    return 0 if total > 99 else 10
"""

TEST_SHIPPING = """\
import unittest

from shipping import shipping


class ShippingTest(unittest.TestCase):
    def test_below_threshold_pays(self):
        self.assertEqual(shipping(98), 10)

    def test_threshold_is_free(self):
        self.assertEqual(shipping(99), 0)

    def test_above_threshold_is_free(self):
        self.assertEqual(shipping(100), 0)


if __name__ == "__main__":
    unittest.main()
"""


@attrs.frozen(kw_only=True)
class RolloutSettings:
    """What to run: ``count`` episodes, at most ``parallelism`` at a time, in ``image``."""

    count: int
    parallelism: int
    image: str = "python:3.11"
    memory: str = "512m"
    cpus: float = 1.0
    startup_timeout: float = 300.0
    #: Sandboxes the engine keeps started ahead of the batch (0: every episode starts cold).
    warm_pool: int = 0

    def sandbox_config(self) -> Any:
        """The :class:`~rock.sdk.sandbox.config.SandboxConfig` every episode's sandbox is made from."""
        from rock.sdk.sandbox.config import SandboxConfig

        return SandboxConfig(
            image=self.image,
            memory=self.memory,
            cpus=self.cpus,
            startup_timeout=self.startup_timeout,
            experiment_id="rollout",
        )


@attrs.define(kw_only=True)
class EpisodeResult:
    """One episode's timeline (seconds since the batch was submitted) and checks."""

    episode: int
    sandbox_id: str | None = None
    submitted_at: float | None = None
    sandbox_created_at: float | None = None
    ready_at: float | None = None
    reward_at: float | None = None
    removed_at: float | None = None
    baseline_exit_code: int | None = None
    test_exit_code: int | None = None
    reward: int = 0
    ok: bool = False
    error: str | None = None

    @property
    def sandbox_to_ready_seconds(self) -> float | None:
        """From asking for the sandbox to the episode being ready."""
        if self.ready_at is None or self.sandbox_created_at is None:
            return None
        return self.ready_at - self.sandbox_created_at


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) by linear interpolation; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


async def _episode(n: int, settings: RolloutSettings, t0: float, result: EpisodeResult) -> Any:
    from rock.sdk.sandbox.client import Sandbox
    from rock_core.actions import Command

    def at() -> float:
        return time.perf_counter() - t0

    result.sandbox_created_at = at()
    sandbox = Sandbox(settings.sandbox_config())
    try:
        await sandbox.start()
        result.sandbox_id = sandbox.sandbox_id
        for name, text in (("shipping.py", SHIPPING), ("test_shipping.py", TEST_SHIPPING)):
            written = await sandbox.write_file_by_path(text, f"{WORKDIR}/{name}")
            if not written.success:
                raise RuntimeError(f"could not write {name}: {written.message}")
        result.ready_at = at()

        run_tests = Command(command=["python3", "-B", "test_shipping.py"], cwd=WORKDIR, timeout=120)
        baseline = await sandbox.execute(run_tests)
        result.baseline_exit_code = baseline.exit_code
        if baseline.exit_code == 0:
            raise RuntimeError("invalid episode: the tests passed before the fix")
        patch = await sandbox.execute(
            Command(
                command=["sed", "-i", "s/total > 99/total >= 99/", "shipping.py"],
                cwd=WORKDIR,
                timeout=60,
            )
        )
        if patch.exit_code != 0:
            raise RuntimeError(f"the fix could not be applied: {patch.stderr.strip()}")
        test = await sandbox.execute(run_tests)
        result.test_exit_code = test.exit_code
        if test.exit_code != 0:
            raise RuntimeError(
                f"the tests still fail after the fix:\n{test.stderr.strip()[-2000:]}"
            )
        result.reward = 1
        result.reward_at = at()
        result.ok = True
    except Exception as exc:  # every episode is reported, with what went wrong
        result.error = f"{type(exc).__name__}: {exc}"
        if os.environ.get("ROCK_BENCH_TRACEBACK"):
            traceback.print_exc()
    finally:
        await sandbox.stop()  # the default policy then removes it (in the background)
    return sandbox


async def _wait_removed(
    sandbox: Any, t0: float, result: EpisodeResult, timeout: float = 120.0
) -> None:
    """Wait until the sandbox is gone (state ``deleted``) and record when."""
    from rock.sdk.common.exceptions import RockException

    deadline = time.perf_counter() + timeout
    while sandbox.sandbox_id is not None and time.perf_counter() < deadline:
        try:
            status = await sandbox.get_status(include_all_states=True)
        except RockException:
            break
        if status.state is not None and status.state.value == "deleted":
            break
        await asyncio.sleep(0.1)
    result.removed_at = time.perf_counter() - t0


async def run_rollout(
    settings: RolloutSettings, on_progress: Callable[[EpisodeResult], None] | None = None
) -> tuple[list[EpisodeResult], float]:
    """Run the batch; return each episode's result and the client's total seconds."""
    # A trainer imports the SDK before its batch; so does this, before the clock starts (the
    # floor, one `docker run` per episode, pays no Python imports either).
    import rock.actions  # noqa: F401
    import rock.sdk.sandbox.client  # noqa: F401

    results = [EpisodeResult(episode=i) for i in range(settings.count)]
    limit = asyncio.Semaphore(settings.parallelism)
    t0 = time.perf_counter()

    async def one(result: EpisodeResult) -> None:
        result.submitted_at = time.perf_counter() - t0
        async with limit:
            sandbox = await _episode(result.episode, settings, t0, result)
        # The next episode may start while this sandbox's container is being removed; the batch
        # is complete only once every sandbox is gone. A start that failed left no container to
        # wait for (its record stays, stopped, with the failure).
        if result.sandbox_id is not None:
            await _wait_removed(sandbox, t0, result)
        else:
            result.removed_at = time.perf_counter() - t0
        if on_progress is not None:
            on_progress(result)

    await asyncio.gather(*(one(r) for r in results))
    return results, time.perf_counter() - t0


# The same episode as one `docker run`: the files come in the environment, the checks are the
# script's exit code (3: the tests passed before the fix, an invalid episode).
_BASELINE_SCRIPT = f"""set -e
mkdir -p {WORKDIR} && cd {WORKDIR}
printf '%s' "$SHIPPING" > shipping.py
printf '%s' "$TEST_SHIPPING" > test_shipping.py
if python3 -B test_shipping.py 2>/dev/null; then exit 3; fi
sed -i 's/total > 99/total >= 99/' shipping.py
python3 -B test_shipping.py 2>/dev/null
"""


async def run_docker_baseline(settings: RolloutSettings) -> tuple[list[float | None], float]:
    """The floor: each episode as one ``docker run --rm`` doing the same work (same image,
    memory and CPUs, ``parallelism`` at a time). Return each episode's seconds from the batch's
    submission to its reward (``None`` if it failed), and the seconds until the last container
    is gone."""
    docker = "docker"
    limit = asyncio.Semaphore(settings.parallelism)
    t0 = time.perf_counter()

    async def one() -> float | None:
        async with limit:
            process = await asyncio.create_subprocess_exec(
                docker,
                "run",
                "--rm",
                f"--memory={settings.memory}",
                f"--memory-swap={settings.memory}",
                f"--cpus={settings.cpus:g}",
                "-e",
                "SHIPPING",
                "-e",
                "TEST_SHIPPING",
                settings.image,
                "sh",
                "-c",
                _BASELINE_SCRIPT,
                env={**os.environ, "SHIPPING": SHIPPING, "TEST_SHIPPING": TEST_SHIPPING},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            code = await process.wait()
        return time.perf_counter() - t0 if code == 0 else None

    rewards = await asyncio.gather(*(one() for _ in range(settings.count)))
    return list(rewards), time.perf_counter() - t0


def machine_info() -> dict[str, Any]:
    """The machine a bench ran on, for its results document."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def summarize(
    settings: RolloutSettings, results: list[EpisodeResult], client_seconds: float
) -> dict[str, Any]:
    """The results document: the metrics, the settings, the machine, and a row per episode."""
    ready = [r.sandbox_to_ready_seconds for r in results if r.sandbox_to_ready_seconds is not None]
    all_ready = [r.ready_at for r in results]
    all_rewards = [r.reward_at for r in results]

    def last(values: list[float | None]) -> float | None:
        return (
            None
            if any(v is None for v in values) or not values
            else max(v for v in values if v is not None)
        )

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "episodes": len(results),
        "successful_episodes": sum(r.ok for r in results),
        "reward_sum": sum(r.reward for r in results),
        "batch_to_all_ready_seconds": rounded(last(all_ready)),
        "sandbox_to_ready_p50_seconds": rounded(percentile(ready, 50)),
        "sandbox_to_ready_p95_seconds": rounded(percentile(ready, 95)),
        "sandbox_to_ready_max_seconds": rounded(max(ready) if ready else None),
        "batch_to_all_rewards_seconds": rounded(last(all_rewards)),
        "client_job_complete_seconds": rounded(client_seconds),
        "settings": attrs.asdict(settings),
        "machine": machine_info(),
        "rows": [
            {
                **{
                    k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in attrs.asdict(r).items()
                },
                "sandbox_to_ready_seconds": rounded(r.sandbox_to_ready_seconds),
            }
            for r in results
        ],
    }
