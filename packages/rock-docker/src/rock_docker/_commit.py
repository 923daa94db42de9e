"""Snapshots kept as images on the Docker host: ``docker commit`` of a sandbox's container.

What the commit keeps is the container's writable layer over its image, as Docker stores it:
added and changed files with their owners, modes, times and symlinks, and deletions of the
image's files as whiteouts, so a container made from the snapshot sees exactly the sandbox's
files. Bind mounts are not in it (the rocklet at ``/rock``, the socket folder at ``/rock-run``,
Docker's ``/etc/hosts``); processes and memory are not either. A running container is paused
for the copy only (and the mark that lets a later fork reuse the image while nothing changed:
:mod:`rock_docker._snapshot_reuse`); how long the pause lasted is ``frozen_seconds``. When the
sandbox's latest snapshot was made of this same container, the new one is that snapshot's image
plus one layer of what changed since, made in the same pause (:mod:`rock_docker._snapshot_delta`;
whatever it does not handle is a full commit).

The image's configuration is the base image's, not the sandbox's: Docker merges the committed
container's environment and labels into whatever configuration the commit is given, and cannot
drop a key, so the variables named in ``strip_env`` (the rocklet's secret) are set empty and the
container's own labels (``rock.*``: its sandbox id, engine, owner, rocklet socket) are set empty,
then overridden by each new container's labels at its create.

Images are tagged ``rock-snapshot:<32 hex>`` and found by their labels (:data:`LABEL_PREFIX`).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import docker
import docker.errors

from rock_core.errors import BadRequestRockError, RockError
from rock_core.runtime import SnapshotImage, UnitHandle
from rock_docker._delta_layer import DeltaLayer
from rock_docker._snapshot import plan_changes
from rock_docker._snapshot_delta import load_delta, open_anonymous, plan_delta
from rock_docker._snapshot_reuse import LABEL_MARK, freeze_mark, unchanged_since
from rock_docker._snapshot_transfer import CONFIG_KEYS, SnapshotTransfer

__all__ = ["REPOSITORY", "SnapshotImages"]

T = TypeVar("T")
log = logging.getLogger("rock.docker")

#: The repository of every snapshot image.
REPOSITORY = "rock-snapshot"
#: The label holding the base image's size, so a listing can tell the snapshot's own bytes.
_BASE_SIZE = "rock.snapshot.base_size"
_CREATED = "rock.snapshot.created"

# One freeze of a container at a time: two snapshots of one sandbox at once would otherwise
# both pause it (the second refused, "already paused") and the first thaw the second's copy.
_freezing = threading.Lock()
_freeze_locks: dict[str, threading.Lock] = {}
_freeze_users: Counter[str] = Counter()


@contextmanager
def _one_freeze_at_a_time(unit_id: str) -> Iterator[None]:
    with _freezing:
        lock = _freeze_locks.setdefault(unit_id, threading.Lock())
        _freeze_users[unit_id] += 1
    try:
        with lock:
            yield
    finally:
        with _freezing:
            _freeze_users[unit_id] -= 1
            if not _freeze_users[unit_id]:
                del _freeze_users[unit_id], _freeze_locks[unit_id]


def _snapshot_of(summary: Mapping[str, Any], reference: str | None = None) -> SnapshotImage:
    labels = dict(summary.get("Labels") or {})
    tags = [t for t in summary.get("RepoTags") or [] if t.startswith(f"{REPOSITORY}:")]
    try:
        base = int(labels.get(_BASE_SIZE, "0"))
        created = float(labels.get(_CREATED, "0"))
    except ValueError:
        base, created = 0, 0.0
    return SnapshotImage(
        image_id=str(summary.get("Id", "")),
        reference=reference or (tags[0] if tags else str(summary.get("Id", ""))),
        labels={k: v for k, v in labels.items() if k not in (_BASE_SIZE,)},
        size=max(0, int(summary.get("Size") or 0) - base),
        created=created,
    )


class SnapshotImages(SnapshotTransfer):
    """:class:`~rock_docker.runtime.DockerRuntime`'s snapshots as images (capability
    ``snapshot_image``), and to and from the archive store
    (:class:`~rock_docker._snapshot_transfer.SnapshotTransfer`); a mixin, its blocking calls
    run through the runtime's ``_run``."""

    _run: Callable[..., Any]
    _docker: Callable[[], docker.DockerClient]

    async def snapshot_image(
        self,
        handle: UnitHandle,
        *,
        labels: Mapping[str, str],
        strip_env: Sequence[str],
        changes: bool = False,
        over: SnapshotImage | None = None,
    ) -> SnapshotImage:
        """``docker commit`` (paused for the copy) under a new ``rock-snapshot`` tag. With
        ``changes``, ``docker diff`` lists the changes while the container is paused for the
        commit, and the answer carries them (for :meth:`export_snapshot_image`). With ``over``
        (the sandbox's latest snapshot) and no ``changes``, the image is ``over`` plus one
        layer of what changed since it when it was made of this same container
        (:mod:`rock_docker._snapshot_delta`), else a full commit."""
        tag = secrets.token_hex(16)

        def commit(previous: SnapshotImage | None) -> SnapshotImage:
            api = self._docker().api
            info = api.inspect_container(handle.unit_id)
            config = info.get("Config") or {}
            base = api.inspect_image(info["Image"])
            base_config = base.get("Config") or {}
            base_labels = base_config.get("Labels") or {}
            stripped = set(strip_env)
            env = [e for e in config.get("Env") or [] if e.split("=", 1)[0] not in stripped]
            env += [f"{name}=" for name in strip_env]
            own_labels = {k: "" for k in config.get("Labels") or {} if k not in base_labels}
            image_labels = {
                **own_labels,
                **labels,
                _BASE_SIZE: str(base.get("Size") or 0),
                _CREATED: repr(time.time()),
            }
            conf = {
                "Env": env,
                "Labels": image_labels,
                "Cmd": base_config.get("Cmd"),
                "Entrypoint": base_config.get("Entrypoint"),
                "WorkingDir": base_config.get("WorkingDir") or "",
                "User": base_config.get("User") or "",
            }
            plan, why = plan_delta(api, info, base, previous) if previous else (None, "")
            if why:
                log.info("snapshot of %s: a full commit: %s", handle.sandbox_id, why)
            state = info.get("State") or {}
            running = bool(state.get("Running"))
            t0 = time.monotonic()
            rows: list[Any] = []
            delta: DeltaLayer | None = None
            made_id = ""
            # Frozen for the mark, the list and the copy together: the list is the copy's.
            freeze = running and not state.get("Paused")
            with open_anonymous() as layer_file, _one_freeze_at_a_time(handle.unit_id):
                if freeze:
                    try:
                        api.pause(handle.unit_id)
                    except docker.errors.APIError as exc:
                        if exc.status_code != 409:  # 409: paused meanwhile, by its owner
                            raise
                        freeze = False
                try:
                    # No mark: set empty, or the one a snapshot's child inherited would stay.
                    mark = freeze_mark(api, handle.unit_id, running=running)
                    image_labels[LABEL_MARK] = mark or ""
                    if plan is not None and mark:
                        delta, why = plan.write_layer(layer_file)
                        if delta is None:
                            log.info("snapshot of %s: a full commit: %s", handle.sandbox_id, why)
                    if delta is None:
                        if changes:
                            rows = api.diff(handle.unit_id) or []
                        made = api.commit(
                            handle.unit_id, repository=REPOSITORY, tag=tag, conf=conf, pause=False
                        )
                        made_id = made["Id"]
                finally:
                    if freeze:
                        api.unpause(handle.unit_id)
                took = time.monotonic() - t0
                if delta is not None and plan is not None:
                    try:
                        made_id = load_delta(
                            api,
                            plan,
                            delta,
                            layer_file,
                            env=env,
                            # As the commit merges them: the container's, then the given ones.
                            labels={**(config.get("Labels") or {}), **image_labels},
                            reference=f"{REPOSITORY}:{tag}",
                        )
                    except (docker.errors.APIError, OSError) as exc:
                        log.warning("snapshot of %s: load failed (%s)", handle.sandbox_id, exc)
                        return commit(None)
            image = api.inspect_image(made_id)
            made_config = image.get("Config") or {}
            summary = {**image, "Labels": made_config.get("Labels")}
            snap = _snapshot_of(summary, f"{REPOSITORY}:{tag}")
            kept = {k: made_config[k] for k in CONFIG_KEYS if made_config.get(k) is not None}
            return SnapshotImage(
                image_id=snap.image_id,
                reference=snap.reference,
                labels=snap.labels,
                size=snap.size,
                created=snap.created,
                frozen_seconds=took if running else 0.0,
                changes=plan_changes(info, rows, kept) if changes else None,
            )

        result: SnapshotImage = await self._run(
            lambda: commit(None if changes else over),
            attempted="snapshot",
            sandbox_id=handle.sandbox_id,
        )
        return result

    async def snapshot_unchanged(self, handle: UnitHandle, image: SnapshotImage) -> bool:
        """Whether the container's files are those ``image`` kept: nothing in its writable layer
        changed since the commit's mark (:mod:`rock_docker._snapshot_reuse`)."""
        result: bool = await self._run(
            lambda: unchanged_since(self._docker().api, handle.unit_id, image.labels),
            attempted="fork",
            sandbox_id=handle.sandbox_id,
        )
        return result

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        """The image's labels (one ``docker image inspect``; ``None``: no such image here)."""

        def labels() -> dict[str, str] | None:
            try:
                found = self._docker().api.inspect_image(image)
            except (docker.errors.NotFound, docker.errors.APIError):
                return None  # not here, or a name Docker cannot parse (the pull says so)
            return dict((found.get("Config") or {}).get("Labels") or {})

        result: dict[str, str] | None = await self._run(labels, attempted="image_pull")
        return result

    async def snapshot_images(self, labels: Mapping[str, str]) -> Sequence[SnapshotImage]:
        """The ``rock-snapshot`` images carrying every one of ``labels``."""

        def listing() -> list[SnapshotImage]:
            wanted = [f"{k}={v}" for k, v in labels.items()] + [_CREATED]
            found = self._docker().api.images(name=REPOSITORY, filters={"label": wanted})
            return sorted((_snapshot_of(s) for s in found), key=lambda s: s.created)

        result: list[SnapshotImage] = await self._run(listing, attempted="snapshots")
        return result

    async def delete_snapshot_image(self, image_id: str) -> None:
        """``docker rmi`` (not forced): refused while a container uses the image."""

        def remove() -> str | None:
            try:
                self._docker().api.remove_image(image_id, force=False)
            except docker.errors.ImageNotFound:
                return None
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    return str(exc.explanation or exc)
                raise
            return None

        conflict = await self._run(remove, attempted="delete_snapshot")
        if conflict is None:
            return
        if "dependent child images" in conflict:
            why = "snapshots of sandboxes started from it are made over it (delete them first)"
        else:
            why = "the snapshot is still used by sandboxes (stop and delete them first)"
        raise BadRequestRockError(f"{why}: {conflict}", attempted="delete_snapshot")

    async def tag_image(
        self,
        image_id: str,
        reference: str,
        *,
        untag: str | None = None,
        replaceable: Mapping[str, str] | None = None,
    ) -> None:
        """``docker tag`` the image as ``reference``, then take ``untag`` off it (only the name:
        the image stays while it has another). An image already named ``reference`` is only
        renamed when its labels hold every one of ``replaceable``; otherwise it is refused."""
        repository, _, tag = reference.rpartition(":")
        if "/" in tag or not repository:
            repository, tag = reference, "latest"

        def retag() -> str | None:
            api = self._docker().api
            try:
                existing = api.inspect_image(f"{repository}:{tag}")
            except docker.errors.ImageNotFound:
                existing = None
            if existing is not None and replaceable is not None:
                have = (existing.get("Config") or {}).get("Labels") or {}
                if any(have.get(k) != v for k, v in replaceable.items()):
                    return f"{repository}:{tag}"
            api.tag(image_id, repository, tag, force=True)
            if untag is not None:
                api.remove_image(untag, noprune=True)
            return None

        taken = await self._run(retag, attempted="commit")
        if taken is not None:
            raise BadRequestRockError(
                f"image_tag: {taken} already names an image on this node that is not a commit "
                "of this tenant; choose another tag",
                attempted="commit",
            )

    async def push_image(self, reference: str, *, username: str, password: str) -> None:
        """``docker push`` with the credentials given for this push only (no ``docker login``:
        nothing is written to the host's Docker configuration)."""
        repository, _, tag = reference.rpartition(":")
        if "/" in tag or not repository:
            repository, tag = reference, "latest"
        auth = {"username": username, "password": password} if username else None

        def push() -> str | None:
            stream = self._docker().api.push(
                repository, tag=tag, auth_config=auth, stream=True, decode=True
            )
            for line in stream:
                if isinstance(line, dict) and line.get("error"):
                    return str(line["error"])
            return None

        error = await self._run(push, attempted="commit")
        if error is not None:
            raise RockError(f"push of {reference} failed: {error}", attempted="commit")
