"""Snapshots kept in the archive store as well as on the node (issue #25 point 1), so that another
node sharing the store, or this one on a later day, can start from them.

A snapshot made with ``archive=True`` is written to the engine's archive store under the key
:func:`store_key` (a digest of its tenant, the API key's, and its name: one segment no sandbox's archive can take,
since sandbox ids have no ``@``), in two parts: ``rootfs``, the runtime's export of the
snapshot (its files over its base image, the archive's rules: deletions, owners, modes,
symlinks; never the base image), and ``snapshot``, a JSON note of what it is (name, source
sandbox and image, size, creation time). A start, fork or reset naming a snapshot the node does
not have looks in the store (:func:`fetch`): the snapshot is made into a local image again once
(the runtime's import), and later uses find it on the node. Deleting a snapshot deletes it from
both. The listing shows the node's snapshots and those of the tenant only the store has
(:func:`stored`, ``on_node`` false: a store that can list its archives, ``ArchiveStore.names``).

A unit the runtime makes for a moment to export or import a snapshot carries the engine's labels
and :data:`LABEL_TRANSFER`: one an admin that died in the middle left behind is removed by the
next one's start-up sweep (:func:`is_transfer_leftover`, :mod:`~rock_core.engine.reaping`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterator, Container, Mapping
from datetime import datetime

import anyio

from rock_core.actions import SnapshotInfo
from rock_core.engine.core import EngineCore
from rock_core.errors import InvalidParameter
from rock_core.runtime import SnapshotImage, UnitHandle
from rock_core.tenancy import scoped_name

__all__ = [
    "LABEL_ARCHIVED",
    "LABEL_TRANSFER",
    "fetch",
    "forget",
    "is_stored",
    "is_transfer_leftover",
    "keep",
    "require_store",
    "store_key",
    "stored",
    "stored_names",
]

#: The label of a snapshot image that is also in the archive store.
LABEL_ARCHIVED = "rock.snapshot.archived"
#: The label of a unit made for a moment to export or import a snapshot.
LABEL_TRANSFER = "rock.snapshot.transfer"
_ROOTFS, _NOTE = "rootfs", "snapshot"
_fetching: weakref.WeakKeyDictionary[EngineCore, dict[str, anyio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def store_key(tenant: str | None, name: str) -> str:
    """The archive store key of ``tenant``'s snapshot ``name`` (``None``: an engine without API
    keys, whose callers are all its operator: such engines sharing a store share its names)."""
    return f"snapshot@{scoped_name(tenant, name, length=32)}"


def _unit_labels(core: EngineCore) -> dict[str, str]:
    return {**core.labels(None), LABEL_TRANSFER: "1"}


def is_transfer_leftover(handle: UnitHandle, claimed: Container[str] = ()) -> bool:
    """Whether ``handle`` (from :meth:`Runtime.list`) is a unit made to export or import a
    snapshot (no sandbox's): one of another run of the engine was left by a process that
    died in the middle."""
    return handle.labels.get(LABEL_TRANSFER) == "1" and handle.unit_id not in claimed


def require_store(core: EngineCore, attempted: str) -> None:
    """:raises InvalidParameter: (field ``archive``) the engine has no archive store."""
    if core.archive_store is None:
        raise InvalidParameter(
            "archive: this engine has no archive store to keep snapshots in (set the engine's "
            "archive_store, e.g. 'fs' or 's3')",
            field="archive",
            value=True,
            attempted=attempted,
        )


async def _one(chunk: bytes) -> AsyncIterator[bytes]:
    yield chunk


async def _close(stream: AsyncIterator[bytes]) -> None:
    """Close a stream that can be (an async generator), releasing what it holds."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


async def keep(
    core: EngineCore, tenant: str | None, image: SnapshotImage, info: SnapshotInfo
) -> None:
    """Write the snapshot ``image`` (made with its changes) of ``tenant`` to the archive store:
    its files first, then its note (what :func:`fetch` looks for)."""
    store = core.archive_store
    assert store is not None
    key = store_key(tenant, info.name)
    stream = await core.runtime.export_snapshot_image(image, unit_labels=_unit_labels(core))
    try:
        await store.put(key, _ROOTFS, stream)
    finally:
        await _close(stream)
    note = {
        "name": info.name,
        "tenant": tenant,
        "sandbox_id": info.sandbox_id,
        "source_image": info.source_image,
        "size": info.size,
        "created_at": info.created_at.isoformat(),
        "runtime": core.runtime.name,
    }
    await store.put(key, _NOTE, _one(json.dumps(note).encode()))


async def is_stored(core: EngineCore, tenant: str | None, name: str) -> bool:
    """Whether the archive store (if any) holds ``tenant``'s snapshot ``name``."""
    store = core.archive_store
    return store is not None and await store.exists(store_key(tenant, name), _NOTE)


async def fetch(
    core: EngineCore, tenant: str | None, name: str, labels: Mapping[str, str], attempted: str
) -> SnapshotImage | None:
    """``tenant``'s snapshot ``name`` from the archive store, made a local image again with
    ``labels`` (the engine's scope and the name); ``None`` when the store has none (or the
    engine has no store). One at a time per snapshot: a second caller finds the first's."""
    if not await is_stored(core, tenant, name):
        return None
    key = store_key(tenant, name)
    lock = _fetching.setdefault(core, {}).setdefault(key, anyio.Lock())
    async with lock:
        found = await core.runtime.snapshot_images(labels)
        if found:
            return found[0]
        assert core.archive_store is not None
        stream = await core.archive_store.get(key, _ROOTFS)
        try:
            return await core.runtime.import_snapshot_image(
                stream, labels={**labels, LABEL_ARCHIVED: "1"}, unit_labels=_unit_labels(core)
            )
        finally:
            await _close(stream)


async def _note(core: EngineCore, key: str) -> dict[str, object] | None:
    """The note of the snapshot stored under ``key`` (``None``: gone since it was listed)."""
    assert core.archive_store is not None
    if not await core.archive_store.exists(key, _NOTE):
        return None
    data = bytearray()
    stream = await core.archive_store.get(key, _NOTE)
    try:
        async for chunk in stream:
            data += chunk
    finally:
        await _close(stream)
    note = json.loads(bytes(data))
    return note if isinstance(note, dict) else None


async def _notes(core: EngineCore) -> list[dict[str, object]]:
    """The notes of every snapshot in the archive store; none without a store or with one that
    cannot list its archives."""
    store = core.archive_store
    keys = None if store is None else await store.names("snapshot@")
    notes = [await _note(core, key) for key in keys or []]
    return [note for note in notes if note is not None and note.get("name")]


async def stored_names(core: EngineCore) -> dict[str | None, set[str]]:
    """The names of the snapshots in the archive store, by the tenant each is kept under
    (``None``: an engine's own): what a tenant's ``max_snapshots`` counts besides its images."""
    names: dict[str | None, set[str]] = {}
    for note in await _notes(core):
        tenant = note.get("tenant")
        names.setdefault(None if tenant is None else str(tenant), set()).add(str(note["name"]))
    return names


async def stored(core: EngineCore, tenant: str | None) -> list[SnapshotInfo]:
    """``tenant``'s snapshots in the archive store (``archived``, ``on_node`` false, no image;
    the caller drops those the node has), by their notes; empty without a store or with one
    that cannot list its archives."""
    found: list[SnapshotInfo] = []
    for note in await _notes(core):
        if note.get("tenant") != tenant:
            continue
        found.append(
            SnapshotInfo(
                name=str(note["name"]),
                sandbox_id=str(note.get("sandbox_id") or ""),
                size=int(str(note.get("size") or 0)),
                created_at=datetime.fromisoformat(str(note["created_at"])),
                image="",
                source_image=str(note["source_image"]) if note.get("source_image") else None,
                archived=True,
                on_node=False,
            )
        )
    return found


async def forget(core: EngineCore, tenant: str | None, name: str) -> bool:
    """Delete ``tenant``'s snapshot ``name`` from the archive store; whether it was there."""
    if not await is_stored(core, tenant, name):
        return False
    assert core.archive_store is not None
    await core.archive_store.delete(store_key(tenant, name))
    return True
