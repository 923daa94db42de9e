"""The engine's ``store`` setting: a URL whose scheme names the record store a plugin registered
(``rock_register_record_stores``), built with the plugin's table, opened before the engine
serves, holding every record (and found again by the next engine on the same store); and the
errors of a ``store`` nothing serves, named with the setting and its value, password masked,
before anything runs.

The plugin is a throwaway distribution (:class:`~rock_core.testing.PluginSite`) whose store is
rock-core's SQLite store on the path of its URL; the runtime a
:class:`~rock_core.testing.ScriptedRuntime` (no Docker).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import InvalidParameter
from rock_core.plugins import Plugins
from rock_core.states import State
from rock_core.testing import PluginSite, ScriptedRuntime

pytestmark = pytest.mark.anyio

HANG = 30  # a guard against a hang (the engine regressed); nothing waits for it to pass

JOURNAL = """
from urllib.parse import urlsplit

from rock_core import hookimpl
from rock_core.engine.store import SqliteRecordStore

#: (url, table) of every store built, and how many times each was opened.
BUILT = []
OPENED = []


class JournalStore(SqliteRecordStore):
    def __init__(self, url, **table):
        BUILT.append((url, table))
        super().__init__(urlsplit(url).path)

    def open(self):
        OPENED.append(self)
        super().open()


@hookimpl
def rock_register_record_stores(register):
    register("journal", JournalStore)
"""

REQUEST = SandboxStartRequest(image="scripted:1")


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[Plugins, Any]]:
    """The plugins (the throwaway one alone, found through its entry point) and its module."""
    site = PluginSite(tmp_path / "site")
    module = site.install("rock-journal", source=JOURNAL)
    with site.importable(alone=True):
        plugins = Plugins.load()
        loaded = sys.modules[module]
    yield plugins, loaded


def _config(**fields: Any) -> EngineConfig:
    return EngineConfig(
        timer_interval=3600, reconcile_interval=3600, remove_on_close=False, **fields
    )


async def test_the_engine_keeps_its_records_in_the_store_a_plugin_registered(
    journal: tuple[Plugins, Any], runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    plugins, module = journal
    path = tmp_path / "journal.db"
    config = _config(
        store=f"journal://{path}",
        store_path=str(tmp_path / "unused.db"),  # store wins over store_path
        plugin_options={"journal": {"note": "from the table"}},
    )
    with anyio.fail_after(HANG):
        async with SandboxManager(config, runtime=runtime, plugins=plugins, owner="o") as engine:
            assert isinstance(engine.store, module.JournalStore)
            assert module.BUILT == [(f"journal://{path}", {"note": "from the table"})]
            assert module.OPENED == [engine.store]
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await engine.wait_until_running(sandbox_id)
        stored = SqliteRecordStore(path).get(sandbox_id)
        assert stored is not None and stored.state is State.RUNNING
        assert not (tmp_path / "unused.db").exists()
        # The next engine on the same store takes the sandbox back.
        async with SandboxManager(config, runtime=runtime, plugins=plugins, owner="o") as engine:
            assert engine.get_record(sandbox_id).state is State.RUNNING
            assert [r.sandbox_id for r in engine.list_records()] == [sandbox_id]
            await engine.stop(sandbox_id)
    stored = SqliteRecordStore(path).get(sandbox_id)
    assert stored is not None and stored.state in (State.STOPPED, State.DELETED)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "nosuch://rock:hunter2@127.0.0.1:5432/rock",
            "store: no record store serves nosuch:// in 'nosuch://rock:***@127.0.0.1:5432/rock'"
            " (installed: journal); for PostgreSQL, pip install rock-postgres",
        ),
        (
            "127.0.0.1:5432/rock",
            "store: '127.0.0.1:5432/rock' is not a store URL (scheme://...",
        ),
        (
            "postgresql//rock:hunter2@host/rock",
            "store: 'postgresql//rock:***@host/rock' is not a store URL",
        ),
    ],
)
def test_a_store_nothing_serves_is_named_with_its_value_and_no_password(
    journal: tuple[Plugins, Any], runtime: ScriptedRuntime, url: str, said: str
) -> None:
    plugins, module = journal
    with pytest.raises(InvalidParameter) as info:
        SandboxManager(_config(store=url), runtime=runtime, plugins=plugins)
    assert info.value.field == "store"
    assert str(info.value).startswith(said)
    assert "hunter2" not in str(info.value) and "hunter2" not in str(info.value.value)
    assert module.BUILT == []


def test_the_store_url_is_not_shown_in_the_settings_repr() -> None:
    assert "hunter2" not in repr(_config(store="postgresql://rock:hunter2@h/rock"))
