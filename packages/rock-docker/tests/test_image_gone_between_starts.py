"""An image the runtime has seen is not asked for again at every create, yet one removed since
is noticed: the next create meets its pull policy as if it had never been there."""

from __future__ import annotations

import uuid

import anyio
import pytest

from rock_core.errors import ImagePullFailed
from rock_core.models import PHASE_IMAGE_PULL, PhaseStatus, PullPolicy, SandboxSpec
from rock_core.sizes import MiB
from rock_core.testing import PhaseLog, unique_sandbox_id
from rock_docker import DockerRuntime

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _spec(image: str, pull: PullPolicy) -> SandboxSpec:
    return SandboxSpec(
        image=image,
        memory=256 * MiB,
        cpus=0.5,
        disk=None,
        sandbox_id=unique_sandbox_id("rockimg"),
        pull=pull,
    )


async def _create(runtime, run_labels, the_spec, phases):
    return await runtime.create(
        the_spec,
        labels={**run_labels, "rock.sandbox_id": the_spec.sandbox_id},
        rocklet_token="image-gone-test-token",
        on_phase=phases,
    )


async def test_an_image_removed_after_a_start_fails_the_next_start_by_its_pull_policy(
    tmp_path, run_labels, docker_client
):
    """A start with ``pull=never`` on an image that was there for the previous start but has been
    removed since says so (the pull policy), not a bare 'no such image' from the create."""
    tag = f"rock-test/gone:{uuid.uuid4().hex[:8]}"
    docker_client.images.get(IMAGE).tag(tag)
    async with DockerRuntime(rocklet_dir=tmp_path / "rocklet") as runtime:
        first = PhaseLog()
        handle = await _create(runtime, run_labels, _spec(tag, PullPolicy.NEVER), first)
        assert first.statuses(PHASE_IMAGE_PULL)[-1] is PhaseStatus.SUCCESS
        await runtime.remove(handle)
        await anyio.to_thread.run_sync(lambda: docker_client.images.remove(tag))

        again = PhaseLog()
        with pytest.raises(ImagePullFailed, match=f"{tag}: .*pull policy is 'never'"):
            await _create(runtime, run_labels, _spec(tag, PullPolicy.NEVER), again)
        assert again.statuses(PHASE_IMAGE_PULL)[-1] is PhaseStatus.FAILED


async def test_an_image_tagged_again_after_removal_starts_without_a_pull(
    tmp_path, run_labels, docker_client
):
    """Removed and tagged again between two starts with ``pull=missing``: both are created,
    from the image there each time."""
    tag = f"rock-test/again:{uuid.uuid4().hex[:8]}"
    image = docker_client.images.get(IMAGE)
    image.tag(tag)
    try:
        async with DockerRuntime(rocklet_dir=tmp_path / "rocklet") as runtime:
            handle = await _create(runtime, run_labels, _spec(tag, PullPolicy.MISSING), PhaseLog())
            await runtime.remove(handle)
            await anyio.to_thread.run_sync(lambda: docker_client.images.remove(tag))
            image.tag(tag)
            phases = PhaseLog()
            handle = await _create(runtime, run_labels, _spec(tag, PullPolicy.MISSING), phases)
            assert phases.last(PHASE_IMAGE_PULL).message == "use cached image, skip image pull"
            await runtime.remove(handle)
    finally:
        await anyio.to_thread.run_sync(lambda: docker_client.images.remove(tag))
