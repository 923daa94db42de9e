"""How long a sandbox takes from ``create`` to a rocklet that answers, on the local Docker engine.

    uv run python packages/rock-docker/benchmarks/startup.py [--image python:3.11] [-n 10]

Prints the latencies of ``n`` sandboxes started one after another (min, p50, max) and the wall
time of ``n`` started at once, then removes every container it made. A measurement, not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import anyio
import httpx

from rock_core.models import SandboxSpec
from rock_core.sizes import MiB
from rock_core.testing import wait_for_rocklet
from rock_docker import DockerRuntime

LABEL = "rock.bench.run"


async def one(
    runtime: DockerRuntime, http: httpx.AsyncClient, image: str, labels: dict[str, str]
) -> float:
    """Create, start and wait for one sandbox; the seconds it took."""
    spec = SandboxSpec(
        image=image,
        memory=256 * MiB,
        cpus=1.0,
        disk=None,
        sandbox_id=f"bench-{uuid.uuid4().hex[:12]}",
    )
    began = time.perf_counter()
    handle = await runtime.create(spec, labels=labels)
    await runtime.start(handle)
    status = await runtime.inspect(handle)
    await wait_for_rocklet(http, f"http://{status.rocklet_host}:{status.rocklet_port}")
    return time.perf_counter() - began


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="python:3.11")
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    labels = {LABEL: uuid.uuid4().hex}
    async with DockerRuntime() as runtime, httpx.AsyncClient() as http:
        try:
            await one(
                runtime, http, args.image, labels
            )  # warm-up: builds the rocklet, primes caches
            sequential = [await one(runtime, http, args.image, labels) for _ in range(args.n)]
            times: list[float] = []

            async def timed() -> None:
                times.append(await one(runtime, http, args.image, labels))

            began = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(args.n):
                    tg.start_soon(timed)
            burst = time.perf_counter() - began
        finally:
            handles = await runtime.list(labels)
            async with anyio.create_task_group() as tg:
                for handle in handles:
                    tg.start_soon(runtime.remove, handle)
    print(
        f"create -> start -> rocklet answering, {args.n} sequential: "
        f"min {min(sequential):.3f}s  p50 {statistics.median(sequential):.3f}s  max {max(sequential):.3f}s"
    )
    print(
        f"{args.n} started concurrently: all answering after {burst:.3f}s "
        f"(per sandbox p50 {statistics.median(times):.3f}s, max {max(times):.3f}s)"
    )


if __name__ == "__main__":
    anyio.run(main)
