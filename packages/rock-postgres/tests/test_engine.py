"""A real engine (:class:`~rock_core.engine.manager.SandboxManager`, the installed plugins found
through their entry points) keeping its records in PostgreSQL: ``store`` selects rock-postgres,
every change is in the database as it happens, and the next engine on the same database takes
the sandboxes back, as the SQLite engine does with ``store_path``. The runtime is rock-core's
:class:`~rock_core.testing.ScriptedRuntime` (no Docker) with one real rocklet."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.records import StoreUnavailable
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, rocklet_in_thread
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_url, run_sql  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 60  # a guard against a hang (the engine regressed); nothing waits for it to pass
REQUEST = SandboxStartRequest(image="scripted:1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


def _config(store: str) -> EngineConfig:
    return EngineConfig(
        store=store, timer_interval=3600, reconcile_interval=3600, remove_on_close=False
    )


def _stored_state(url: str, sandbox_id: str) -> str:
    [[state, record]] = run_sql(
        url, "SELECT state, record FROM rock_sandbox WHERE sandbox_id = $1", sandbox_id
    )
    assert json.loads(record)["state"] == state
    return str(state)


async def test_an_engine_keeps_its_records_in_postgres_and_the_next_one_takes_them_back(
    postgres_url: str, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    with anyio.fail_after(HANG):
        async with SandboxManager(_config(postgres_url), runtime=runtime, owner="pg") as engine:
            assert isinstance(engine.store, PostgresRecordStore)
            first = (await engine.start_async(REQUEST)).sandbox_id
            second = (await engine.start_async(REQUEST)).sandbox_id
            assert first is not None and second is not None
            await engine.wait_until_running(first)
            await engine.wait_until_running(second)
            assert _stored_state(postgres_url, first) == "running"
            await engine.stop(second)
            assert _stored_state(postgres_url, second) in ("stopped", "deleted")
            token = engine.get_record(first).rocklet_token
        # A new engine, as after the admin's restart: same owner, same database.
        async with SandboxManager(_config(postgres_url), runtime=runtime, owner="pg") as engine:
            record = engine.get_record(first)
            assert record.state is State.RUNNING and record.rocklet_token == token
            assert engine.get_record(second).state in (State.STOPPED, State.DELETED)
            running = engine.list_records(states=[State.RUNNING])
            assert [r.sandbox_id for r in running] == [first]
            assert engine.count_by_state()[State.RUNNING] == 1
            answer = await engine.rocklet(first, "execute").execute(
                Command(command=["echo", "back"])
            )
            assert answer.stdout.strip() == "back"
            await engine.stop(first)
            assert _stored_state(postgres_url, first) in ("stopped", "deleted")


async def test_an_engine_whose_store_cannot_be_reached_does_not_start(
    rocklet: tuple[str, int],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runtime = ScriptedRuntime(rocklet)
    engine = SandboxManager(
        _config(f"postgresql://rock:hunter2@127.0.0.1:{port}/rock"), runtime=runtime
    )
    with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as info:
        async with engine:
            pytest.fail("the engine opened without its store")
    assert str(info.value).startswith(f"store: PostgreSQL at 127.0.0.1:{port} ")
    assert "Connection refused" in str(info.value) and "hunter2" not in str(info.value)
    assert runtime.units == {}
