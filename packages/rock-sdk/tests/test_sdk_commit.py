"""ROCK's commit (issue #25 point 5): a sandbox's files as a new image tag, in the background,
its status polled, on real Docker (embedded, and with ``ROCK_TEST_REMOTE=1`` through a real
admin); rl-rock 1.11's own SDK against rock's admin; tenancy through an admin with two keys.

The committed image holds the sandbox's files (not its processes), so a sandbox started from
the tag sees them. A bad tag is refused at once, naming it; a tag naming a registry is refused
unless the engine's ``commit_registries`` lists it (there is no registry here), naming the
setting; nothing is tagged then.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest

from rock.actions import Command
from rock.admin.auth import hash_key
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.actions import CommitPhase
from rock_core.errors import InvalidParameter, RockError

from .conftest import no_python_env

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


def _tag() -> str:
    return f"rock-commit-test:{uuid.uuid4().hex[:12]}"


async def _sh(sandbox: Sandbox, script: str) -> str:
    answer = await sandbox.execute(Command(command=["bash", "-c", script], timeout=60))
    assert answer.exit_code == 0, (script, answer.stdout, answer.stderr)
    return answer.stdout.strip()


def _remove_image(docker_client: Any, tag: str) -> None:
    try:
        docker_client.api.remove_image(tag, force=True)
    except docker.errors.ImageNotFound:
        pass


async def test_a_commit_makes_an_image_tag_that_new_sandboxes_start_from_with_the_files(
    engine: Any, small: dict[str, Any], docker_client: Any
) -> None:
    tag = _tag()
    parent = Sandbox(SandboxConfig(**small))
    await parent.start()
    child: Sandbox | None = None
    try:
        await _sh(parent, "mkdir -p /work && echo committed > /work/data.txt")
        status = await parent.commit(tag, "", "", timeout=120, interval=0.2)
        assert status is not None
        assert status.phase is CommitPhase.SUCCEEDED, status
        assert (status.sandbox_id, status.image_tag, status.exit_code) == (
            parent.sandbox_id,
            tag,
            0,
        )
        assert status.started_at and status.completed_at
        assert (await parent.get_commit_status()) == status
        assert docker_client.api.inspect_image(tag)["Id"]
        # Not one of the tenant's snapshots.
        assert all(s.image != tag for s in await parent.snapshots())
        child = Sandbox(SandboxConfig(**{**small, "image": tag}))
        await child.start()
        assert await _sh(child, "cat /work/data.txt") == "committed"
    finally:
        for sandbox in (child, parent):
            if sandbox is not None:
                await sandbox.stop()
        _remove_image(docker_client, tag)


async def test_a_bad_image_tag_is_refused_at_once_naming_it(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    try:
        for bad in ("Bad Tag!", "repo@sha256:abc", "rock-snapshot:mine"):
            with pytest.raises(InvalidParameter) as refused:
                await sandbox.commit_async(bad, "", "")
            assert "image_tag" in str(refused.value) and bad in str(refused.value)
    finally:
        await sandbox.stop()


async def test_a_push_is_refused_when_no_registry_is_configured_naming_the_setting(
    engine: Any, small: dict[str, Any], docker_client: Any
) -> None:
    tag = f"registry.example.com/team/env:{uuid.uuid4().hex[:8]}"
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    try:
        with pytest.raises(InvalidParameter) as refused:
            await sandbox.commit(tag, "user", "secret-password")
        message = str(refused.value)
        assert "commit_registries" in message and "registry.example.com" in message
        assert "secret-password" not in message
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.api.inspect_image(tag)
        with pytest.raises(RockError, match="STATUS_NOT_FOUND"):
            await sandbox.get_commit_status()
    finally:
        await sandbox.stop()


KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
TENANTS = (
    "[admin]\napi_keys = [\n"
    f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
    f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
    "]\n"
)


@pytest.fixture(scope="module")
def keyed_admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path_factory.mktemp("admin-commit"), config=TENANTS)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


async def test_another_tenants_sandbox_cannot_be_committed_nor_its_status_read(
    keyed_admin: Any, small: dict[str, Any], docker_client: Any
) -> None:
    def sandbox(key: str) -> Sandbox:
        headers = {"X-API-Key": key}
        # The keyed admin of its own, whichever admin the pass's `small` names.
        fields = {**small, "base_url": keyed_admin.url}
        return Sandbox(SandboxConfig(**fields, extra_headers=headers))

    tag = _tag()
    a = sandbox(KEY_A)
    await a.start()
    try:
        status = await a.commit(tag, "", "", timeout=120, interval=0.2)
        assert status is not None and status.phase is CommitPhase.SUCCEEDED, status
        b = sandbox(KEY_B)
        b._sandbox_id = a.sandbox_id
        unknown = sandbox(KEY_B)
        unknown._sandbox_id = "no-such-sandbox-" + uuid.uuid4().hex[:8]
        for call in (
            lambda s: s.commit_async(_tag(), "", ""),
            lambda s: s.get_commit_status(),
        ):
            with pytest.raises(RockError) as theirs:
                await call(b)
            with pytest.raises(RockError) as nobodys:
                await call(unknown)
            assert type(theirs.value) is type(nobodys.value)
            assert str(theirs.value).replace(str(a.sandbox_id), "X") == str(nobodys.value).replace(
                str(unknown.sandbox_id), "X"
            )
    finally:
        await a.stop()
        _remove_image(docker_client, tag)


RL_ROCK_SCRIPT = r"""
import asyncio, sys
from rock.actions import CommitPhase
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

url, tag = sys.argv[1], sys.argv[2]

async def main():
    sandbox = Sandbox(SandboxConfig(image="python:3.11", base_url=url, cpus=0.5, memory="256m"))
    await sandbox.start()
    try:
        await sandbox.arun("mkdir -p /work && echo from-rl-rock > /work/data.txt")
        status = await sandbox.commit(tag, "", "", timeout=120, interval=0.5)
        print("commit", status.phase.value, status.image_tag, status.exit_code)
        again = await sandbox.get_commit_status()
        print("status", again.phase.value)
        try:
            await sandbox.commit_async("registry.example.com/team/env:1", "user", "pw")
        except Exception as exc:
            print("push", "refused" if "commit_registries" in str(exc) else str(exc)[:300])
        else:
            print("push", "accepted")
        child = Sandbox(SandboxConfig(image=tag, base_url=url, cpus=0.5, memory="256m"))
        await child.start()
        try:
            out = await child.arun("cat /work/data.txt")
            print("child", out.output.strip())
        finally:
            await child.stop()
    finally:
        await sandbox.stop()

asyncio.run(main())
"""


def test_rl_rocks_own_sdk_commits_a_sandbox_to_an_image_tag_on_rocks_admin(
    rl_rock_python: str, admin: Any, docker_client: Any
) -> None:
    tag = _tag()
    try:
        done = subprocess.run(
            [rl_rock_python, "-c", RL_ROCK_SCRIPT, admin.url, tag],
            capture_output=True,
            text=True,
            timeout=400,
            env=no_python_env(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        assert lines.get("commit") == f"SUCCEEDED {tag} 0", done.stdout
        assert lines.get("status") == "SUCCEEDED", done.stdout
        assert lines.get("push") == "refused", done.stdout
        assert lines.get("child") == "from-rl-rock", done.stdout
        inspected = subprocess.run(
            ["docker", "image", "inspect", tag], capture_output=True, text=True, timeout=60
        )
        assert inspected.returncode == 0, inspected.stderr
    finally:
        _remove_image(docker_client, tag)


def test_the_registries_a_commit_may_push_to_come_from_the_config_file_or_the_environment(
    tmp_path: Any,
) -> None:
    from rock.admin.config import load_settings

    file = tmp_path / "rock.toml"
    file.write_text('[engine]\ncommit_registries = ["registry.example.com"]\n')
    assert load_settings(file, environ={}).engine.commit_registries == ("registry.example.com",)
    environ = {"ROCK_ENGINE_COMMIT_REGISTRIES": "registry.example.com, localhost:5000"}
    read = load_settings(None, environ=environ).engine.commit_registries
    assert read == ("registry.example.com", "localhost:5000")
    assert load_settings(None, environ={}).engine.commit_registries == ()
