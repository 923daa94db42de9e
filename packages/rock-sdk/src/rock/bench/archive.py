"""``rock bench archive``: archive and restore a sandbox that wrote N MiB, beside their floor.

One run, in this process, on the embedded engine (rock-core's ``SandboxManager`` on the Docker
runtime) with an archive store:

1. a sandbox (kept after its stop) writes N MiB of random bytes and is stopped;
2. **the floor**: ``docker commit`` of that stopped container, then an upload of as many bytes
   as the archive will store, through the same store (``put`` of a file); both timed;
3. **archive**: ``SandboxManager.archive`` until ``archived``; the bytes stored are summed from
   the store; the engine's (this process's) resident memory is sampled every 20 ms throughout,
   its growth counted from just before (the store's client already made: a process pays for
   boto3's import once, not per archive);
4. **restore**: ``restart`` until the sandbox runs again, and the file is checked (its size).

Stores: ``s3`` (rock-archive-s3) on a moto S3 server this run starts on 127.0.0.1 unless
``--store-option endpoint=...`` points at one, or ``fs`` (a temporary folder). Goals (issue #10):
stored <= 1.1 x written; memory growth <= 64 MiB; archive and restore each <= 2 x the floor.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx

from rock.bench.rollout import machine_info
from rock_core.ports import listen_port

__all__ = ["ArchiveSettings", "run_archive"]

#: Issue #10's goals.
GOAL_STORED_RATIO = 1.1
GOAL_MEMORY_GROWTH_MB = 64
GOAL_FLOOR_RATIO = 2.0

_MiB = 1024 * 1024


@attrs.frozen(kw_only=True)
class ArchiveSettings:
    """What ``rock bench archive`` runs.

    :param mb: MiB the sandbox writes before it is archived.
    :param store: the archive store (``s3`` or ``fs``).
    :param store_options: the store's plugin table; for ``s3`` without ``endpoint`` a moto server is started.
    :param image: / ``memory`` / ``cpus``: the sandbox's.
    """

    mb: int = 200
    store: str = "s3"
    store_options: Mapping[str, Any] = attrs.field(factory=dict)
    image: str = "python:3.11"
    memory: str = "512m"
    cpus: float = 1.0


class _PeakRss:
    """This process's resident memory, sampled every 20 ms in a thread: the peak since :meth:`reset`."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def now(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self._page

    def reset(self) -> int:
        self.peak = self.now()
        return self.peak

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def _moto(say: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """moto's S3 server on 127.0.0.1 (no authentication), a bucket in it: the ``s3`` store's table."""
    try:
        import moto  # noqa: F401 - only to say what is missing
    except ImportError:
        raise RuntimeError(
            "the s3 store's benchmark starts moto's S3 server: pip install 'rock-archive-s3[testing]' "
            "(or pass --store-option endpoint=... for a running S3, or --store fs)"
        ) from None
    port = listen_port()
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(64 * 1024**3)},
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.put(
                    f"{endpoint}/rock-bench", timeout=2
                ).raise_for_status()  # creates the bucket
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(
                        f"moto's S3 server did not start: {log.read().decode(errors='replace')[-2000:]}"
                    ) from None
                time.sleep(0.1)
        say(f"moto's S3 server on {endpoint}")
        yield {
            "endpoint": endpoint,
            "bucket": "rock-bench",
            "region": "us-east-1",
            "access_key_id": "bench",
            "access_key_secret": "bench",
        }
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    with open(path, "rb") as source:
        while chunk := await anyio.to_thread.run_sync(source.read, 4 * _MiB):
            yield chunk


def _container_of(sandbox_id: str) -> str:
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    ids = done.stdout.split()
    if len(ids) != 1:
        raise RuntimeError(f"expected one container of sandbox {sandbox_id}, found {len(ids)}")
    return ids[0]


async def _stored_bytes(store: Any, key: str, parts: tuple[str, ...]) -> int:
    """The bytes the store holds of ``parts`` under ``key`` (the sandbox's archive key)."""
    total = 0
    for part in parts:
        async for chunk in await store.get(key, part):
            total += len(chunk)
    return total


async def _measure(
    settings: ArchiveSettings, table: Mapping[str, Any], say: Callable[[str], None]
) -> dict[str, Any]:
    from rock_core.actions import Command, SandboxStartRequest
    from rock_core.engine.archiving import PART_LOGS, PART_ROOTFS
    from rock_core.engine.config import EngineConfig
    from rock_core.engine.manager import SandboxManager
    from rock_core.models import NonBlankStr, NonNegativeInt, PositiveFloat, SizeStr
    from rock_core.plugins import Plugins
    from rock_core.states import State
    from rock_core.tenancy import archive_key

    plugins = Plugins.load()
    owner = plugins.registered_by("rock_register_archive_stores").get(
        settings.store, settings.store
    )
    config = EngineConfig(
        archive_store=NonBlankStr(settings.store),
        plugin_options={owner: dict(table)},
        reap_orphans=False,
    )
    written = settings.mb * _MiB
    figures: dict[str, Any] = {"written_mb": settings.mb, "store": settings.store}
    with _PeakRss() as rss, tempfile.TemporaryDirectory(prefix="rock-bench-archive-") as scratch:
        async with SandboxManager(config, plugins=plugins) as engine:
            store = engine.archive_store
            assert store is not None  # archive_store is set: the engine has made it
            request = SandboxStartRequest(
                image=NonBlankStr(settings.image),
                memory=SizeStr(settings.memory),
                cpus=PositiveFloat(settings.cpus),
                auto_delete_seconds=NonNegativeInt(3600),
            )
            status = await engine.start(request)
            sandbox_id = status.sandbox_id
            assert sandbox_id is not None
            say(f"sandbox {sandbox_id} writes {settings.mb} MiB")
            write = f"head -c {written} /dev/urandom > /root/written.bin && sync"
            result = await engine.rocklet(sandbox_id).execute(
                Command(command=["/bin/sh", "-c", write], timeout=600)
            )
            if result.exit_code != 0:
                raise RuntimeError(
                    f"writing {settings.mb} MiB in the sandbox failed: {result.stderr}"
                )
            await engine.stop(sandbox_id)

            say("floor: docker commit of the stopped container")
            committed = f"rock-bench-commit:{uuid.uuid4().hex[:12]}"
            began = time.perf_counter()
            subprocess.run(
                ["docker", "commit", _container_of(sandbox_id), committed],
                check=True,
                capture_output=True,
            )
            figures["docker_commit_seconds"] = round(time.perf_counter() - began, 2)
            subprocess.run(["docker", "rmi", committed], capture_output=True)

            # The store's client is made before the baseline (for s3, boto3's import and client
            # cost ~40 MiB once per process, not per archive): the growth is the archive's own.
            await store.exists(sandbox_id, PART_ROOTFS)
            say("archive")
            base = rss.reset()
            began = time.perf_counter()
            await engine.archive(sandbox_id)
            while (record := engine.get_record(sandbox_id)).state is State.ARCHIVING:
                await anyio.sleep(0.02)
            figures["archive_seconds"] = round(time.perf_counter() - began, 2)
            archive_peak = rss.peak
            if record.state is not State.ARCHIVED:
                raise RuntimeError(f"the archive failed: {record.reason}")
            stored = await _stored_bytes(store, archive_key(record), (PART_ROOTFS, PART_LOGS))
            figures["stored_mb"] = round(stored / _MiB, 1)
            figures["stored_ratio"] = round(stored / written, 4)

            say(f"floor: upload of {stored / _MiB:.0f} MiB through the same store")
            blob = Path(scratch) / "blob"
            with open(blob, "wb") as sink:
                left = stored
                while left > 0:
                    n = min(left, 4 * _MiB)
                    sink.write(secrets.token_bytes(n))
                    left -= n
            floor_id = f"bench-floor-{uuid.uuid4().hex[:12]}"
            began = time.perf_counter()
            await store.put(floor_id, PART_ROOTFS, _file_chunks(blob))
            figures["upload_seconds"] = round(time.perf_counter() - began, 2)
            await store.delete(floor_id)

            say("restore")
            rss.reset()
            began = time.perf_counter()
            await engine.restart(sandbox_id)
            await engine.wait_until_running(sandbox_id)
            figures["restore_seconds"] = round(time.perf_counter() - began, 2)
            restore_peak = rss.peak
            check = await engine.rocklet(sandbox_id).execute(
                Command(command=["stat", "-c", "%s", "/root/written.bin"])
            )
            figures["file_intact"] = check.exit_code == 0 and check.stdout.strip() == str(written)
            await engine.stop(sandbox_id)
            await engine.delete(sandbox_id)

    floor = figures["docker_commit_seconds"] + figures["upload_seconds"]
    figures["floor_seconds"] = round(floor, 2)
    figures["archive_to_floor"] = round(figures["archive_seconds"] / floor, 2) if floor else None
    figures["restore_to_floor"] = round(figures["restore_seconds"] / floor, 2) if floor else None
    figures["archive_memory_growth_mb"] = round((archive_peak - base) / _MiB, 1)
    figures["restore_memory_growth_mb"] = round((restore_peak - base) / _MiB, 1)
    figures["goals"] = {
        "stored_ratio": figures["stored_ratio"] <= GOAL_STORED_RATIO,
        "memory_growth": max(
            figures["archive_memory_growth_mb"], figures["restore_memory_growth_mb"]
        )
        <= GOAL_MEMORY_GROWTH_MB,
        "archive_to_floor": figures["archive_to_floor"] is not None
        and figures["archive_to_floor"] <= GOAL_FLOOR_RATIO,
        "restore_to_floor": figures["restore_to_floor"] is not None
        and figures["restore_to_floor"] <= GOAL_FLOOR_RATIO,
    }
    return figures


def run_archive(
    settings: ArchiveSettings, say: Callable[[str], None] = lambda _line: None
) -> dict[str, Any]:
    """Run the benchmark; return ``{"machine", "settings", "figures"}``.

    :raises RuntimeError: the store cannot be set up, or the sandbox, archive or restore failed.
    """
    with ExitStack() as stack:
        table = dict(settings.store_options)
        if settings.store == "s3" and "endpoint" not in table:
            table = {**stack.enter_context(_moto(say)), **table}
        elif settings.store == "fs" and "root" not in table:
            table["root"] = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="rock-bench-archives-")
            )
        figures = anyio.run(_measure, settings, table, say)
    return {
        "machine": machine_info(),
        "settings": {
            **attrs.asdict(settings),
            "store_options": {k: v for k, v in table.items() if "secret" not in k},
        },
        "figures": figures,
    }


def table_rows(figures: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, measured, goal) rows for the printed table."""
    return [
        ("written", f"{figures['written_mb']} MiB", ""),
        (
            "stored",
            f"{figures['stored_mb']} MiB ({figures['stored_ratio']} x)",
            f"<= {GOAL_STORED_RATIO} x",
        ),
        ("docker commit", f"{figures['docker_commit_seconds']} s", ""),
        ("upload of the same bytes", f"{figures['upload_seconds']} s", ""),
        (
            "archive",
            f"{figures['archive_seconds']} s ({figures['archive_to_floor']} x floor)",
            f"<= {GOAL_FLOOR_RATIO} x",
        ),
        (
            "restore",
            f"{figures['restore_seconds']} s ({figures['restore_to_floor']} x floor)",
            f"<= {GOAL_FLOOR_RATIO} x",
        ),
        (
            "engine memory growth",
            f"{figures['archive_memory_growth_mb']} / {figures['restore_memory_growth_mb']} MiB",
            f"<= {GOAL_MEMORY_GROWTH_MB} MiB",
        ),
        ("file intact after restore", str(figures["file_intact"]), "True"),
    ]
