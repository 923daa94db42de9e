"""What a runtime answers about a snapshot it keeps as an image (:class:`SnapshotImage`), apart
from :mod:`rock_core.runtime` (which exports it) to keep that module short."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["SnapshotImage"]


@attrs.frozen
class SnapshotImage:
    """A snapshot of a unit's files kept by the runtime on its node (:meth:`Runtime.snapshot_image`).

    :param image_id: the runtime's id of it (Docker: the image id).
    :param reference: what a spec's ``image`` names to start a unit from it.
    :param labels: the labels it was made with (tenant, name, source sandbox, created).
    :param size: bytes it adds over its image (Docker: the committed layer).
    :param created: when it was made (seconds since the epoch).
    :param frozen_seconds: how long the unit was frozen for the copy (only on the answer of
        :meth:`Runtime.snapshot_image`; ``None`` in a listing).
    :param changes: the runtime's own account of what the snapshot changed over its image, for
        :meth:`Runtime.export_snapshot_image` (only on the answer of
        :meth:`Runtime.snapshot_image` asked for ``changes``; opaque to the engine).
    """

    image_id: str
    reference: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    size: int = 0
    created: float = 0.0
    frozen_seconds: float | None = None
    changes: Any = attrs.field(default=None, eq=False, repr=False)
