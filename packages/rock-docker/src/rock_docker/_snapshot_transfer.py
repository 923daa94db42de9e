"""Snapshot images to and from the archive store: what lets another node, or a later day, start
from a snapshot that is no longer (or never was) on this node.

Export writes the snapshot in the archive's format (:mod:`rock_docker._snapshot`: the files it
added or changed over its base image, read with Docker's archive endpoint, with owners, modes,
times and symlinks, and the paths it deleted), never the base image, with the image's
configuration in the header. The paths are those ``docker diff`` listed while the sandbox was
frozen for the commit (:meth:`SnapshotImages.snapshot_image` with ``changes``), read from a
container made from the snapshot image and never started, so they are the snapshot's files
even when the sandbox changed them since.

Import makes the snapshot image again: a container of the base image (pulled if it is not on
the node), the files put into it, the deletions done by running it once (a shell step, as a
restored sandbox does them), then committed with the snapshot's configuration and a new
``rock-snapshot`` tag. Its temporary containers are named ``rock-snapshot-io-<hex>``, carry the
engine's ``unit_labels`` and are removed before the call returns; those of an admin that died
in the middle are removed by the next one's start-up sweep (by those labels).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import docker
import docker.errors

from rock_core.errors import BadRequestRockError, RockError, RuntimeFailure
from rock_core.runtime import SnapshotImage
from rock_docker._images import image_present, pull_image
from rock_docker._snapshot import (
    APPLY_DELETIONS,
    RESTORE_DIR,
    SnapshotPlan,
    SnapshotReader,
    ThreadedIterator,
    snapshot_frames,
    upload_snapshot,
)

__all__ = ["CONFIG_KEYS", "TEMPORARY_PREFIX", "SnapshotTransfer"]

#: The image configuration a stored snapshot carries.
CONFIG_KEYS = ("Env", "Labels", "Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts")
#: The name of the containers export and import make for a moment.
TEMPORARY_PREFIX = "rock-snapshot-io-"
_REPOSITORY = "rock-snapshot"
_BASE_SIZE = "rock.snapshot.base_size"
_CREATED = "rock.snapshot.created"
# Run once by the import's container: the restore's deletions, then the list's folder.
_DELETE_THEN_TIDY = f"{APPLY_DELETIONS}rmdir {RESTORE_DIR} 2>/dev/null; true"


def _remove(api: docker.APIClient, container_id: str) -> None:
    try:
        api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass


class SnapshotTransfer:
    """Export and import of snapshot images (a mixin of the runtime; see the module)."""

    _run: Callable[..., Any]
    _docker: Callable[[], docker.DockerClient]

    async def export_snapshot_image(
        self, image: SnapshotImage, *, unit_labels: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """The snapshot's files over its base image, in the archive's format (module docstring).

        :raises RockError: ``image`` was not made with its changes.
        :raises BadRequestRockError: its sandbox was started from a snapshot (its files are over
            an image only this node has).
        """
        plan = image.changes
        if not isinstance(plan, SnapshotPlan):
            raise RockError(
                f"snapshot {image.reference} was made without its list of changes: it cannot "
                "be kept in the archive store",
                attempted="snapshot",
            )
        if plan.image.startswith(f"{_REPOSITORY}:"):
            raise BadRequestRockError(
                "archive: the sandbox was started from a snapshot, whose image only this node "
                "has; a snapshot of it cannot be kept in the archive store",
                attempted="snapshot",
            )

        return self._streamed(image.image_id, plan, dict(unit_labels or {}))

    async def _streamed(
        self, image_id: str, plan: SnapshotPlan, unit_labels: dict[str, str]
    ) -> AsyncIterator[bytes]:
        """The export's frames, read in worker threads from a container of ``image_id`` made
        when the stream is first read and removed when it ends or is closed."""

        def create() -> str:
            made = self._docker().api.create_container(
                image_id,
                command=["true"],
                name=f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}",
                network_disabled=True,
                labels=unit_labels,
            )
            return str(made["Id"])

        temporary: str = await self._run(create, attempted="snapshot")
        chunks = ThreadedIterator(
            snapshot_frames(self._docker().api, temporary, plan),
            lambda step: self._run(step, attempted="snapshot"),
        )
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await self._run(
                    lambda: _remove(self._docker().api, temporary), attempted="snapshot"
                )

    async def import_snapshot_image(
        self,
        data: AsyncIterable[bytes],
        *,
        labels: Mapping[str, str],
        unit_labels: Mapping[str, str] | None = None,
    ) -> SnapshotImage:
        """A ``rock-snapshot`` image made again from an export's bytes (module docstring),
        labelled with ``labels`` over the ones it was made with.

        :raises SnapshotCorrupt: the bytes are not a whole export (cut short, corrupted).
        :raises ImagePullFailed: its base image is not on the node and cannot be pulled.
        """
        reader = SnapshotReader(data, sandbox_id=None)
        header = await reader.header()
        config = dict(header.get("config") or {})
        base_name, base_id = str(header["image"]), str(header.get("image_id") or "")

        def create() -> tuple[str, int]:
            api = self._docker().api
            # The base image as it was, if the node has it; else by name (pulled if missing).
            base = base_id if base_id and image_present(api, base_id, None) else base_name
            if base == base_name and not image_present(api, base_name, None):
                pull_image(api, base_name, None, None)
            deletes = bool(header.get("deleted"))
            made = api.create_container(
                base,
                entrypoint=["sh", "-c", _DELETE_THEN_TIDY] if deletes else None,
                command=[] if deletes else ["true"],
                user="0",
                name=f"{TEMPORARY_PREFIX}{secrets.token_hex(8)}",
                network_disabled=True,
                labels=dict(unit_labels or {}),
            )
            return str(made["Id"]), int(api.inspect_image(base).get("Size") or 0)

        temporary, base_size = await self._run(create, attempted="start")
        try:
            stop = threading.Event()
            try:
                await self._run(
                    lambda: upload_snapshot(
                        self._docker().api, temporary, reader, stop, sandbox_id=None
                    ),
                    attempted="start",
                    abandon_on_cancel=True,
                )
            finally:
                stop.set()
            image_labels = {
                **(config.get("Labels") or {}),
                **labels,
                _BASE_SIZE: str(base_size),
            }
            image_labels.setdefault(_CREATED, repr(time.time()))
            made = await self._run(
                lambda: self._commit_import(
                    temporary, config, image_labels, bool(header.get("deleted"))
                ),
                attempted="start",
            )
        finally:
            with anyio.CancelScope(shield=True):
                await self._run(lambda: _remove(self._docker().api, temporary), attempted="start")
        return made

    def _commit_import(
        self, temporary: str, config: Mapping[str, Any], labels: Mapping[str, str], deletes: bool
    ) -> SnapshotImage:
        """Run the container once if it has deletions to do, then commit it (blocking)."""
        api = self._docker().api
        if deletes:
            api.start(temporary)
            status = api.wait(temporary, timeout=300)
            if int(status.get("StatusCode", 1)) != 0:
                logs = api.logs(temporary, stdout=True, stderr=True, tail=20)
                raise RuntimeFailure(
                    "the snapshot's deletions could not be done over its base image: "
                    + logs.decode(errors="replace").strip(),
                    attempted="start",
                )
        conf = {key: config.get(key) for key in CONFIG_KEYS if key in config}
        conf["Labels"] = dict(labels)
        # An empty entrypoint is kept as one; None would take the temporary container's.
        conf["Entrypoint"] = config.get("Entrypoint") or []
        conf["Cmd"] = config.get("Cmd") or []
        tag = secrets.token_hex(16)
        made = api.commit(temporary, repository=_REPOSITORY, tag=tag, conf=conf, pause=False)
        inspected = api.inspect_image(made["Id"])
        image_labels = dict((inspected.get("Config") or {}).get("Labels") or {})
        try:
            created = float(image_labels.get(_CREATED, "0"))
        except ValueError:
            created = 0.0
        return SnapshotImage(
            image_id=str(inspected["Id"]),
            reference=f"{_REPOSITORY}:{tag}",
            labels={k: v for k, v in image_labels.items() if k != _BASE_SIZE},
            size=max(0, int(inspected.get("Size") or 0) - int(labels.get(_BASE_SIZE, "0"))),
            created=created,
        )
