"""Snapshot and restore of a sandbox that wrote ``--mb`` MiB, beside ``docker commit`` of the same container.

    uv run python packages/rock-docker/benchmarks/snapshot.py [--image python:3.11] [--mb 200]

Writes the snapshot to a file (as a store would receive it), restores from that file, and
prints the bytes stored against the bytes written, the seconds of each step and of ``docker
commit`` of the same stopped container, and this process's peak memory. A measurement, not a
test: nothing here asserts a time. Removes every container and image it made.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator

import anyio

from rock_core.models import SandboxSpec
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet_client import new_http_client
from rock_core.sizes import MiB
from rock_core.testing import wait_for_rocklet
from rock_core.testing.fixtures import rocklet_call, rocklet_url
from rock_docker import DockerRuntime

LABEL = "rock.bench.run"
TOKEN = "rock-bench-snapshot"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="python:3.11")
    parser.add_argument("--mb", type=int, default=200)
    args = parser.parse_args()
    labels = {LABEL: uuid.uuid4().hex}
    written = args.mb * MiB
    spec = SandboxSpec(
        image=args.image,
        memory=512 * MiB,
        cpus=1.0,
        disk=None,
        sandbox_id=f"bench-{uuid.uuid4().hex[:12]}",
    )
    committed = f"rock-bench-commit:{uuid.uuid4().hex[:12]}"
    async with DockerRuntime() as runtime, new_http_client() as http:
        http.headers[TOKEN_HEADER] = TOKEN
        path = tempfile.mktemp(prefix="rock-snapshot-")
        try:
            handle = await runtime.create(spec, labels=labels, rocklet_token=TOKEN)
            await runtime.start(handle)
            url = rocklet_url(await runtime.inspect(handle))
            await wait_for_rocklet(http, url)
            write = f"head -c {written} /dev/urandom > /root/written.bin"
            await rocklet_call(
                http,
                url,
                "/execute",
                {"command": ["/bin/sh", "-c", write], "shell": False, "timeout": 600},
            )
            await runtime.stop(handle, timeout=5)

            began = time.perf_counter()
            stored = 0
            with open(path, "wb") as sink:
                async for chunk in await runtime.snapshot(handle):
                    sink.write(chunk)
                    stored += len(chunk)
            snapshot_s = time.perf_counter() - began

            began = time.perf_counter()
            subprocess.run(
                ["docker", "commit", handle.unit_id, committed], check=True, capture_output=True
            )
            commit_s = time.perf_counter() - began
            await runtime.remove(handle)

            async def from_file() -> AsyncIterator[bytes]:
                with open(path, "rb") as source:
                    while chunk := source.read(1 << 20):
                        yield chunk

            began = time.perf_counter()
            restored = await runtime.restore(spec, from_file(), labels=labels, rocklet_token=TOKEN)
            restore_s = time.perf_counter() - began
            began = time.perf_counter()
            await runtime.start(restored)
            await wait_for_rocklet(http, rocklet_url(await runtime.inspect(restored)))
            start_s = time.perf_counter() - began
        finally:
            for unit in await runtime.list(labels):
                await runtime.remove(unit)
            subprocess.run(["docker", "rmi", committed], capture_output=True)
            if os.path.exists(path):
                os.unlink(path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"written       {written / MiB:9.1f} MiB")
    print(f"stored        {stored / MiB:9.1f} MiB  ({stored / written:.4f} x written)")
    print(f"snapshot      {snapshot_s:9.2f} s")
    print(f"docker commit {commit_s:9.2f} s  (same container)")
    print(f"restore       {restore_s:9.2f} s  (+ {start_s:.2f} s to a rocklet that answers)")
    print(f"peak memory   {peak:9.0f} MiB  (this process)")


if __name__ == "__main__":
    anyio.run(main)
