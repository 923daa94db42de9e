"""(rock) ``Sandbox.stat``: a path's type, size, mode, mtime and symlink target.

The operation added by the recipe of one declaration (``rock_core.actions.files.STAT``), the
rocklet's handler (``rock_core/rocklet/files.py``) and the ``Sandbox`` method: the admin's route,
both SDK drivers and the rocklet client follow the catalog. Runs embedded, and against a real
admin with ``ROCK_TEST_REMOTE=1``; the admin's tenant check on ``/stat`` is in
test_admin_tenancy.py's walk of every route.
"""

from __future__ import annotations

from typing import Any

import pytest

from rock.actions import Command, ReadFileRequest, StatResponse
from rock_core.errors import InvalidParameter, RockError

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def _sh(sandbox: Any, script: str) -> None:
    result = await sandbox.execute(Command(command=["sh", "-c", script]))
    assert result.exit_code == 0, result.stderr


async def test_a_file_a_directory_and_a_symlink(sandbox: Any) -> None:
    await _sh(
        sandbox,
        "mkdir -p /tmp/stat && printf 12345 > /tmp/stat/f.txt && chmod 640 /tmp/stat/f.txt"
        " && touch -d @1700000000 /tmp/stat/f.txt && ln -sfn f.txt /tmp/stat/link",
    )
    info = await sandbox.stat("/tmp/stat/f.txt")
    assert info == StatResponse(
        path="/tmp/stat/f.txt", type="file", size=5, mode=0o640, mtime=1700000000.0
    )
    assert (await sandbox.stat("/tmp/stat")).type == "dir"
    link = await sandbox.stat("/tmp/stat/link")
    assert (link.type, link.is_symlink, link.target) == ("symlink", True, "f.txt")
    # The same figures as the directory's listing gives.
    entry = next(e for e in (await sandbox.list_dir("/tmp/stat")).entries if e.name == "f.txt")
    assert (entry.size, entry.mode, entry.mtime) == (info.size, info.mode, info.mtime)


async def test_a_missing_path_is_an_error_naming_it(sandbox: Any) -> None:
    with pytest.raises(InvalidParameter, match="/tmp/stat-missing"):
        await sandbox.stat("/tmp/stat-missing")


async def _outcome(call: Any) -> str:
    try:
        await call
    except RockError as exc:
        return type(exc).__name__
    return "ok"


async def test_what_read_file_may_not_read_stat_may_not_either(sandbox: Any) -> None:
    """Paths read_file refuses (missing, under a file, blank) fail alike for stat, and what it
    reads (behind a directory closed to everyone: the rocklet is the sandbox's root) stat
    reads: stat reaches no path read_file does not."""
    await _sh(
        sandbox,
        "mkdir -p /tmp/stat-closed && echo x > /tmp/stat-closed/f && chmod 000 /tmp/stat-closed"
        " && echo y > /tmp/stat-plain",
    )
    for path in ("/tmp/stat-nothing/f", "/tmp/stat-plain/f", "", "/tmp/stat-closed/f"):
        by_read = await _outcome(sandbox.read_file(ReadFileRequest(path=path)))
        by_stat = await _outcome(sandbox.stat(path))
        assert by_stat == by_read, path
    assert await _outcome(sandbox.stat("/tmp/stat-plain/f")) == "InvalidParameter"
