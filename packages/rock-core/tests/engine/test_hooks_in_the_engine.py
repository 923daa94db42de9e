"""The hooks an engine calls, through the engine (:class:`SandboxManager`): a throwaway plugin,
installed the way a distribution is (:class:`~rock_core.testing.PluginSite`), is handed its table
(``rock_configure``), provides the runtime the engine places sandboxes with
(``rock_register_runtimes``), and hears every change of a sandbox's state the engine makes
(``rock_sandbox_transition``), once each, after the change is in the store; a repeated request (a
no-op of the lifecycle) changes nothing and is not announced.

The plugin's runtime is a :class:`~rock_core.testing.ScriptedRuntime`: no Docker, and races are
ordered by its gates, not by sleeps.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.plugins import Plugins
from rock_core.states import Event, State
from rock_core.testing import PluginSite, ScriptedRuntime

pytestmark = pytest.mark.anyio

HANG = 30  # a guard against a hang (the engine regressed); nothing waits for it to pass

LISTENER = """
from rock_core import hookimpl
from rock_core.testing import ScriptedRuntime

#: Each table rock_configure was handed.
TABLES = []
#: Per transition: (sandbox id, event, old, new, the record's state, the stored state, the stored delete_time).
HEARD = []
#: The engine, for the listener to read its store (set by the test).
ENGINE = {}


class ListenerRuntime(ScriptedRuntime):
    name = "listener"

    def __init__(self, rocklet_host, rocklet_port):
        super().__init__((rocklet_host, int(rocklet_port)))


@hookimpl
def rock_configure(config):
    TABLES.append(dict(config))


@hookimpl
def rock_register_runtimes(register):
    register("listener", ListenerRuntime)


@hookimpl
def rock_sandbox_transition(record, event, old, new):
    stored = ENGINE["engine"].store.get(record.sandbox_id)
    HEARD.append((record.sandbox_id, event, old, new, record.state, stored.state, stored.delete_time))
"""

REQUEST = SandboxStartRequest(image="scripted:1")


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[Plugins, Any]]:
    """The plugins (the throwaway one alone, found through its entry point) and its module."""
    site = PluginSite(tmp_path / "site")
    module = site.install("rock-listener", source=LISTENER)
    with site.importable(alone=True):  # no other distribution's plugins
        plugins = Plugins.load()
        loaded = sys.modules[module]
    yield plugins, loaded


@contextlib.asynccontextmanager
async def _engine(
    rocklet: tuple[str, int], listener: tuple[Plugins, Any], tmp_path: Path
) -> AsyncIterator[SandboxManager]:
    plugins, module = listener
    host, port = rocklet
    # Stopped sandboxes stay stopped (their unit kept) until deleted; the timers never fire.
    config = EngineConfig(
        runtime="listener",
        plugin_options={"listener": {"rocklet_host": host, "rocklet_port": str(port)}},
        timer_interval=3600,
        reconcile_interval=3600,
        default_auto_delete_seconds=3600,
        store_path=str(tmp_path / "store.db"),
    )
    async with SandboxManager(config, plugins=plugins) as engine:
        module.ENGINE["engine"] = engine
        try:
            yield engine
        finally:
            engine.runtime.open_gates()


async def test_the_engine_configures_the_plugin_and_places_sandboxes_with_its_runtime(
    rocklet: tuple[str, int], listener: tuple[Plugins, Any], tmp_path: Path
) -> None:
    _, module = listener
    host, port = rocklet
    with anyio.fail_after(HANG):
        async with _engine(rocklet, listener, tmp_path) as engine:
            assert module.TABLES == [{"rocklet_host": host, "rocklet_port": str(port)}]
            assert isinstance(engine.runtime, module.ListenerRuntime)
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await engine.wait_until_running(sandbox_id)
            assert engine.runtime.running() == [sandbox_id]


async def test_the_engine_announces_each_transition_once_after_storing_it(
    rocklet: tuple[str, int], listener: tuple[Plugins, Any], tmp_path: Path
) -> None:
    _, module = listener
    with anyio.fail_after(HANG):
        async with _engine(rocklet, listener, tmp_path) as engine:
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await engine.wait_until_running(sandbox_id)
            await engine.stop(sandbox_id)
            await engine.stop(sandbox_id)  # again: stopping twice is harmless, and silent
            await engine.delete(sandbox_id)
            await engine.delete(sandbox_id)  # again: likewise
    heard = [
        (event, old, new, told, stored)
        for (sid, event, old, new, told, stored, _) in module.HEARD
        if sid == sandbox_id
    ]
    assert heard == [
        (Event.ALIVE, State.PENDING, State.RUNNING, State.RUNNING, State.RUNNING),
        (Event.STOP, State.RUNNING, State.STOPPED, State.STOPPED, State.STOPPED),
        (Event.DELETE, State.STOPPED, State.DELETED, State.DELETED, State.DELETED),
    ]


async def test_two_deletes_at_once_delete_and_announce_once(
    rocklet: tuple[str, int], listener: tuple[Plugins, Any], tmp_path: Path
) -> None:
    # The second delete waits for the sandbox's lock while the first removes the unit; when it
    # gets the lock the sandbox is deleted already: a no-op, which must neither write the
    # record again (a later delete_time) nor tell plugins of a second deletion.
    _, module = listener
    with anyio.fail_after(HANG):
        async with _engine(rocklet, listener, tmp_path) as engine:
            runtime: ScriptedRuntime = engine.runtime  # type: ignore[assignment]
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await engine.wait_until_running(sandbox_id)
            await engine.stop(sandbox_id)
            remove = runtime.hold("remove")
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.delete, sandbox_id)
                await remove.arrivals(1)  # the first delete holds the lock, removing the unit
                tg.start_soon(engine.delete, sandbox_id)
                await anyio.wait_all_tasks_blocked()  # the second waits for the lock
                remove.open()
            record = engine.store.get(sandbox_id)
            assert record is not None and record.state is State.DELETED
    deletions = [
        entry for entry in module.HEARD if entry[0] == sandbox_id and entry[1] is Event.DELETE
    ]
    assert [(old, new) for (_, _, old, new, *_) in deletions] == [(State.STOPPED, State.DELETED)]
    assert deletions[0][6] == record.delete_time  # the record the plugin saw is the one kept
