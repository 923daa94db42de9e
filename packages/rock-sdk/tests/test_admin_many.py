"""The admin with many sandboxes: ``/metrics`` does not grow with them, and the listing shows
each sandbox as ``get_status`` does (its queue place too) however many there are.

The admin app over an engine on a scripted in-memory runtime (``rock_core.testing``), with a
file store as ``rock admin serve`` has: sandboxes are cheap there, so the counts can differ
tenfold without Docker. ``rock bench admin --scripted --sandboxes 1000`` times the same routes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from rock.admin.app import PREFIX, create_app
from rock.admin.config import load_settings
from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.testing import ScriptedRuntime, rocklet_in_thread

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


@contextlib.asynccontextmanager
async def _admin(
    tmp_path: Path, runtime: ScriptedRuntime, **config: Any
) -> AsyncIterator[tuple[SandboxManager, httpx.AsyncClient]]:
    engine_config = EngineConfig(
        timer_interval=3600, reconcile_interval=3600, store_path=str(tmp_path / "rock.db"), **config
    )
    async with SandboxManager(engine_config, runtime=runtime) as manager:
        try:
            app = create_app(load_settings(None, state_dir=str(tmp_path)), manager)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
            ) as http:
                yield manager, http
        finally:
            runtime.open_gates()


async def _start(manager: SandboxManager, count: int, *, running: bool = True) -> list[str]:
    ids = []
    for n in range(count):
        started = await manager.start_async(
            SandboxStartRequest(image="scripted:1"), experiment_id=f"exp-{n % 3}"
        )
        assert started.sandbox_id is not None
        ids.append(started.sandbox_id)
    if running:
        with anyio.fail_after(60):
            for sandbox_id in ids:
                await manager.wait_until_running(sandbox_id)
    return ids


async def test_metrics_body_does_not_grow_with_the_sandboxes(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    async with _admin(tmp_path, ScriptedRuntime(rocklet)) as (manager, http):
        sizes = {}
        started = 0
        for count in (5, 50):
            ids = await _start(manager, count - started)
            started = count
            # Requests on every sandbox, so a per-sandbox series would show.
            for sandbox_id in ids:
                assert (
                    await http.get(f"{PREFIX}/get_status", params={"sandbox_id": sandbox_id})
                ).status_code == 200
            body = (await http.get("/metrics")).text
            assert f'rock_sandboxes{{state="running"}} {count}.0' in body
            assert not any(sandbox_id in body for sandbox_id in ids)
            sizes[count] = len(body)
        # Only counters' digits may grow (a request count of 5 becoming 50).
        assert sizes[50] - sizes[5] < 64, sizes


async def test_listing_many_pending_shows_each_queue_place(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    create = runtime.hold("create")
    async with _admin(tmp_path, runtime, max_concurrent_starts=1) as (manager, http):
        ids = await _start(manager, 60, running=False)
        await create.arrivals(1)  # the first holds the only slot; 59 wait their turn
        page = (await http.get(f"{PREFIX}/sandboxes", params={"page_size": 100})).json()["result"]
        places = {item["sandbox_id"]: item["queue_position"] for item in page["items"]}
        assert page["total"] == 60 and set(places) == set(ids)
        single = {
            sandbox_id: (
                await http.get(f"{PREFIX}/get_status", params={"sandbox_id": sandbox_id})
            ).json()["result"]
            for sandbox_id in ids
        }
        assert places == {
            sandbox_id: status["queue_position"] for sandbox_id, status in single.items()
        }
        assert sorted(p for p in places.values() if p is not None) == list(range(1, 60))
        batch = (
            await http.post(f"{PREFIX}/sandboxes/batch", json={"sandbox_ids": ids[:10]})
        ).json()["result"]
        assert {s["sandbox_id"]: s["queue_position"] for s in batch["statuses"]} == {
            s: places[s] for s in ids[:10]
        }
