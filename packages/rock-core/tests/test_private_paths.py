"""Secrets at rest and the socket folder (issue 22, point 7): the engine's store is 0600 in a
0700 folder, and a folder that another user owns, that is a link, or that others may write is
refused with the path, its owner and mode, and the setting to change."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import InvalidParameter
from rock_core.private_paths import private_dir, private_file

NOBODY = 65534

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a folder to another user takes root"
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_store_and_its_journal_are_readable_by_their_user_alone(tmp_path):
    store = SqliteRecordStore(tmp_path / "state" / "rock.db")
    try:
        store._db.execute("CREATE TABLE IF NOT EXISTS probe (x)")  # the journal files exist now
        store._db.commit()
        assert _mode(tmp_path / "state") == 0o700
        for name in ("rock.db", "rock.db-wal", "rock.db-shm"):
            assert _mode(tmp_path / "state" / name) == 0o600, name
    finally:
        store.close()


def test_a_store_made_readable_by_an_older_rock_is_narrowed(tmp_path):
    """rock.db was created 0644 before: opening it again narrows it and its journal to 0600."""
    path = tmp_path / "rock.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
    for name in ("rock.db", "rock.db-wal", "rock.db-shm"):
        if (tmp_path / name).exists():
            os.chmod(tmp_path / name, 0o644)
    SqliteRecordStore(path).close()
    assert _mode(path) == 0o600
    assert all(_mode(p) == 0o600 for p in tmp_path.glob("rock.db-*"))


def test_a_store_path_that_is_a_link_is_refused(tmp_path):
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    (tmp_path / "rock.db").symlink_to(target)
    with pytest.raises(
        InvalidParameter, match=r"store_path: .*rock\.db is a symbolic link"
    ) as caught:
        SqliteRecordStore(tmp_path / "rock.db")
    assert caught.value.field == "store_path"


@needs_root
def test_a_store_of_another_user_is_refused(tmp_path):
    path = tmp_path / "rock.db"
    path.write_bytes(b"")
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(InvalidParameter, match=rf"belongs to another user \(owner uid {NOBODY}"):
        SqliteRecordStore(path)


def test_a_missing_folder_is_made_0700(tmp_path):
    made = private_dir(tmp_path / "a" / "rock-sockets", setting="socket_dir")
    assert made.is_dir() and _mode(made) == 0o700


def test_a_folder_of_this_user_that_others_may_read_is_narrowed(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    private_dir(folder, setting="admin.state_dir")
    assert _mode(folder) == 0o700


@needs_root
def test_a_folder_of_another_user_is_refused_naming_owner_mode_and_setting(tmp_path):
    """Another local user who made ``/tmp/rock-<uid>`` first would sit between the engine and
    every rocklet: refused."""
    folder = tmp_path / "rock-0"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(InvalidParameter) as caught:
        private_dir(folder, setting="socket_dir")
    message = caught.value.message
    assert message.startswith(
        f"socket_dir: {folder} belongs to another user (owner uid {NOBODY}, mode drwx------ 0o700)"
    )
    assert "set socket_dir to a path of its own" in message
    assert caught.value.field == "socket_dir"


def test_a_folder_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "rock-0").symlink_to(real)
    with pytest.raises(
        InvalidParameter, match=r"socket_dir: .*rock-0 is a symbolic link, not a folder"
    ):
        private_dir(tmp_path / "rock-0", setting="socket_dir")


def test_a_folder_others_may_write_is_refused_not_narrowed(tmp_path):
    """Another user may have swapped what is inside already: narrowing now would be too late."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(
        InvalidParameter,
        match=r"is writable by other users \(owner uid \d+, mode drwxrwxrwx 0o777\)",
    ):
        private_dir(folder, setting="socket_dir")
    assert _mode(folder) == 0o777


def test_a_private_file_is_never_made_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    (tmp_path / "file").symlink_to(victim)
    with pytest.raises(InvalidParameter, match="is a symbolic link"):
        private_file(tmp_path / "file", setting="store_path")
    assert not victim.exists()
