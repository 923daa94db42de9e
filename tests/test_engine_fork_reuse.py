"""A fork of a sandbox whose files have not changed since its latest snapshot starts from that
snapshot, with no new ``docker commit`` (capability ``snapshot_reuse``), on real Docker; any
change, a reset, or a file mapped shared and writable makes the fork take a new snapshot, and
the forks' files always equal the parent's at the call."""

from __future__ import annotations

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.manager import SandboxManager
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
#: Prints a file's content, or "gone".
SHOW = "cat {0} 2>/dev/null || echo gone"


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def engine(snapshot_engine):
    return snapshot_engine


async def _sh(engine: SandboxManager, sandbox_id: str, script: str) -> str:
    answer = await engine.rocklet(sandbox_id).execute(Command(command=["sh", "-c", script]))
    assert answer.exit_code == 0, answer.stderr
    return answer.stdout.strip()


async def _fork_shows(engine: SandboxManager, parent: str, path: str) -> tuple[str, str]:
    """Fork ``parent`` once: the snapshot's name and what the fork finds at ``path``."""
    snap, (child,) = await engine.fork(parent, 1)
    await engine.wait_until_running(child.sandbox_id, timeout=120)
    shown = await _sh(engine, child.sandbox_id, SHOW.format(path))
    await engine.stop(child.sandbox_id)
    return snap.name, shown


async def test_a_fork_of_an_unchanged_sandbox_starts_from_its_snapshot_with_its_files(engine):
    parent = str((await engine.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await _sh(engine, parent, "mkdir -p /work && echo prepared > /work/task && rm /etc/issue")
    snap = await engine.snapshot(parent)
    await _sh(engine, parent, "cat /work/task; ls /work")  # reading changes nothing
    forked, children = await engine.fork(parent, 2)
    assert forked.name == snap.name and forked.image == snap.image
    assert len(await engine.list_snapshots()) == 1
    for child in children:
        await engine.wait_until_running(child.sandbox_id, timeout=120)
        assert await _sh(engine, child.sandbox_id, SHOW.format("/work/task")) == "prepared"
        assert await _sh(engine, child.sandbox_id, SHOW.format("/etc/issue")) == "gone"
        await engine.stop(child.sandbox_id)
    await engine.stop(parent)


async def test_a_sandbox_left_idle_after_its_snapshot_still_forks_from_it(engine):
    """The rocklet warms its endpoints up once it has been idle for a while: that warm-up must
    not touch the sandbox's files, or a fork after a pause would take a new snapshot (CI: a
    tenant at its snapshot limit was refused such a fork)."""
    parent = str((await engine.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await _sh(engine, parent, "true")  # a command: the rocklet's full endpoints are loaded
    snap = await engine.snapshot(parent)  # at once: the warm-up has not run yet
    await anyio.sleep(2)  # idle: the warm-up runs now
    forked, (child,) = await engine.fork(parent, 1)
    assert forked.name == snap.name
    assert len(await engine.list_snapshots()) == 1
    await engine.stop(child.sandbox_id)
    await engine.stop(parent)


async def test_a_fork_after_a_write_a_deletion_or_a_reset_takes_a_new_snapshot(engine):
    parent = str((await engine.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await _sh(engine, parent, "echo one > /step")
    first, shown = await _fork_shows(engine, parent, "/step")
    assert shown == "one"
    assert await _fork_shows(engine, parent, "/step") == (first, "one")  # unchanged: reused

    await _sh(engine, parent, "echo two > /step")
    second, shown = await _fork_shows(engine, parent, "/step")
    assert second != first and shown == "two"

    await _sh(engine, parent, "rm /step")
    third, shown = await _fork_shows(engine, parent, "/step")
    assert third not in (first, second) and shown == "gone"

    await engine.reset(parent, snapshot=third)  # the same files, in a new unit
    fourth, shown = await _fork_shows(engine, parent, "/step")
    assert fourth not in (first, second, third) and shown == "gone"
    await engine.stop(parent)


# Maps /shared shared and writable, writes "mapped" in it, says so, and holds the mapping.
_MAPPER = """
import mmap, os, time
fd = os.open("/shared", os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[:6] = b"mapped"
open("/mapped-ready", "w").close()
time.sleep(3600)
"""


async def test_a_fork_while_a_file_is_mapped_shared_and_writable_takes_a_new_snapshot(engine):
    """Writes through such a mapping may stamp no change time: the runtime cannot tell the
    sandbox unchanged, so every fork copies its files again."""
    parent = str((await engine.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await engine.rocklet(parent).execute(
        Command(
            command=["sh", "-c", 'setsid python3 -c "$0" >/dev/null 2>&1 &', _MAPPER], timeout=30
        )
    )

    async def ready() -> bool:
        return await _sh(engine, parent, SHOW.format("/mapped-ready")) != "gone"

    assert await eventually_async(ready)
    first, shown = await _fork_shows(engine, parent, "/shared | head -c 6")
    assert shown == "mapped"
    second, _ = await _fork_shows(engine, parent, "/shared | head -c 6")
    assert second != first
    await engine.stop(parent)
