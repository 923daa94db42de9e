"""Archive a stopped sandbox to S3 and bring it back with ``restart()``: ROCK's SDK case, on Docker
with moto's S3 server on 127.0.0.1, embedded and through a real admin.

The seed example: write ``/tmp/archive-marker.txt`` -> stop -> archive -> wait for ``archived``
-> the container is gone -> restart -> the file reads ``keep me``. The restart happens in a
second process: through the admin, a subprocess ``attach``-es and restarts; embedded, a
subprocess whose engine shares the first one's record store (``store_path``) does.

Then the failure paths that need real parts: S3 unreachable during an archive (a relay in front
of moto, closed and reopened), an object damaged in the bucket before a restore, an admin
killed with SIGKILL while it archives, and the errors of a missing store or a running sandbox.
Each mode is driven explicitly here, so the remote pass does not run this module again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import rock_archive_s3.testing as rock_archive_s3_testing
from rock.actions import ReadFileRequest, WriteFileRequest
from rock.sdk._drivers.embedded import EmbeddedDriver
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.engine.config import EngineConfig
from rock_core.errors import BadRequestRockError, NotSupported, RockError
from rock_core.testing import eventually_async

pytestmark = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="drives both modes itself; it already ran in the embedded pass",
)

PREFIX = "/apis/envs/sandbox/v1"
SMALL: dict[str, Any] = {"image": "python:3.11", "memory": "512m", "cpus": 0.5}


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def containers_of(docker_client: Any, sandbox_id: str) -> list[Any]:
    return docker_client.containers.list(
        all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"}, ignore_removed=True
    )


MARKER = "/tmp/archive-marker.txt"
KEPT = {**SMALL, "auto_delete_seconds": 3600}


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with rock_archive_s3_testing.MotoServer() as server:
        yield server


@pytest.fixture
def bucket(s3: Any) -> str:
    return s3.create_bucket(unique_id("bucket").lower())


def _objects(s3: Any, bucket: str, sandbox_id: str) -> list[str]:
    """The parts stored for ``sandbox_id``, whose archive key is ``<its tenant's digest>-<id>``."""
    listing = s3.client().list_objects_v2(Bucket=bucket, Prefix="rock-archives/")
    keys = [item["Key"].split("/") for item in listing.get("Contents", [])]
    return sorted(key[-1] for key in keys if len(key) == 3 and key[1].endswith(f"-{sandbox_id}"))


async def _wait_state(sandbox: Sandbox, *states: str, timeout: float = 120) -> Any:
    return await eventually_async(
        lambda: sandbox.get_status(include_all_states=True),
        until=lambda status: status.state.value in states,
        what=f"the sandbox {' or '.join(states)}",
        timeout=timeout,
        interval=0.2,
    )


async def _archived_with_marker(sandbox: Sandbox, docker_client: Any) -> str:
    """Start, write the marker, stop, archive; return the id once archived and its container gone."""
    await sandbox.start()
    await sandbox.write_file(WriteFileRequest(content="keep me", path=MARKER))
    await sandbox.stop()
    await sandbox.archive()
    status = await _wait_state(sandbox, "archived", "stopped")
    assert status.state.value == "archived", status.reason
    assert status.status["image_archive"].status.value == "success"
    assert status.status["log_archive"].status.value == "success"
    assert sandbox.sandbox_id is not None
    assert containers_of(docker_client, sandbox.sandbox_id) == []
    return sandbox.sandbox_id


def _second_process(script: str, env: dict[str, str] | None = None) -> str:
    """Run ``script`` in a fresh Python process; return what it printed (fail with its output)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"second process failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


RESTORE_SCRIPT = """
import asyncio, json
from rock.actions import ReadFileRequest
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
{setup}

async def main():
    sandbox = Sandbox(SandboxConfig(**json.loads({config!r})))
    await sandbox.attach({sandbox_id!r})
    await sandbox.restart()
    text = (await sandbox.read_file(ReadFileRequest(path={marker!r}))).content
    await sandbox.stop()
    await sandbox.delete()
    print(text)

asyncio.run(main())
"""


def test_archive_and_restart_through_the_admin_from_a_second_process(
    s3: Any, bucket: str, tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in s3.settings(bucket).items())
    server = launch_admin(
        tmp_path, config=f'[engine]\narchive_store = "s3"\n\n[plugins.archive-s3]\n{table}\n'
    )
    try:
        config = {**KEPT, "base_url": server.url}

        async def first() -> str:
            sandbox = Sandbox(SandboxConfig(**config))
            return await _archived_with_marker(sandbox, docker_client)

        sandbox_id = asyncio.run(first())
        assert _objects(s3, bucket, sandbox_id) == ["logs", "rootfs"]
        script = RESTORE_SCRIPT.format(
            setup="", config=json.dumps(config), sandbox_id=sandbox_id, marker=MARKER
        )
        assert _second_process(script) == "keep me"
        assert (
            _objects(s3, bucket, sandbox_id) == []
        )  # restored, then deleted: nothing left in the bucket
        assert containers_of(docker_client, sandbox_id) == []
    finally:
        stop_admin(server, docker_client)


def test_archive_and_restart_embedded_from_a_second_process_sharing_the_store(
    s3: Any, bucket: str, tmp_path: Path, docker_client: Any
) -> None:
    store_path = str(tmp_path / "records.db")
    engine_config = EngineConfig(
        store_path=store_path,
        archive_store="s3",
        plugin_options={"archive-s3": s3.settings(bucket)},
    )
    engine = EmbeddedDriver(engine_config)
    try:
        sandbox_id = asyncio.run(
            _archived_with_marker(Sandbox(SandboxConfig(**KEPT), engine=engine), docker_client)
        )
    finally:
        engine.close()  # the first process's engine ends; the archived sandbox stays in the store
    setup = (
        "from rock.sdk import configure_embedded_driver\n"
        "from rock_core.engine.config import EngineConfig\n"
        f"configure_embedded_driver(EngineConfig(store_path={store_path!r}, archive_store='s3', "
        f"plugin_options={{'archive-s3': {s3.settings(bucket)!r}}}))\n"
    )
    script = RESTORE_SCRIPT.format(
        setup=setup, config=json.dumps(SMALL), sandbox_id=sandbox_id, marker=MARKER
    )
    assert _second_process(script) == "keep me"
    assert _objects(s3, bucket, sandbox_id) == []
    assert containers_of(docker_client, sandbox_id) == []


class Relay:
    """A TCP relay on 127.0.0.1 in front of ``target``; :meth:`down` closes it (connections
    refused, as an unreachable endpoint), :meth:`up` opens it again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.port = 0
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._acceptor.start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None and self._acceptor is not None:
            # The thread that accepts closes the listener on its way out, no other: a number
            # closed while a thread is about to call accept() on it is soon another server's
            # listener, whose connections that thread would take (a CI flake of session 44).
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); a close alone does not
            self._acceptor.join(10)

    def _accept(self, listener: socket.socket) -> None:
        with listener:  # closed by this thread, once it no longer accepts (see down)
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return  # shut down
                upstream = socket.create_connection(self.target)
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_s3_unreachable_during_an_archive_leaves_it_stopped_and_a_retry_succeeds(
    s3: Any, bucket: str, docker_client: Any
) -> None:
    relay = Relay(("127.0.0.1", s3.port))
    settings = {
        **s3.settings(bucket),
        "endpoint": relay.endpoint,
        "max_attempts": 1,
        "connect_timeout": 2,
    }
    engine = EmbeddedDriver(
        EngineConfig(archive_store="s3", plugin_options={"archive-s3": settings})
    )

    async def scenario() -> None:
        sandbox = Sandbox(SandboxConfig(**KEPT), engine=engine)
        await sandbox.start()
        await sandbox.write_file(WriteFileRequest(content="keep me", path=MARKER))
        await sandbox.stop()
        relay.down()
        await sandbox.archive()
        status = await _wait_state(sandbox, "stopped")
        assert "archive failed" in (status.reason or "") and "endpoint" in (status.reason or ""), (
            status.reason
        )
        assert sandbox.sandbox_id is not None
        assert len(containers_of(docker_client, sandbox.sandbox_id)) == 1  # its container is kept
        relay.up()
        assert _objects(s3, bucket, sandbox.sandbox_id) == []
        await sandbox.archive()
        await _wait_state(sandbox, "archived")
        await sandbox.restart()
        assert (await sandbox.read_file(ReadFileRequest(path=MARKER))).content == "keep me"
        await sandbox.stop()

    try:
        asyncio.run(scenario())
    finally:
        relay.down()
        engine.close()


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_object_at_restore_leaves_it_archived(
    s3: Any, bucket: str, docker_client: Any, damage: str
) -> None:
    engine = EmbeddedDriver(
        EngineConfig(archive_store="s3", plugin_options={"archive-s3": s3.settings(bucket)})
    )

    async def scenario() -> None:
        sandbox = Sandbox(SandboxConfig(**KEPT), engine=engine)
        sandbox_id = await _archived_with_marker(sandbox, docker_client)
        client = s3.client()
        listing = client.list_objects_v2(Bucket=bucket, Prefix="rock-archives/")["Contents"]
        (key,) = [item["Key"] for item in listing if item["Key"].endswith(f"-{sandbox_id}/rootfs")]
        if damage == "missing":
            client.delete_object(Bucket=bucket, Key=key)
        else:
            data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            client.put_object(Bucket=bucket, Key=key, Body=data[: len(data) // 2])
        with pytest.raises(RockError, match="image_pull") as caught:
            await sandbox.restart()
        status = await sandbox.get_status(include_all_states=True)
        assert status.state.value == "archived"
        assert (status.reason or "").startswith("restore failed")
        assert (
            "missing" if damage == "missing" else "corrupt"
        ) in caught.value.message.lower() or "cut short" in caught.value.message
        assert containers_of(docker_client, sandbox_id) == []  # the half-made container is gone
        await sandbox.delete()
        assert _objects(s3, bucket, sandbox_id) == []

    try:
        asyncio.run(scenario())
    finally:
        engine.close()


def test_archive_is_refused_clearly_without_a_store_and_while_running(
    docker_client: Any, admin_launcher: Any, tmp_path: Path
) -> None:
    engine = EmbeddedDriver(EngineConfig())

    async def embedded() -> None:
        sandbox = Sandbox(SandboxConfig(**KEPT), engine=engine)
        await sandbox.start()
        with pytest.raises(BadRequestRockError, match="current state is running"):
            await sandbox.archive()
        await sandbox.stop()
        with pytest.raises(NotSupported, match="rock-archive-s3"):
            await sandbox.archive()
        assert (await sandbox.get_status(include_all_states=True)).state.value == "stopped"
        await sandbox.delete()

    try:
        asyncio.run(embedded())
    finally:
        engine.close()

    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            started = client.post(PREFIX + "/start", json=KEPT).json()["result"]
            sandbox_id = started["sandbox_id"]
            client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id})
            answer = client.post(f"{PREFIX}/sandboxes/{sandbox_id}/archive", json={}).json()
            assert answer["status"] == "Failed" and "rock-archive-s3" in answer["error"], answer
            client.post(PREFIX + "/delete", json={"sandbox_id": sandbox_id})
    finally:
        stop_admin(server, docker_client)


def test_an_admin_killed_while_archiving_leaves_it_archived_or_stopped(
    s3: Any, bucket: str, tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in s3.settings(bucket).items())
    config = f'[engine]\narchive_store = "s3"\n\n[plugins.archive-s3]\n{table}\n'
    server = launch_admin(tmp_path, config=config)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            sandbox_id = client.post(PREFIX + "/start", json=KEPT).json()["result"]["sandbox_id"]
            # Enough written that the archive is still running when the admin is killed.
            command = {
                "sandbox_id": sandbox_id,
                "command": "head -c 150000000 /dev/urandom > /tmp/big",
                "shell": True,
            }
            assert client.post(PREFIX + "/execute", json=command).json()["result"]["exit_code"] == 0
            client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id})
            assert (
                client.post(f"{PREFIX}/sandboxes/{sandbox_id}/archive", json={}).json()["status"]
                == "Success"
            )
            status = client.get(
                PREFIX + "/get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
            )
            assert status.json()["result"]["state"] == "archiving"
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(30)

        second = launch_admin(tmp_path, config=config)
        with httpx.Client(base_url=second.url, timeout=60) as client:
            result = client.get(
                PREFIX + "/get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
            ).json()["result"]
            assert result["state"] in ("archived", "stopped"), result
            if result["state"] == "stopped":
                assert "interrupted" in result["reason"]
                assert _objects(s3, bucket, sandbox_id) == []
                assert len(containers_of(docker_client, sandbox_id)) == 1
            else:
                assert containers_of(docker_client, sandbox_id) == []
            assert (
                client.post(PREFIX + "/delete", json={"sandbox_id": sandbox_id}).json()["status"]
                == "Success"
            )
        stop_admin(second, docker_client)
        assert _objects(s3, bucket, sandbox_id) == []
    finally:
        stop_admin(server, docker_client)
