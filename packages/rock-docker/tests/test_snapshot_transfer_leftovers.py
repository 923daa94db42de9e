"""What an admin that died in the middle of bringing a snapshot from the archive store leaves on
Docker, and the next one removes.

The import makes a temporary container (``rock-snapshot-io-<hex>``) of the snapshot's base image,
puts the files into it and commits it; it removes the container when the call ends. An admin
that dies before that leaves it behind; the admin that starts next on the same state must
remove it in its start-up sweep, as it removes a reset's leftovers.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.archive_fs import FilesystemArchiveStore
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.testing import eventually_async, unique_sandbox_id
from rock_docker._snapshot_transfer import TEMPORARY_PREFIX

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


class _StuckStore(FilesystemArchiveStore):
    """The filesystem store, but a part read gives its first chunk and then never more (the
    admin is killed while it waits)."""

    async def get(self, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        stream = await super().get(sandbox_id, part)

        async def first_then_stuck() -> AsyncIterator[bytes]:
            async for chunk in stream:
                yield chunk
                break
            await anyio.sleep_forever()

        return first_then_stuck()


def _config(tmp_path, run_labels) -> EngineConfig:
    return EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"io-leftover-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
        store_path=str(tmp_path / "rock.db"),
        remove_on_close=False,
        archive_store="fs",
        plugin_options={"archive-fs": {"root": str(tmp_path / "store")}},
    )


def _temporaries(docker_client) -> list[dict[str, Any]]:
    """The temporary containers as ``docker ps`` lists them (not inspected: one being written
    into is locked until the write ends)."""
    return docker_client.api.containers(all=True, filters={"name": TEMPORARY_PREFIX})


async def test_a_snapshot_import_container_left_by_an_admin_that_died_is_removed_at_the_next_start(
    tmp_path, run_labels, docker_client
):
    config = _config(tmp_path, run_labels)
    name = f"io-{secrets.token_hex(6)}"
    before = {c["Id"] for c in await anyio.to_thread.run_sync(_temporaries, docker_client)}
    async with SandboxManager(config) as first:
        core = first._core
        parent = str(
            (
                await first.start(
                    SandboxStartRequest(
                        image=IMAGE, memory="256m", cpus=0.5, sandbox_id=unique_sandbox_id("io")
                    )
                )
            ).sandbox_id
        )
        await first.rocklet(parent).execute(Command(command=["sh", "-c", "echo io > /io.txt"]))
        snap = await first.snapshot(parent, name, archive=True)
        await first.stop(parent)
        # A later day: the node's image of it is gone; the store's copy is read, and stalls.
        await anyio.to_thread.run_sync(lambda: docker_client.images.remove(snap.image, force=True))
        assert core.archive_store is not None
        core.archive_store = _StuckStore(root=str(tmp_path / "store"))
        request = SandboxStartRequest(image=IMAGE, memory="256m", cpus=0.5, snapshot=name)
        async with anyio.create_task_group() as tg:  # cancelled once the container is there
            tg.start_soon(first.start, request)
            made = await eventually_async(
                lambda: anyio.to_thread.run_sync(_temporaries, docker_client),
                until=lambda found: any(c["Id"] not in before for c in found),
            )
            (temporary,) = [c for c in made if c["Id"] not in before]
            # What the dying admin leaves: that container as it is (a twin, since the
            # cancel below removes the original as an admin that lived would).
            left = await anyio.to_thread.run_sync(
                lambda: docker_client.containers.create(
                    IMAGE,
                    ["true"],
                    name=f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}",
                    labels={**temporary["Labels"], **run_labels},
                )
            )
            tg.cancel_scope.cancel()

    def exists(container_id: str) -> bool:
        return bool(docker_client.api.containers(all=True, filters={"id": container_id}))

    async with SandboxManager(config) as second:
        await eventually_async(
            lambda: anyio.to_thread.run_sync(exists, left.id), until=lambda there: not there
        )
        await second.delete_snapshot(name)
