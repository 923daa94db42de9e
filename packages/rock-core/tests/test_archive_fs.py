"""rock-core's filesystem archive store: the archive store conformance suite, and how it is found
and configured as rock-core's plugin ``archive-fs``."""

from __future__ import annotations

import os
from importlib.metadata import distribution
from pathlib import Path

import anyio
import pytest

from rock_core.archive_fs import FilesystemArchiveStore, default_root
from rock_core.engine.config import EngineConfig
from rock_core.engine.extensions import build_archive_store
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.plugins import Plugins, plugin_tables
from rock_core.sizes import GiB
from rock_core.testing import ArchiveStoreConformance


class TestFilesystemArchiveStore(ArchiveStoreConformance):
    # The suite's 1 GiB big stream: sixteen times the memory growth allowed, the store's memory
    # does not depend on the size.
    big_size = 1 * GiB

    @pytest.fixture(scope="class")
    @classmethod
    async def store(cls, tmp_path_factory: pytest.TempPathFactory):
        async with FilesystemArchiveStore(
            root=tmp_path_factory.mktemp("archives") / "root"
        ) as store:
            yield store

    async def residue(self, store: FilesystemArchiveStore, sandbox_id: str) -> list[str]:
        folder = store.root / sandbox_id
        names = sorted(os.listdir(folder)) if folder.is_dir() else []
        trash = [
            name for name in os.listdir(store.root) if name.startswith(f".deleted-{sandbox_id}-")
        ]
        return names + trash


def test_parts_are_files_under_the_root_and_private(tmp_path: Path):
    async def main() -> None:
        store = FilesystemArchiveStore(root=tmp_path / "a")

        async def data():
            yield b"hello"

        await store.put("sbx", "logs", data())
        return None

    anyio.run(main)
    part = tmp_path / "a" / "sbx" / "logs"
    assert part.read_bytes() == b"hello"
    assert part.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700


def test_a_put_under_a_root_it_cannot_write_names_the_root(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = FilesystemArchiveStore(root=blocker / "archives")

    async def main() -> None:
        async def data():
            yield b"x"

        await store.put("sbx", "logs", data())

    with pytest.raises(InternalServerRockError) as info:
        anyio.run(main)
    assert str(blocker / "archives") in str(info.value)
    assert info.value.sandbox_id == "sbx"


def test_the_default_root_follows_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_root() == tmp_path / "rock" / "archives"
    assert FilesystemArchiveStore().root == tmp_path / "rock" / "archives"


def test_a_blank_root_is_refused_naming_it():
    with pytest.raises(InvalidParameter) as info:
        FilesystemArchiveStore(root=" ")
    assert info.value.field == "root"


def test_rock_core_announces_the_archive_fs_plugin():
    eps = [
        (ep.name, ep.value) for ep in distribution("rock-core").entry_points if ep.group == "rock"
    ]
    assert eps == [("archive-fs", "rock_core.archive_fs")]


def test_the_engine_builds_the_fs_store_from_its_plugin_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    plugins = Plugins.load()
    assert plugins.archive_stores()["fs"] is FilesystemArchiveStore
    assert plugins.registered_by("rock_register_archive_stores")["fs"] == "archive-fs"
    config = EngineConfig(
        archive_store="fs", plugin_options={"archive-fs": {"root": str(tmp_path / "x")}}
    )
    tables = plugin_tables(config.plugin_options, {}, plugins.names())
    assert build_archive_store(config, plugins, tables).root == tmp_path / "x"
    # ROCK_PLUGIN_ARCHIVE_FS_ROOT wins over the table.
    tables = plugin_tables(
        config.plugin_options, {"ROCK_PLUGIN_ARCHIVE_FS_ROOT": str(tmp_path / "y")}, plugins.names()
    )
    assert build_archive_store(config, plugins, tables).root == tmp_path / "y"
