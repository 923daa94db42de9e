"""A tenant's start from an image tag is checked again when its container is made, by the image
the container was made from: a tag re-pointed at another tenant's commit between the start's
acceptance and its create does not give the tenant that commit's files.

An embedded engine on the local Docker engine. The race is made to happen every time: the
runtime (Docker's, unchanged) is wrapped so that the tag moves to tenant ``a``'s commit (an image
labelled ``rock.commit.tenant=a``, as ``Sandbox.commit`` leaves one) just before the create of
tenant ``b``'s start, which was accepted while the tag named a base image.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_core.states import State
from rock_core.testing import unique_sandbox_id
from rock_docker.runtime import DockerRuntime

from .conftest import RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class _TagMovesBeforeCreate(DockerRuntime):
    """Docker's runtime; the tag moves to ``a``'s commit just before its first create."""

    def __init__(self, docker_client: Any, tag: str, commit: str, **settings: Any) -> None:
        super().__init__(**settings)
        self._moves: tuple[Any, str, str] | None = (docker_client, tag, commit)

    async def create(self, spec: Any, **kwargs: Any) -> Any:
        if self._moves is not None and spec.image == self._moves[1]:
            client, tag, commit = self._moves
            self._moves = None
            await anyio.to_thread.run_sync(lambda: client.images.get(commit).tag(tag))
        return await super().create(spec, **kwargs)


async def test_a_tag_repointed_at_another_tenants_commit_after_the_start_was_accepted_fails_it(
    tmp_path: Any, run_labels: dict[str, str], docker_client: Any, tag_and_a_commit: tuple[str, str]
) -> None:
    tag, commit = tag_and_a_commit
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"commit-race-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
    )
    runtime = _TagMovesBeforeCreate(
        docker_client, tag, commit, rocklet_dir=tmp_path / "rocklet", socket_dir=tmp_path / "s"
    )
    async with SandboxManager(config, runtime=runtime) as engine:
        request = SandboxStartRequest(
            image=tag,
            memory="256m",
            cpus=0.5,
            sandbox_id=unique_sandbox_id("race"),
            auto_delete_seconds=600,  # a stopped sandbox kept restartable
        )
        accepted = await engine.start_async(request, tenant="b")  # the tag is a base image now
        with pytest.raises(InvalidParameter, match="no such image on this node") as refused:
            await engine.wait_until_running(accepted.sandbox_id)  # before: running a's files
        assert "'a'" not in str(refused.value)  # not saying whose
        record = engine.get_record(accepted.sandbox_id)
        assert record.state is not State.RUNNING and "no such image" in (record.reason or "")

        def left() -> list[Any]:
            return docker_client.containers.list(
                all=True, filters={"label": f"rock.sandbox_id={accepted.sandbox_id}"}
            )

        # The container made from a's commit was removed unstarted: no restart can reuse it.
        assert left() == []
        with pytest.raises(BadRequestRockError, match="cannot be restarted"):
            await engine.restart(accepted.sandbox_id)
