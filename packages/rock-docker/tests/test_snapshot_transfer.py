"""DockerRuntime.export_snapshot_image / import_snapshot_image on a real Docker engine (issue #25
point 1): a snapshot image written to an archive store and made an image again from it has the
same files (contents, owners, modes, symlinks) over the same base image, its configuration (the
rocklet's secret blank), and the labels asked for; nothing of the base image is in the store.
"""

from __future__ import annotations

import io
import tarfile
import uuid

import anyio
import pytest

from rock_core.archive_fs import FilesystemArchiveStore
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.runtime import UnitHandle
from rock_core.sizes import MiB
from rock_core.testing import unique_sandbox_id
from rock_docker import DockerRuntime
from rock_docker._snapshot_transfer import TEMPORARY_PREFIX

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

TOKEN = "docker-transfer-test-token"
BIG = bytes(range(256)) * (8 * 1024)  # 2 MiB


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def runtime(tmp_path_factory):
    async with DockerRuntime(rocklet_dir=tmp_path_factory.mktemp("rocklet")) as runtime:
        yield runtime


def _changes() -> bytes:
    """The sandbox's changes, put into its container as a tar: a folder, a big file, a file of
    another owner and mode, a symlink."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add(name: str, data: bytes | None = None, **fields: object) -> None:
            info = tarfile.TarInfo(name)
            for key, value in fields.items():
                setattr(info, key, value)
            if data is None:
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        add("work", type=tarfile.DIRTYPE, mode=0o750)
        add("work/big.bin", BIG, mode=0o644)
        add("work/owned.txt", b"theirs\n", mode=0o640, uid=1234, gid=2345)
        add("work/link", type=tarfile.SYMTYPE, linkname="owned.txt")
    return buffer.getvalue()


def _files(docker_client, container_id: str) -> dict[str, tuple[int, int, int, str, bytes]]:
    """``/work`` of a container: each entry's mode, owner, group, link target and contents."""
    chunks, _ = docker_client.api.get_archive(container_id, "/work")
    found = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        for member in tar:
            data = tar.extractfile(member).read() if member.isreg() else b""
            found[member.name] = (
                member.mode & 0o7777,
                member.uid,
                member.gid,
                member.linkname,
                data,
            )
    return found


async def test_a_snapshot_image_goes_through_the_archive_store_and_comes_back_whole(
    runtime, run_labels, docker_client, tmp_path
):
    # A sandbox's container, never started (its changes put in with Docker's archive call).
    sandbox_id = unique_sandbox_id("transfer")
    created = await anyio.to_thread.run_sync(
        lambda: docker_client.api.create_container(
            IMAGE,
            command=["true"],
            name=sandbox_id,
            environment={TOKEN_ENV: TOKEN},
            labels=run_labels,
            host_config=docker_client.api.create_host_config(network_mode="none"),
        )
    )
    handle = UnitHandle(runtime=runtime.name, unit_id=created["Id"], sandbox_id=sandbox_id)
    made: list[str] = []
    try:
        await anyio.to_thread.run_sync(
            lambda: docker_client.api.put_archive(handle.unit_id, "/", _changes())
        )
        name = f"transfer-{uuid.uuid4().hex[:8]}"
        snap = await runtime.snapshot_image(
            handle,
            labels={"rock.snapshot.name": name, "rock.snapshot.test": "origin"},
            strip_env=[TOKEN_ENV],
            changes=True,
        )
        made.append(snap.image_id)
        store = FilesystemArchiveStore(root=tmp_path / "store")
        await store.put("snap", "rootfs", await runtime.export_snapshot_image(snap))
        stored = (tmp_path / "store" / "snap" / "rootfs").stat().st_size
        assert len(BIG) < stored < len(BIG) + (1 * MiB)  # the changes, not the base image

        back = await runtime.import_snapshot_image(
            await store.get("snap", "rootfs"), labels={"rock.snapshot.test": "imported"}
        )
        made.append(back.image_id)
        assert back.image_id != snap.image_id and back.reference.startswith("rock-snapshot:")
        assert back.labels["rock.snapshot.name"] == name  # kept from the snapshot
        assert back.labels["rock.snapshot.test"] == "imported"  # the import's, over it
        assert back.created == pytest.approx(snap.created)
        assert len(BIG) <= back.size < len(BIG) + (1 * MiB)
        config = (await anyio.to_thread.run_sync(docker_client.api.inspect_image, back.image_id))[
            "Config"
        ]
        assert f"{TOKEN_ENV}=" in config["Env"] and not any(TOKEN in e for e in config["Env"])
        base = await anyio.to_thread.run_sync(docker_client.api.inspect_image, IMAGE)
        assert config["Cmd"] == base["Config"]["Cmd"]

        def files_of(image_id: str) -> dict[str, tuple[int, int, int, str, bytes]]:
            container = docker_client.api.create_container(image_id, command=["true"])
            try:
                return _files(docker_client, container["Id"])
            finally:
                docker_client.api.remove_container(container["Id"], force=True)

        original = await anyio.to_thread.run_sync(files_of, snap.image_id)
        again = await anyio.to_thread.run_sync(files_of, back.image_id)
        assert again == original
        assert original["work/owned.txt"][:3] == (0o640, 1234, 2345)
        assert original["work/link"][3] == "owned.txt"
        assert original["work/big.bin"][4] == BIG
        # The containers export and import made for a moment are gone.
        assert not await anyio.to_thread.run_sync(
            lambda: docker_client.containers.list(all=True, filters={"name": TEMPORARY_PREFIX})
        )
    finally:
        await runtime.remove(handle)
        for image_id in reversed(made):
            await runtime.delete_snapshot_image(image_id)
