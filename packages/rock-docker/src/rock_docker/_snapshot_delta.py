"""Incremental snapshots on Docker: a snapshot of a sandbox whose latest snapshot was made of the
same container is that snapshot's image plus ONE new layer holding only what changed since, so
only the changes are copied (a fork after an episode's step copies the step, not the 200 MiB
the task prepared before).

When it applies (:func:`plan_delta`, before the freeze): the previous snapshot's mark
(:mod:`rock_docker._snapshot_reuse`) names this very container and the host's clock has not
stepped since; the storage driver is overlay2 and its directories are readable here (a local
engine, as root); the previous snapshot's layers start with the container's image's layers and
are at most :data:`MAX_LAYERS` (Docker refuses more than 125 in an image); its configuration is
in Docker's image store, matching its id. Otherwise, or when a new mark cannot be made (a file
mapped shared and writable), or the walk meets something it does not handle
(:mod:`rock_docker._delta_layer` lists what), or the load fails, the snapshot is a full
``docker commit`` as before: never a wrong one. An archive snapshot (``changes``) is always a
full commit.

How: while the container is frozen (the same pause as the commit's), the new mark is taken and
:func:`rock_docker._delta_layer.write_delta_layer` writes the changed entries of the writable
layer into an anonymous temporary file. After the thaw, :func:`load_delta` makes the image with
``docker load`` (``POST /images/load``) of a tar holding ``manifest.json``, the new
configuration (the previous snapshot's, with the new layer's digest added to
``rootfs.diff_ids``, one more history entry, and the labels a commit would give: the new mark,
time, base size and the engine's labels) and ONLY the new layer's file. Docker finds the
layers it already has by their chain id and never reads them from the tar (moby's
``image/tarexport/load.go``: ``lss.Get(chainID)`` before ``loadLayer``), so the image shares
every layer of the previous snapshot. It is tagged ``rock-snapshot:<32 hex>`` like a commit
(listing, deletion, tenancy and reuse see no difference); it has no parent image, so the
previous snapshot can be deleted while it stays.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from rock_core.runtime import SnapshotImage
from rock_docker._delta_layer import DeltaLayer, Fallback, LayerView, write_delta_layer
from rock_docker._snapshot_reuse import mark_time

__all__ = ["MAX_LAYERS", "DeltaPlan", "load_delta", "plan_delta"]

#: A snapshot with more layers than this is a full commit (which starts the chain again).
MAX_LAYERS = 100


class DeltaPlan:
    """What an incremental snapshot over ``previous`` needs, read before the freeze."""

    def __init__(
        self,
        *,
        upper: str,
        base_dirs: Sequence[str],
        own_dirs: Sequence[str],
        floor_ns: int,
        config: Mapping[str, Any],
    ) -> None:
        self.upper = upper
        self.base_dirs = list(base_dirs)
        self.own_dirs = list(own_dirs)
        self.floor_ns = floor_ns
        self.config = config

    def write_layer(self, out: IO[bytes]) -> tuple[DeltaLayer | None, str]:
        """The layer of the changes since the previous snapshot's mark, written to ``out``
        (the container frozen), or ``None`` and why it falls back to a full commit."""
        try:
            with LayerView(self.base_dirs) as base, LayerView(self.own_dirs) as own:
                return write_delta_layer(self.upper, base, own, self.floor_ns, out), ""
        except (Fallback, OSError) as exc:
            return None, str(exc) or type(exc).__name__


def _layer_dirs(image: Mapping[str, Any]) -> list[str] | None:
    """The overlay2 directories of an image's layers, top first (``None``: not overlay2)."""
    driver = image.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    if driver.get("Name") != "overlay2" or not data.get("UpperDir"):
        return None
    lower = str(data.get("LowerDir") or "")
    return [str(data["UpperDir"]), *(lower.split(":") if lower else [])]


def _raw_config(upper: str, image_id: str) -> dict[str, Any] | None:
    """The image's configuration as Docker keeps it (its id is the digest of these bytes),
    read from the image store beside the overlay2 directories; ``None``: not found."""
    diff = Path(upper)
    if diff.name != "diff" or diff.parent.parent.name != "overlay2":
        return None
    algorithm, _, hexdigest = image_id.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        return None
    path = diff.parent.parent.parent / "image" / "overlay2" / "imagedb" / "content" / "sha256"
    try:
        fd = os.open(path / hexdigest, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as stored:
            raw = stored.read()
    except OSError:
        return None
    if hashlib.sha256(raw).hexdigest() != hexdigest:
        return None
    config: dict[str, Any] = json.loads(raw)
    return config


def plan_delta(
    api: docker.APIClient,
    info: Mapping[str, Any],
    base: Mapping[str, Any],
    previous: SnapshotImage,
) -> tuple[DeltaPlan | None, str]:
    """Whether a snapshot of the container ``info`` (its image ``base``) can be ``previous``
    plus a layer, and what that needs; else ``None`` and why (blocking)."""
    wall = mark_time(str(info.get("Id", "")), previous.labels)
    if wall is None:
        return None, "the previous snapshot's mark is not this container's, or the clock stepped"
    try:
        prev = api.inspect_image(previous.image_id)
    except docker.errors.APIError:
        return None, "the previous snapshot's image is gone"
    container_dirs = _layer_dirs(info)
    base_dirs, prev_dirs = _layer_dirs(base), _layer_dirs(prev)
    if container_dirs is None or base_dirs is None or prev_dirs is None:
        return None, "not overlay2"
    base_layers = list((base.get("RootFS") or {}).get("Layers") or [])
    prev_layers = list((prev.get("RootFS") or {}).get("Layers") or [])
    own = len(prev_layers) - len(base_layers)
    if own < 1 or prev_layers[: len(base_layers)] != base_layers:
        return None, "the previous snapshot is not over the container's image"
    if len(prev_layers) + 1 > MAX_LAYERS:
        return None, f"more than {MAX_LAYERS} layers"
    if len(prev_dirs) != len(prev_layers) or prev_dirs[own:] != base_dirs:
        return None, "the layers' directories do not match the layers"
    upper = container_dirs[0]
    config = _raw_config(upper, str(prev.get("Id", "")))
    if config is None:
        return None, "the previous snapshot's configuration is not readable here"
    if list((config.get("rootfs") or {}).get("diff_ids") or []) != prev_layers:
        return None, "the previous snapshot's configuration does not match its layers"
    plan = DeltaPlan(
        upper=upper,
        base_dirs=base_dirs,
        own_dirs=prev_dirs[:own],
        floor_ns=wall,
        config=config,
    )
    return plan, ""


def _add(tar: tarfile.TarFile, name: str, data: bytes | IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    tar.addfile(info, io.BytesIO(data) if isinstance(data, bytes) else data)


def load_delta(
    api: docker.APIClient,
    plan: DeltaPlan,
    layer: DeltaLayer,
    layer_file: IO[bytes],
    *,
    env: Sequence[str],
    labels: Mapping[str, str],
    reference: str,
) -> str:
    """Make the image ``reference`` (``repository:tag``): the previous snapshot's layers and
    configuration (with ``env`` and ``labels``) plus ``layer``, read from ``layer_file``, by
    ``docker load`` of a tar holding only the new layer. Returns the image's id (blocking).

    :raises docker.errors.APIError: Docker refused it (the caller makes a full commit).
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    config = json.loads(json.dumps(plan.config))
    config.setdefault("config", {})
    config["config"]["Env"], config["config"]["Labels"] = list(env), dict(labels)
    config["created"] = now
    diff_ids = [*config["rootfs"]["diff_ids"], layer.diff_id]
    config["rootfs"]["diff_ids"] = diff_ids
    config["history"] = [
        *(config.get("history") or []),
        {"created": now, "created_by": "rock snapshot: the files changed since the previous one"},
    ]
    raw = json.dumps(config, separators=(",", ":")).encode()
    image_hex = hashlib.sha256(raw).hexdigest()
    paths = [f"{diff_id.partition(':')[2]}/layer.tar" for diff_id in diff_ids]
    manifest = [{"Config": f"{image_hex}.json", "RepoTags": [reference], "Layers": paths}]
    with open_anonymous() as bundle:
        with tarfile.open(fileobj=bundle, mode="w|") as tar:
            listed = json.dumps(manifest).encode()
            _add(tar, "manifest.json", listed, len(listed))
            _add(tar, f"{image_hex}.json", raw, len(raw))
            layer_file.seek(0)
            _add(tar, paths[-1], layer_file, layer.size)
        bundle.seek(0)
        for line in api.load_image(bundle):
            if isinstance(line, dict) and line.get("error"):
                raise docker.errors.APIError(f"docker load: {line['error']}")
    return f"sha256:{image_hex}"


def open_anonymous() -> IO[bytes]:
    """A temporary file with no name (the sandbox cannot reach it); removed when closed."""
    return tempfile.TemporaryFile()
