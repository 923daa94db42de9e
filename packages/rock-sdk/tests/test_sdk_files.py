"""Files: read, write, upload, download, line ranges, directories and ``sandbox.fs``.

Covers ROCK's scenario 2 (reference §13) and the file quirks rock fixes (reference §12.1): a
failed write or upload is reported as a failure, a missing file is an error, not ``""``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from rock.actions import (
    ChmodRequest,
    ChownRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)
from rock_core.errors import CommandRockError, InvalidParameter

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def test_the_same_text_by_every_read_path(sandbox: Any, tmp_path: Path) -> None:
    """ROCK scenario 2."""
    local = tmp_path / "test.txt"
    local.write_text("uploaded")
    uploaded = await sandbox.upload(
        UploadRequest(source_path=str(local), target_path="/root/test.txt")
    )
    assert (
        uploaded.success
        and uploaded.message == "Successfully uploaded file test.txt to /root/test.txt"
    )
    assert (await sandbox.read_file(ReadFileRequest(path="/root/test.txt"))).content == "uploaded"

    written = await sandbox.write_file(
        WriteFileRequest(content="hello world", path="/root/test.txt")
    )
    assert (written.success, written.message) == (
        True,
        "Successfully write content to file /root/test.txt",
    )
    content = (await sandbox.read_file(ReadFileRequest(path="/root/test.txt"))).content
    by_lines = (
        await sandbox.read_file_by_line_range("/root/test.txt", start_line=1, end_line=1)
    ).content
    await sandbox.create_session(CreateBashSessionRequest(session="files"))
    by_cat = (await sandbox.arun("cat /root/test.txt", session="files")).output
    assert content == by_lines == by_cat == "hello world"


async def test_write_creates_parents_and_replaces(sandbox: Any) -> None:
    assert (
        await sandbox.write_file_by_path("first version, longer", "/tmp/deep/er/file.txt")
    ).success
    assert (await sandbox.write_file_by_path("second", "/tmp/deep/er/file.txt")).success
    assert (
        await sandbox.read_file(ReadFileRequest(path="/tmp/deep/er/file.txt"))
    ).content == "second"


async def test_a_failed_write_says_why(sandbox: Any) -> None:
    read_only = await sandbox.write_file_by_path("x", "/rock/new.txt")
    assert not read_only.success and "Read-only file system" in read_only.message
    on_a_directory = await sandbox.write_file_by_path("x", "/tmp")
    assert not on_a_directory.success and "/tmp" in on_a_directory.message


async def test_reading_what_is_not_a_text_file_raises(sandbox: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match="/no/such/file"):
        await sandbox.read_file(ReadFileRequest(path="/no/such/file"))
    with pytest.raises(InvalidParameter, match="Is a directory"):
        await sandbox.read_file(ReadFileRequest(path="/root"))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9".encode("latin-1"))
    assert (await sandbox.upload_by_path(latin1, "/tmp/latin1.txt")).success
    with pytest.raises(InvalidParameter, match=r"not valid utf-8 text: byte 0xe9 at offset 3"):
        await sandbox.read_file(ReadFileRequest(path="/tmp/latin1.txt"))
    assert (
        await sandbox.read_file(ReadFileRequest(path="/tmp/latin1.txt", encoding="latin-1"))
    ).content == "caf\u00e9"
    assert (
        await sandbox.read_file(ReadFileRequest(path="/tmp/latin1.txt", errors="replace"))
    ).content == "caf\ufffd"


async def test_upload_failures_are_reported(sandbox: Any, tmp_path: Path) -> None:
    missing = await sandbox.upload_by_path(tmp_path / "absent.bin", "/tmp/absent.bin")
    assert not missing.success and missing.message == f"File not found: {tmp_path / 'absent.bin'}"
    directory = await sandbox.upload_by_path(tmp_path, "/tmp/dir")
    assert not directory.success and "Not a regular file" in directory.message
    local = tmp_path / "f.txt"
    local.write_text("x")
    read_only = await sandbox.upload_by_path(local, "/rock/f.txt")
    assert not read_only.success and "Read-only file system" in read_only.message
    with pytest.raises(
        InvalidParameter, match="upload_mode: 'ftp' is not one of auto, oss, direct"
    ):
        await sandbox.upload_by_path(local, "/tmp/f.txt", "ftp")


async def test_binary_upload_and_download_round_trip(sandbox: Any, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096 + b"\x00tail"
    local = tmp_path / "blob.bin"
    local.write_bytes(data)
    assert (await sandbox.upload_by_path(local, "/tmp/blobs/blob.bin", "direct")).success
    assert await sandbox.download("/tmp/blobs/blob.bin") == data
    checksum = await sandbox.execute(Command(command=["sha256sum", "/tmp/blobs/blob.bin"]))
    assert checksum.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    with pytest.raises(InvalidParameter):
        await sandbox.download("/tmp/blobs/absent.bin")


async def test_read_file_by_line_range(sandbox: Any) -> None:
    await sandbox.write_file_by_path("".join(f"line {n}\n" for n in range(1, 26)), "/tmp/lines.txt")
    middle = await sandbox.read_file_by_line_range("/tmp/lines.txt", start_line=3, end_line=5)
    assert middle.content == "line 3\nline 4\nline 5\n"
    chunked = await sandbox.read_file_by_line_range(
        "/tmp/lines.txt", start_line=20, lines_per_request=2
    )
    assert chunked.content == "".join(f"line {n}\n" for n in range(20, 26))
    with pytest.raises(InvalidParameter, match=r"start_line\(0\) must be positive"):
        await sandbox.read_file_by_line_range("/tmp/lines.txt", start_line=0)
    with pytest.raises(
        InvalidParameter, match=r"end_line\(2\) must be greater than start_line\(3\)"
    ):
        await sandbox.read_file_by_line_range("/tmp/lines.txt", start_line=3, end_line=2)
    with pytest.raises(InvalidParameter, match="lines_per_request"):
        await sandbox.read_file_by_line_range("/tmp/lines.txt", lines_per_request=10001)
    with pytest.raises(CommandRockError, match="wc exited with code 1"):
        await sandbox.read_file_by_line_range("/tmp/absent.txt")


async def test_list_dir(sandbox: Any) -> None:
    await sandbox.write_file_by_path("abc", "/tmp/listing/a.txt")
    await sandbox.execute(Command(command=["mkdir", "-p", "/tmp/listing/sub"]))
    await sandbox.execute(Command(command=["ln", "-sf", "a.txt", "/tmp/listing/link"]))
    listing = await sandbox.list_dir("/tmp/listing")
    entries = {e.name: e for e in listing.entries}
    assert (entries["a.txt"].type, entries["a.txt"].size) == ("file", 3)
    assert entries["sub"].type == "dir"
    assert (entries["link"].type, entries["link"].target) == ("symlink", "a.txt")


async def test_upload_dir_replaces_the_target(sandbox: Any, tmp_path: Path) -> None:
    source = tmp_path / "project"
    (source / "pkg").mkdir(parents=True)
    (source / "README").write_text("readme")
    (source / "pkg" / "mod.py").write_text("print('mod')")
    (source / "run.sh").write_text("#!/bin/sh\necho run\n")
    (source / "run.sh").chmod(0o755)
    await sandbox.write_file_by_path("old", "/opt/project/stale.txt")

    result = await sandbox.fs.upload_dir(source, "/opt/project")
    assert (result.exit_code, result.failure_reason) == (0, "")
    listing = await sandbox.execute(
        Command(command=["sh", "-c", "cd /opt/project && find . -type f | sort && ./run.sh"])
    )
    assert listing.stdout.split() == ["./README", "./pkg/mod.py", "./run.sh", "run"]
    assert (
        await sandbox.execute(Command(command=["sh", "-c", "ls /tmp/rock_upload_* 2>/dev/null"]))
    ).stdout == ""

    relative = await sandbox.fs.upload_dir(source, "opt/project")
    assert relative.exit_code == 1 and "absolute" in relative.failure_reason
    missing = await sandbox.fs.upload_dir(tmp_path / "nope", "/opt/x")
    assert missing.exit_code == 1 and "not found" in missing.failure_reason


async def test_chown_and_chmod(sandbox: Any) -> None:
    assert await sandbox.remote_user.create_remote_user("owner1")
    await sandbox.write_file_by_path("x", "/srv/owned/inner/file.txt")
    assert (
        await sandbox.fs.chown(
            ChownRequest(remote_user="owner1", paths=["/srv/owned"], recursive=True)
        )
    ).success
    assert (
        await sandbox.fs.chmod(ChmodRequest(paths=["/srv/owned/inner/file.txt"], mode="640"))
    ).success
    stat = await sandbox.execute(
        Command(command=["stat", "-c", "%U %G %a", "/srv/owned/inner/file.txt"])
    )
    assert stat.stdout.strip() == "owner1 owner1 640"
    failed = await sandbox.fs.chmod(ChmodRequest(paths=["/srv/absent"]))
    assert not failed.success and "No such file" in failed.message
    with pytest.raises(InvalidParameter, match="paths"):
        await sandbox.fs.chown(ChownRequest(remote_user="owner1", paths=[]))


async def test_download_file(sandbox: Any, tmp_path: Path) -> None:
    await sandbox.write_file_by_path("to the host\n", "/tmp/out/result.txt")
    target = tmp_path / "nested" / "result.txt"
    response = await sandbox.fs.download_file("/tmp/out/result.txt", target)
    assert response.success and target.read_text() == "to the host\n"
    missing = await sandbox.fs.download_file("/tmp/out/absent.txt", tmp_path / "absent.txt")
    assert not missing.success and "absent.txt" in missing.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested"]  # nothing half-written
