"""DockerRuntime.snapshot / restore on a real Docker engine (issue #10 point 4).

A snapshot holds what the sandbox changed on top of its image (files, owners, modes, symlinks,
deletions), not the image; restore makes a container like a start would, puts the changes back,
and the deletions are done before the rocklet answers.
"""

from __future__ import annotations

import hashlib
import uuid

import anyio
import docker.errors
import pytest

from rock_core.errors import ImagePullFailed, InvalidParameter, RuntimeFailure
from rock_core.models import PullPolicy, SandboxSpec, UnitState
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet_client import new_http_client
from rock_core.sizes import MiB
from rock_core.testing import unique_sandbox_id, wait_for_rocklet
from rock_core.testing.fixtures import rocklet_call, rocklet_url
from rock_docker import DockerRuntime
from rock_docker._snapshot import SnapshotCorrupt

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

TOKEN = "docker-snapshot-test-token"

# What the sandbox does to its files: every kind of change a restore must bring back.
CHANGES = r"""
set -e
mkdir -p /root/work/dir/sub /root/work/empty
printf 'hello\n' > /root/work/dir/sub/file.txt
printf '#!/bin/sh\necho ran\n' > /root/work/run.sh && chmod 0755 /root/work/run.sh
printf 'theirs\n' > /root/work/owned && chown 1234:2345 /root/work/owned && chmod 0640 /root/work/owned
chmod 0700 /root/work/empty
ln -s dir/sub/file.txt /root/work/link
ln -s /nowhere /root/work/dangling
printf 'appended\n' >> /etc/issue
chmod 0700 /srv && chown 42:43 /opt
rm /etc/motd
rm -rf /usr/share/doc/tar
rm -rf /usr/share/doc/bash && mkdir /usr/share/doc/bash && printf 'new\n' > /usr/share/doc/bash/new
"""
# What must read the same before the snapshot and after the restore.
MANIFEST = r"""
cd / && for p in $(find /root/work /usr/share/doc/bash | sort) /etc/issue /srv /opt; do
  stat -c '%n %a %u:%g %F %s' "$p"
  if [ -L "$p" ]; then readlink "$p"; elif [ -f "$p" ]; then sha256sum < "$p"; fi
done
"""


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def runtime(tmp_path_factory):
    async with DockerRuntime(rocklet_dir=tmp_path_factory.mktemp("rocklet")) as runtime:
        yield runtime


@pytest.fixture
async def http():
    async with new_http_client() as client:
        client.headers[TOKEN_HEADER] = TOKEN
        yield client


def spec(**fields) -> SandboxSpec:
    values = {
        "image": IMAGE,
        "memory": 512 * MiB,
        "cpus": 1.0,
        "disk": None,
        "sandbox_id": unique_sandbox_id("rocks"),
    }
    values.update(fields)
    return SandboxSpec(**values)


def labels_for(run_labels, the_spec):
    return {**run_labels, "rock.sandbox_id": the_spec.sandbox_id}


async def launch(runtime, run_labels, http, the_spec):
    handle = await runtime.create(
        the_spec, labels=labels_for(run_labels, the_spec), rocklet_token=TOKEN
    )
    return handle, await ready(runtime, handle, http)


async def ready(runtime, handle, http):
    await runtime.start(handle)
    url = rocklet_url(await runtime.inspect(handle))
    await wait_for_rocklet(http, url)
    return url


async def sh(http, url, script, timeout=120):
    answer = await rocklet_call(
        http,
        url,
        "/execute",
        {"command": ["/bin/sh", "-c", script], "shell": False, "timeout": timeout},
    )
    assert answer["exit_code"] == 0, answer
    return answer["stdout"]


async def drain(stream, keep=True):
    """The stream's bytes (or only their count and digest, with ``keep=False``)."""
    data, size, digest = bytearray(), 0, hashlib.sha256()
    async for chunk in stream:
        size += len(chunk)
        digest.update(chunk)
        if keep:
            data += chunk
    return bytes(data) if keep else (size, digest.hexdigest())


async def chunks_of(data, size=64 * 1024):
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def stopped_snapshot(runtime, handle):
    await runtime.stop(handle, timeout=5)
    return await drain(await runtime.snapshot(handle))


async def test_restore_brings_back_files_owners_modes_symlinks_and_deletions(
    runtime, run_labels, http, docker_client
):
    """Every change is back after snapshot -> remove -> restore -> start; the deleted files stay
    deleted; the container is made as a new one would be (labels, limits, hardening, secret)."""
    the_spec = spec(env={"GREETING": "hi"})
    handle, url = await launch(runtime, run_labels, http, the_spec)
    await sh(http, url, CHANGES)
    before = await sh(http, url, MANIFEST)
    assert "/root/work/owned 640 1234:2345 regular file 7" in before
    first = await anyio.to_thread.run_sync(docker_client.api.inspect_container, handle.unit_id)

    await runtime.stop(handle, timeout=5)
    logs = await drain(await runtime.snapshot_logs(handle))
    assert logs.strip(), "the logs part is empty"
    snapshot = await drain(await runtime.snapshot(handle))
    assert len(snapshot) < 1 * MiB, (
        f"the snapshot holds more than the changes: {len(snapshot)} bytes"
    )
    await runtime.remove(handle)

    restored = await runtime.restore(
        the_spec, chunks_of(snapshot), labels=labels_for(run_labels, the_spec), rocklet_token=TOKEN
    )
    assert (await runtime.inspect(restored)).state is UnitState.CREATED
    url = await ready(runtime, restored, http)
    assert await sh(http, url, MANIFEST) == before
    gone = await sh(
        http,
        url,
        "for p in /etc/motd /usr/share/doc/tar /usr/share/doc/bash/copyright /.rock-restore/deleted; "
        'do [ -e "$p" ] && echo "$p is back"; done; true',
    )
    assert gone == ""
    assert (await sh(http, url, "/root/work/run.sh")).strip() == "ran"
    assert "appended" in await sh(http, url, "cat /etc/issue")

    again = await anyio.to_thread.run_sync(docker_client.api.inspect_container, restored.unit_id)
    socket_label = "rock.docker.rocklet_socket"
    assert {k: v for k, v in again["Config"]["Labels"].items() if k != socket_label} == {
        k: v for k, v in first["Config"]["Labels"].items() if k != socket_label
    }
    assert again["Config"]["Labels"][socket_label] != first["Config"]["Labels"][socket_label], (
        "the socket is not fresh"
    )
    assert again["Config"]["Env"] == first["Config"]["Env"]  # the secret and the spec's env
    for key in (
        "Memory",
        "MemorySwap",
        "NanoCpus",
        "PidsLimit",
        "SecurityOpt",
        "CapAdd",
        "CapDrop",
        "Ulimits",
        "Init",
        "Privileged",
        "NetworkMode",
    ):
        assert again["HostConfig"][key] == first["HostConfig"][key], key
    assert restored.security == handle.security


async def test_a_64_mb_write_makes_a_snapshot_of_at_most_1_1_times_that(runtime, run_labels, http):
    """The snapshot holds the written bytes, not the image (the test image, about 190 MB, would
    make it four times the write); the file comes back whole."""
    the_spec = spec()
    handle, url = await launch(runtime, run_labels, http, the_spec)
    written = 64 * MiB
    digest = await sh(
        http,
        url,
        f"head -c {written // 2} /dev/urandom > /root/a.bin && mkdir -p /root/b && "
        f"head -c {written // 2} /dev/urandom > /root/b/b.bin && cat /root/a.bin /root/b/b.bin | sha256sum",
    )
    await runtime.stop(handle, timeout=5)
    size, _ = await drain(await runtime.snapshot(handle), keep=False)
    assert written <= size <= 1.1 * written, f"{size} bytes stored for {written} written"

    # Restore streams it back in bounded pieces, from a second snapshot read as it is made.
    stream = await runtime.snapshot(handle)
    other = spec(sandbox_id=unique_sandbox_id("rocks"))
    restored = await runtime.restore(
        other, stream, labels=labels_for(run_labels, other), rocklet_token=TOKEN
    )
    await runtime.remove(handle)
    url = await ready(runtime, restored, http)
    assert await sh(http, url, "cat /root/a.bin /root/b/b.bin | sha256sum") == digest


async def test_a_cut_or_corrupted_snapshot_restores_nothing(runtime, run_labels, http):
    """A snapshot cut short or with a flipped byte fails with the reason, and leaves no container."""
    the_spec = spec()
    handle, url = await launch(runtime, run_labels, http, the_spec)
    await sh(http, url, "head -c 3000000 /dev/urandom > /root/data && rm /etc/motd")
    snapshot = await stopped_snapshot(runtime, handle)
    await runtime.remove(handle)
    middle = len(snapshot) // 2
    broken = {
        "cut": snapshot[:middle],
        "flipped": snapshot[:middle] + bytes([snapshot[middle] ^ 1]) + snapshot[middle + 1 :],
        "not a snapshot": b"PK\x03\x04" + snapshot,
    }
    for what, data in broken.items():
        with pytest.raises(
            SnapshotCorrupt, match=f"snapshot of sandbox {the_spec.sandbox_id} cannot be restored"
        ) as caught:
            await runtime.restore(
                the_spec,
                chunks_of(data),
                labels=labels_for(run_labels, the_spec),
                rocklet_token=TOKEN,
            )
        assert caught.value.attempted == "restore", what
        assert await runtime.list(labels_for(run_labels, the_spec)) == [], (
            f"{what}: a container was left"
        )
    # The whole one still restores, under the same name.
    restored = await runtime.restore(
        the_spec, chunks_of(snapshot), labels=labels_for(run_labels, the_spec), rocklet_token=TOKEN
    )
    await runtime.remove(restored)


async def test_an_image_gone_at_restore_time_is_pulled_by_the_policy_or_named(
    runtime, run_labels, http, docker_client
):
    """The image is gone: pull ``never`` fails naming it; ``missing`` tries to pull it and fails
    with the registry's reason; no container is left either way."""
    image = f"127.0.0.1:9/rock-test/snapshot-gone:{uuid.uuid4().hex[:12]}"
    await anyio.to_thread.run_sync(lambda: docker_client.images.get(IMAGE).tag(image))
    the_spec = spec(image=image, pull=PullPolicy.NEVER)
    try:
        handle, url = await launch(runtime, run_labels, http, the_spec)
        await sh(http, url, "echo kept > /root/kept")
        snapshot = await stopped_snapshot(runtime, handle)
        await runtime.remove(handle)
    finally:
        await anyio.to_thread.run_sync(lambda: docker_client.images.remove(image))
    for policy in (PullPolicy.NEVER, PullPolicy.MISSING):
        with pytest.raises(ImagePullFailed) as caught:
            await runtime.restore(
                spec(image=image, pull=policy, sandbox_id=the_spec.sandbox_id),
                chunks_of(snapshot),
                labels=labels_for(run_labels, the_spec),
                rocklet_token=TOKEN,
            )
        message = str(caught.value)
        assert f"cannot restore sandbox {the_spec.sandbox_id}" in message and image in message, (
            message
        )
        assert caught.value.attempted == "restore"
        assert await runtime.list(labels_for(run_labels, the_spec)) == []


async def test_a_running_container_is_not_snapshotted(runtime, run_labels, http):
    """Only a stopped sandbox is snapshotted: its files do not change under the reading."""
    handle, _ = await launch(runtime, run_labels, http, spec())
    with pytest.raises(RuntimeFailure, match="while its container is running: stop it first"):
        await runtime.snapshot(handle)
    await runtime.remove(handle)


async def test_restore_refuses_a_spec_of_another_image(
    runtime, run_labels, http, docker_client, no_python_image
):
    """A snapshot's changes belong on its own image: a spec naming another is refused, and nothing made."""
    handle, _ = await launch(runtime, run_labels, http, spec())
    snapshot = await stopped_snapshot(runtime, handle)
    await runtime.remove(handle)
    other = spec(image=no_python_image)
    with pytest.raises(
        InvalidParameter, match=f"snapshotted on image {IMAGE}, not {no_python_image}"
    ):
        await runtime.restore(
            other, chunks_of(snapshot), labels=labels_for(run_labels, other), rocklet_token=TOKEN
        )
    with pytest.raises(docker.errors.NotFound):
        await anyio.to_thread.run_sync(docker_client.api.inspect_container, other.sandbox_id)
