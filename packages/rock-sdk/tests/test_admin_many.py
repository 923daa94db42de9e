"""The admin with many sandboxes: ``/metrics`` does not grow with them, and the listing shows
each sandbox as ``get_status`` does (its queue place too) however many there are.

The admin app over an engine on a scripted in-memory runtime (``rock_core.testing``; the
``scripted_admin`` fixture), with a file store as ``rock admin serve`` has: sandboxes are cheap there, so the counts can differ
tenfold without Docker. ``rock bench admin --scripted --sandboxes 1000`` times the same routes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rock.admin.app import PREFIX
from rock_core.actions import SandboxStartRequest
from rock_core.engine.manager import SandboxManager
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio


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


async def test_metrics_body_does_not_grow_with_the_sandboxes(scripted_admin: Any) -> None:
    async with scripted_admin() as admin:
        manager, http = admin.manager, admin.http
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
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    create = scripted_runtime.hold("create")
    async with scripted_admin(engine={"max_concurrent_starts": 1}) as admin:
        manager, http = admin.manager, admin.http
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
