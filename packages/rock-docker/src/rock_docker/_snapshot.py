"""A stopped container's changes to its image as a stream of bytes, and back (archiving).

A snapshot holds what the sandbox changed on top of its image, never the image itself: the paths
``docker diff`` lists as added or changed, read with Docker's archive endpoint (the tar ``docker
cp`` makes: owners, modes, times, extended attributes, symlinks as links), and the paths it
lists as deleted. Restore creates the container from the image as a start would, puts the tar
back with the same endpoint, and the container deletes the listed paths when it first starts,
before its rocklet listens (Docker can add files to a container that has not started, but not
remove any).

The format is private to this runtime (version 1)::

    b"rock-docker-snapshot 1\\n"
    4 bytes, big-endian: n; then n bytes of JSON: {"image": ..., "image_id": ..., "deleted": 3}
    the tar, in frames: 4 bytes, big-endian: m (1 .. FRAME_MAX), then m bytes; m = 0 ends them
    32 bytes: the SHA-256 of every byte before them

The tar's names are relative to ``/``. An added directory is in it whole; a changed directory
only as its own entry (its contents from the image stay the image's, what changed in it has its
own entries); a changed file whole. When something was deleted, the tar begins with
``.rock-restore/deleted``: the deleted paths as a JSON list, read by :data:`APPLY_DELETIONS`.
The frames and the digest make a cut or corrupted snapshot fail its restore instead of
restoring part of a sandbox.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import struct
import tarfile
import threading
import urllib.parse
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

import anyio.from_thread
import attrs
import docker
import docker.errors
import requests

from rock_core.errors import RuntimeFailure

__all__ = [
    "APPLY_DELETIONS",
    "DELETIONS_PATH",
    "MAGIC",
    "SnapshotCorrupt",
    "SnapshotPlan",
    "SnapshotReader",
    "ThreadedIterator",
    "batched",
    "plan_changes",
    "plan_snapshot",
    "snapshot_frames",
    "upload_snapshot",
]

MAGIC = b"rock-docker-snapshot 1\n"
#: Where a restored container finds the paths to delete (a directory any user may write, so
#: that a sandbox running as another user can remove the list once it is applied).
RESTORE_DIR = "/.rock-restore"
DELETIONS_PATH = f"{RESTORE_DIR}/deleted"
#: Frames are cut at about this size; a reader refuses frames above FRAME_MAX.
FRAME = 1 << 20
FRAME_MAX = 64 << 20
_HEADER_MAX = 1 << 20
_READ = 256 << 10  # bytes read from Docker's archive at a time
_DIGEST = 32
_BLOCK = tarfile.BLOCKSIZE
# Paths Docker itself puts into a container's filesystem (mount points of the files it manages,
# its init binary): never the sandbox's doing, and Docker puts them there again.
_DOCKER_PATHS = (
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/usr/sbin/docker-init",
    "/dev",
    "/proc",
    "/sys",
)
# The kinds of GET /containers/{id}/changes.
_CHANGED, _ADDED, _DELETED = 0, 1, 2

# Run by a restored container's command before its rocklet (python3 -I -S -c SCRIPT LIST):
# delete every listed path, then the list, so that a later start does not delete again.
# Standard library, Python 3.8+, like the rocklet.
_DELETE_SCRIPT = """\
import json, os, shutil, sys
listed = sys.argv[1]
for path in json.load(open(listed)):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        sys.stderr.write("rock: restore could not delete %s: %s\\n" % (path, exc))
try:
    os.unlink(listed)
except OSError as exc:
    sys.stderr.write("rock: restore could not remove %s: %s\\n" % (listed, exc))
"""
#: The shell step a restored container runs before it execs its rocklet.
APPLY_DELETIONS = f"[ ! -e {DELETIONS_PATH} ] || python3 -I -S -c {shlex.quote(_DELETE_SCRIPT)} {DELETIONS_PATH}; "


class SnapshotCorrupt(RuntimeFailure):
    """The bytes given to restore are not a whole snapshot of this runtime."""


@attrs.frozen
class SnapshotPlan:
    """What a snapshot of one stopped container holds, decided before any byte is read.

    :param image: the image the container was created from, as its spec named it.
    :param image_id: that image's id then (a restore on a different image says so in a note).
    :param whole: paths archived with everything under them (added paths, changed files).
    :param entry_only: changed directories: only their own entry (owner, mode, times).
    :param deleted: paths of the image the sandbox deleted.
    :param config: the image configuration a snapshot image of these changes has (``Env``,
        ``Labels``, ``Cmd``, ...), carried in the header; empty for an archive.
    """

    image: str
    image_id: str
    whole: tuple[str, ...]
    entry_only: tuple[str, ...]
    deleted: tuple[str, ...]
    config: Mapping[str, Any] = attrs.field(factory=dict)

    def header(self) -> dict[str, Any]:
        header = {"image": self.image, "image_id": self.image_id, "deleted": len(self.deleted)}
        return {**header, "config": dict(self.config)} if self.config else header


def _is_under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _depth_first(path: str) -> tuple[str, ...]:
    # Parents before their children: a directory's entry comes before what is in it.
    return tuple(path.split("/"))


def plan_snapshot(api: docker.APIClient, unit_id: str, *, sandbox_id: str) -> SnapshotPlan:
    """Inspect the stopped container and list its changes (blocking; two Docker calls)."""
    doc = api.inspect_container(unit_id)
    state = (doc.get("State") or {}).get("Status")
    if state in ("running", "paused", "restarting"):
        raise RuntimeFailure(
            f"sandbox {sandbox_id} cannot be snapshotted while its container is {state}: stop it first",
            sandbox_id=sandbox_id,
            attempted="snapshot",
        )
    return plan_changes(doc, api.diff(unit_id) or [])


def plan_changes(
    doc: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
) -> SnapshotPlan:
    """The plan of a container (``doc``: its inspection) whose changes Docker listed as ``rows``
    (``GET /containers/{id}/changes``), at the moment they were listed."""
    mounts = [m.get("Destination") or "" for m in doc.get("Mounts") or []]
    skipped = [*(m for m in mounts if m), *_DOCKER_PATHS, RESTORE_DIR]
    added = {row["Path"] for row in rows if row["Kind"] == _ADDED}
    whole: list[str] = []
    entry_only: list[str] = []
    deleted: list[str] = []
    for row in sorted(rows, key=lambda r: _depth_first(r["Path"])):
        path, kind = row["Path"], row["Kind"]
        if _is_under(path, skipped):
            continue
        if kind == _DELETED:
            deleted.append(path)
        elif kind == _ADDED:
            parent = path.rsplit("/", 1)[0] or "/"
            if parent not in added:
                whole.append(path)  # what is under it is new too: one archive holds it all
        else:
            entry_only.append(path)  # told apart from changed files once its archive says
    made_from = doc.get("Config") or {}
    return SnapshotPlan(
        image=str(made_from.get("Image") or ""),
        image_id=str(doc.get("Image") or ""),
        whole=tuple(whole),
        entry_only=tuple(entry_only),
        deleted=tuple(deleted),
        config=config or {},
    )


def snapshot_frames(
    api: docker.APIClient, unit_id: str, plan: SnapshotPlan
) -> Generator[bytes, None, None]:
    """The snapshot's bytes, a frame (about :data:`FRAME` bytes) at a time (blocking).

    Reads one Docker archive at a time and never holds more than a frame and a read buffer;
    closing the generator closes the archive being read.
    """
    digest = hashlib.sha256()
    header = json.dumps(plan.header()).encode()
    start = MAGIC + struct.pack(">I", len(header)) + header
    digest.update(start)
    yield start

    def frame(data: bytes) -> bytes:
        length = struct.pack(">I", len(data))
        digest.update(length)
        digest.update(data)
        return length + data

    pending = bytearray()
    for piece in _tar_pieces(api, unit_id, plan):
        if not pending and len(piece) >= FRAME:
            yield frame(piece)  # a file's contents: framed as read, one copy fewer
            continue
        pending += piece
        if len(pending) >= FRAME:
            yield frame(bytes(pending))
            pending.clear()
    if pending:
        yield frame(bytes(pending))
    end = struct.pack(">I", 0)
    digest.update(end)
    yield end + digest.digest()


def _tar_pieces(api: docker.APIClient, unit_id: str, plan: SnapshotPlan) -> Iterator[bytes]:
    """The tar of the plan, as pieces of bytes: entries' headers and their contents in chunks."""
    if plan.deleted:
        listing = json.dumps(list(plan.deleted)).encode()
        folder = tarfile.TarInfo(RESTORE_DIR.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o777
        yield _header(folder)
        listed = tarfile.TarInfo(DELETIONS_PATH.lstrip("/"))
        listed.size, listed.mode = len(listing), 0o666
        yield _header(listed)
        yield listing + _padding(len(listing))
    for path, only_entry in sorted(
        [*((p, False) for p in plan.whole), *((p, True) for p in plan.entry_only)],
        key=lambda item: _depth_first(item[0]),
    ):
        yield from _archived(api, unit_id, path, only_entry=only_entry)
    yield b"\0" * (2 * _BLOCK)


def _archived(
    api: docker.APIClient, unit_id: str, path: str, *, only_entry: bool
) -> Iterator[bytes]:
    """The entries of Docker's archive of ``path``, renamed relative to ``/``; of a directory
    with ``only_entry``, only its own entry (the rest of its archive is never read)."""
    # Docker gzips the archive for a client that accepts it: slower than the copy it saves here.
    # docker-py's get_archive hides the response (no 404 to tell apart, no way to stop reading
    # early and close it): the same request, through the public parts of its client.
    response = api.get(
        _api_url(api, "/containers/{0}/archive", unit_id),
        params={"path": path},
        headers={"Accept-Encoding": "identity"},
        stream=True,
    )
    try:
        if response.status_code == 404:
            return  # gone since the listing (a race with nothing: the container is stopped)
        _raise_for_status(response)
        # Docker names the entries after the path's last component; they go back where they were.
        prefix = path.strip("/").rsplit("/", 1)[0] + "/" if path.strip("/").count("/") else ""
        with tarfile.open(fileobj=response.raw, mode="r|", bufsize=_READ) as archive:
            for member in archive:
                member.name = prefix + member.name
                if member.islnk():
                    member.linkname = prefix + member.linkname
                yield _header(member)
                if member.isreg() and member.size:
                    source = archive.extractfile(member)
                    assert source is not None
                    left = member.size
                    while left:
                        chunk = source.read(min(left, FRAME))
                        if not chunk:
                            raise RuntimeFailure(
                                f"docker's archive of {path} ended inside {member.name}",
                                attempted="snapshot",
                            )
                        left -= len(chunk)
                        yield chunk
                    yield _padding(member.size)
                if only_entry:
                    return
    finally:
        response.close()


def _api_url(api: docker.APIClient, path: str, *args: str) -> str:
    """The URL of a versioned Docker API ``path`` (``{0}`` ... filled with ``args``, quoted)."""
    quoted = (urllib.parse.quote(arg, safe="/:") for arg in args)
    return f"{api.base_url}/v{api.api_version}{path.format(*quoted)}"


def _raise_for_status(response: requests.Response) -> None:
    """Raise the :class:`docker.errors.APIError` (``NotFound``, ...) for a failed answer, as docker-py does."""
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as exc:
        raise docker.errors.create_api_error_from_http_exception(exc) from exc


def _header(member: tarfile.TarInfo) -> bytes:
    # PAX keeps long names, big sizes, exact times and extended attributes (SCHILY.xattr.*).
    return member.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


class SnapshotReader:
    """Reads a snapshot from an async stream: :meth:`header`, then :meth:`tar` (checked at its end).

    Holds at most one frame and one chunk of the stream at a time.
    """

    def __init__(self, stream: AsyncIterable[bytes], *, sandbox_id: str | None) -> None:
        self._chunks: AsyncIterator[bytes] = stream.__aiter__()
        self._buffer = bytearray()
        self._digest = hashlib.sha256()
        self._sandbox_id = sandbox_id

    def _corrupt(self, why: str) -> SnapshotCorrupt:
        return SnapshotCorrupt(
            f"the snapshot of sandbox {self._sandbox_id} cannot be restored: {why}",
            sandbox_id=self._sandbox_id,
            attempted="restore",
        )

    async def _take(self, size: int, *, what: str, hashed: bool = True) -> bytes:
        while len(self._buffer) < size:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise self._corrupt(f"it ends early, inside its {what} (cut short?)") from None
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        if hashed:
            self._digest.update(data)
        return data

    async def header(self) -> Mapping[str, Any]:
        """The snapshot's header: ``{"image": ..., "image_id": ..., "deleted": n}``."""
        magic = await self._take(len(MAGIC), what="start")
        if magic != MAGIC:
            raise self._corrupt("it is not a snapshot of the docker runtime (version 1)")
        (size,) = struct.unpack(">I", await self._take(4, what="header"))
        if size > _HEADER_MAX:
            raise self._corrupt(f"its header claims {size} bytes")
        try:
            header = json.loads(await self._take(size, what="header"))
        except ValueError as exc:
            raise self._corrupt(f"its header is not JSON ({exc})") from None
        if not isinstance(header, dict) or not isinstance(header.get("image"), str):
            raise self._corrupt("its header names no image")
        return header

    async def next_frame(self) -> bytes | None:
        """The next piece of the tar; ``None`` after the last, once the digest matched."""
        (size,) = struct.unpack(">I", await self._take(4, what="tar"))
        if size > FRAME_MAX:
            raise self._corrupt(f"a frame claims {size} bytes")
        if size:
            return await self._take(size, what="tar")
        expected = self._digest.digest()
        if await self._take(_DIGEST, what="digest", hashed=False) != expected:
            raise self._corrupt("its digest does not match its bytes (corrupted)")
        if self._buffer:
            raise self._corrupt("bytes follow its end")
        async for extra in self._chunks:
            if extra:
                raise self._corrupt("bytes follow its end")
        return None


class ThreadedIterator:
    """An async iterator over a blocking generator, each step run by ``run`` (a worker thread).

    ``run(step)`` runs ``step`` off the event loop (the runtime's ``_run``, which also turns
    Docker's errors into rock's). :meth:`aclose` closes the generator, which releases what it
    holds (an open archive).
    """

    def __init__(
        self, generator: Generator[bytes, None, None], run: Callable[[Callable[[], Any]], Any]
    ) -> None:
        self._generator = generator
        self._run = run
        self._done = False

    def __aiter__(self) -> ThreadedIterator:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            chunk: bytes | None = await self._run(lambda: next(self._generator, None))
        except BaseException:
            await self.aclose()
            raise
        if chunk is None:
            self._done = True
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Stop reading; idempotent."""
        if not self._done:
            self._done = True
            await self._run(self._generator.close)


def batched(chunks: Iterator[bytes], size: int = 1 << 20) -> Generator[bytes, None, None]:
    """``chunks`` (a log line each) joined into pieces of about ``size`` bytes."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        if len(pending) >= size:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


def upload_snapshot(
    api: docker.APIClient,
    unit_id: str,
    reader: SnapshotReader,
    stop: threading.Event,
    *,
    sandbox_id: str | None,
) -> None:
    """Stream the snapshot's tar into the created container (Docker's ``PUT .../archive``);
    blocking, in a worker thread that pulls each frame from the event loop (from ``reader``) as
    Docker takes the previous one: one frame in memory at a time. A frame that fails its check
    ends the upload with :class:`SnapshotCorrupt`; ``stop`` set ends it as abandoned.
    """

    def body() -> Iterator[bytes]:
        while not stop.is_set():
            frame = anyio.from_thread.run(reader.next_frame)
            if frame is None:
                return
            yield frame
        raise RuntimeFailure(
            "the restore was abandoned", sandbox_id=sandbox_id, attempted="restore"
        )

    api.put_archive(unit_id, "/", body())
