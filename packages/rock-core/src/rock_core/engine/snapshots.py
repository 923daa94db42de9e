"""Filesystem snapshots of sandboxes, starts from them, and forks (runtime capability
``snapshot_image``).

:func:`snapshot` keeps a running or stopped sandbox's files over its image as an image on the
runtime's node (Docker: ``docker commit``, the container paused for the copy only), labelled with
its tenant, name, source sandbox and creation time. Processes are not captured: a sandbox started
from a snapshot has the files, none of the processes, sessions or memory. The image carries no
secret of the engine (the rocklet's token is blanked in its configuration). The runtime is given
the sandbox's latest snapshot (``over``) and may build on it: Docker copies only what changed
since, as one more layer over that snapshot's image (:mod:`rock_docker._snapshot_delta`).

A snapshot belongs to the tenant of the sandbox it was made from: :func:`list_snapshots`,
:func:`delete_snapshot` and :func:`resolve_start` (a start's ``snapshot``) see only the caller's
tenant's, and another tenant's name is an unknown snapshot. :func:`fork` makes a snapshot (or
takes the sandbox's latest, when the runtime tells nothing changed since) and accepts ``count``
starts from it, with the parent's settings and priority, through the start
queue; the count is checked against the tenant's quota first, all of it at once.
"""

from __future__ import annotations

import re
import secrets
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime

import anyio
import attrs

from rock_core.actions import SandboxStartRequest, SnapshotInfo
from rock_core.engine import snapshot_store, starting, stopping
from rock_core.engine.core import EngineCore
from rock_core.engine.starting import IDEMPOTENCY_METADATA_KEY
from rock_core.errors import (
    BadRequestRockError,
    InvalidParameter,
    NotSupported,
    QuotaExceeded,
    RockError,
    SandboxNotFound,
)
from rock_core.models import NonBlankStr, PullPolicy, SandboxRecord, SandboxSpec, SizeStr
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.runtime import SnapshotImage
from rock_core.states import State
from rock_core.tenancy import Quota, Usage, quota_refusal, tenant_usage, usage_of

__all__ = [
    "LABEL_NAME",
    "LABEL_SANDBOX",
    "LABEL_TENANT",
    "delete_snapshot",
    "fork",
    "list_snapshots",
    "resolve_start",
    "snapshot",
    "snapshot_counts",
    "snapshot_reference",
]

LABEL_ENGINE = "rock.snapshot.engine"
LABEL_TENANT = "rock.snapshot.tenant"
LABEL_NAME = "rock.snapshot.name"
LABEL_SANDBOX = "rock.snapshot.sandbox"
LABEL_SOURCE_IMAGE = "rock.snapshot.source_image"

_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
#: Seconds a deletion refused for sandboxes still in use waits for removals under way.
_REMOVALS_WAIT = 10.0
_making: weakref.WeakKeyDictionary[EngineCore, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def _require(core: EngineCore, attempted: str) -> None:
    caps = core.runtime.capabilities
    if not caps.snapshot_image:
        raise NotSupported(caps.missing("snapshot_image", core.runtime.name), attempted=attempted)


def _scope(core: EngineCore, tenant: str) -> dict[str, str]:
    return {LABEL_ENGINE: core.config.engine_label, LABEL_TENANT: tenant}


def _info(image: SnapshotImage) -> SnapshotInfo:
    return SnapshotInfo(
        name=image.labels.get(LABEL_NAME, ""),
        sandbox_id=image.labels.get(LABEL_SANDBOX, ""),
        size=image.size,
        created_at=datetime.fromtimestamp(image.created, tz=UTC),
        image=image.reference,
        source_image=image.labels.get(LABEL_SOURCE_IMAGE) or None,
        frozen_seconds=image.frozen_seconds,
        archived=image.labels.get(snapshot_store.LABEL_ARCHIVED) == "1",
    )


def _record_of(
    core: EngineCore, sandbox_id: str, tenant: str | None, attempted: str
) -> SandboxRecord:
    record = core.get_record(sandbox_id)
    if tenant is not None and (record.spec.tenant or core.owner) != tenant:
        raise SandboxNotFound(
            f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted=attempted
        )
    return record


async def _find(core: EngineCore, tenant: str, name: str) -> SnapshotImage | None:
    found = await core.runtime.snapshot_images({**_scope(core, tenant), LABEL_NAME: name})
    return found[0] if found else None


def _stored_as(core: EngineCore, tenant: str | None) -> str | None:
    """The tenant a snapshot is kept under in the archive store: an API key's; ``None`` for
    the engine's own (no keys: every engine sharing the store finds it)."""
    return None if tenant in (None, core.owner) else tenant


async def _find_or_fetch(
    core: EngineCore, tenant: str | None, name: str, attempted: str
) -> SnapshotImage | None:
    """``tenant``'s snapshot (``None``: the engine's owner's) on the node, else the archive
    store's made an image here (once)."""
    owner = tenant or core.owner
    found = await _find(core, owner, name)
    if found is not None:
        return found
    labels = {**_scope(core, owner), LABEL_NAME: name}
    return await snapshot_store.fetch(core, _stored_as(core, tenant), name, labels, attempted)


def _name_taken(owner: str, name: str) -> InvalidParameter:
    return InvalidParameter(
        f"name: tenant {owner!r} already has a snapshot {name!r}",
        field="name",
        value=name,
        attempted="snapshot",
    )


def _unknown(name: str, attempted: str) -> InvalidParameter:
    return InvalidParameter(
        f"snapshot: unknown snapshot {name!r}", field="snapshot", value=name, attempted=attempted
    )


async def snapshot(
    core: EngineCore,
    sandbox_id: str,
    name: str | None = None,
    *,
    tenant: str | None = None,
    quota: Quota | None = None,
    archive: bool = False,
) -> SnapshotInfo:
    """Keep the files of ``sandbox_id`` (running or stopped, its unit kept) as the snapshot
    ``name`` (default ``snap-<12 hex>``) of the sandbox's tenant. ``tenant``: the caller's (a
    sandbox of another tenant is not found); ``quota``: its ``max_snapshots``; ``archive``:
    kept in the archive store as well (:mod:`~rock_core.engine.snapshot_store`), the call
    returning once it is stored.

    :raises NotSupported: the runtime lacks the capability ``snapshot_image``.
    :raises InvalidParameter: a bad name, or one the tenant already uses (on the node, or in
        the archive store with ``archive``); ``archive`` without an archive store.
    :raises BadRequestRockError: the sandbox is neither running nor stopped with its unit.
    :raises QuotaExceeded: the tenant keeps ``max_snapshots`` snapshots already.
    """
    _require(core, "snapshot")
    if archive:
        snapshot_store.require_store(core, "snapshot")
    record = _record_of(core, sandbox_id, tenant, "snapshot")
    owner = record.spec.tenant or core.owner
    name = name or f"snap-{secrets.token_hex(6)}"
    if not _NAME.match(name):
        raise InvalidParameter(
            f"name: {name!r} is not a snapshot name (letters, digits, '_', '.', '-'; "
            "starting with a letter or digit; at most 128 characters)",
            field="name",
            value=name,
            attempted="snapshot",
        )
    live = core.live.get(sandbox_id)
    handle = live.handle if live is not None and not live.removing else None
    if handle is None or record.state not in (State.RUNNING, State.STOPPED):
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be snapshotted: current state is {record.state.value}; "
            "only a running sandbox, or a stopped one whose unit is kept, can be",
            sandbox_id=sandbox_id,
            attempted="snapshot",
        )
    # The names being made now, so two snapshots of one name cannot both pass the check;
    # snapshots of other names (every fork's) go on at the same time.
    making = _making.setdefault(core, set())
    if (owner, name) in making:
        raise _name_taken(owner, name)
    making.add((owner, name))
    try:
        kept = await core.runtime.snapshot_images(_scope(core, owner))
        if any(image.labels.get(LABEL_NAME) == name for image in kept) or (
            archive and await snapshot_store.is_stored(core, _stored_as(core, owner), name)
        ):
            raise _name_taken(owner, name)
        if archive and any(image.reference == record.spec.image for image in kept):
            raise BadRequestRockError(
                f"archive: sandbox {sandbox_id} was started from a snapshot, whose image only this "
                "node has; a snapshot of it cannot be kept in the archive store",
                sandbox_id=sandbox_id,
                attempted="snapshot",
            )
        if quota is not None and quota.max_snapshots is not None:
            # The others being made now count too (each holds its name in ``making``), and
            # those only the archive store holds (another node's, or whose image was removed).
            names = {image.labels.get(LABEL_NAME) for image in kept}
            names |= (await snapshot_store.stored_names(core)).get(_stored_as(core, owner), set())
            using = len(names) + sum(1 for o, _ in making if o == owner) - 1
            if using + 1 > quota.max_snapshots:
                raise QuotaExceeded(
                    f"snapshot: tenant {owner!r}: max_snapshots {quota.max_snapshots} reached "
                    f"(using {using}, asked 1); delete one first (rock sandbox snapshots)",
                    sandbox_id=sandbox_id,
                    attempted="snapshot",
                )
        labels = {
            **_scope(core, owner),
            LABEL_NAME: name,
            LABEL_SANDBOX: sandbox_id,
            LABEL_SOURCE_IMAGE: record.spec.image,
        }
        if archive:
            labels[snapshot_store.LABEL_ARCHIVED] = "1"
        # The sandbox's latest snapshot: the runtime may copy only what changed since.
        over = _latest_of(kept, sandbox_id) if not archive else None
        image = await core.runtime.snapshot_image(
            handle, labels=labels, strip_env=[TOKEN_ENV], changes=archive, over=over
        )
        info = _info(image)
        if archive:
            try:
                await snapshot_store.keep(core, _stored_as(core, owner), image, info)
            except BaseException:
                with anyio.CancelScope(shield=True):  # made whole, or not at all
                    await core.runtime.delete_snapshot_image(image.image_id)
                raise
    finally:
        making.discard((owner, name))
    return info


async def list_snapshots(core: EngineCore, tenant: str | None = None) -> list[SnapshotInfo]:
    """The snapshots of ``tenant`` (default: the engine's owner), oldest first: the node's,
    and those only the archive store has (``on_node`` false)."""
    _require(core, "snapshots")
    owner = tenant or core.owner
    found = [_info(image) for image in await core.runtime.snapshot_images(_scope(core, owner))]
    here = {info.name for info in found}
    only_stored = [
        info
        for info in await snapshot_store.stored(core, _stored_as(core, owner))
        if info.name not in here
    ]
    return sorted([*found, *only_stored], key=lambda info: info.created_at)


async def snapshot_counts(core: EngineCore) -> dict[str, int]:
    """How many snapshots each tenant keeps, on the node or only in the archive store (what
    ``max_snapshots`` counts); empty on a runtime without the capability ``snapshot_image``."""
    if not core.runtime.capabilities.snapshot_image:
        return {}
    names: dict[str, set[str]] = {}
    found = await core.runtime.snapshot_images({LABEL_ENGINE: core.config.engine_label})
    for image in found:
        names.setdefault(image.labels.get(LABEL_TENANT, ""), set()).add(
            image.labels.get(LABEL_NAME, "")
        )
    for tenant, stored in (await snapshot_store.stored_names(core)).items():
        names.setdefault(tenant or core.owner, set()).update(stored)
    return {tenant: len(kept) for tenant, kept in names.items()}


async def delete_snapshot(core: EngineCore, name: str, tenant: str | None = None) -> None:
    """Delete the snapshot ``name`` of ``tenant``.

    :raises InvalidParameter: no such snapshot of the tenant.
    :raises BadRequestRockError: sandboxes started from it still exist.
    """
    _require(core, "delete_snapshot")
    owner = tenant or core.owner
    image = await _find(core, owner, name)
    if image is not None:
        try:
            await core.runtime.delete_snapshot_image(image.image_id)
        except BadRequestRockError:
            # Sandboxes started from it that were stopped may still be on their way out (their
            # units leave in the background): once those are gone, the answer is the last word.
            if not await core.removals.settled(_REMOVALS_WAIT):
                raise
            await core.runtime.delete_snapshot_image(image.image_id)
    if not await snapshot_store.forget(core, _stored_as(core, owner), name) and image is None:
        raise _unknown(name, "delete_snapshot")


async def snapshot_reference(
    core: EngineCore, tenant: str | None, name: str, attempted: str
) -> str:
    """The image reference of ``tenant``'s snapshot ``name`` (a reset's target; ``None``: the
    engine's owner's), from the archive store if the node has none.

    :raises InvalidParameter: ``unknown snapshot``.
    :raises NotSupported: the runtime lacks the capability ``snapshot_image``.
    """
    _require(core, attempted)
    image = await _find_or_fetch(core, tenant, name, attempted)
    if image is None:
        raise _unknown(name, attempted)
    return image.reference


async def resolve_start(
    core: EngineCore, request: SandboxStartRequest, tenant: str | None
) -> SandboxStartRequest:
    """``request`` with a ``snapshot`` turned into that snapshot's image (never pulled).

    :raises InvalidParameter: ``unknown snapshot``: the tenant has none of that name.
    """
    if request.snapshot is None:
        return request
    _require(core, "start")
    image = await _find_or_fetch(core, tenant, request.snapshot, "start")
    if image is None:
        raise _unknown(request.snapshot, "start")
    return attrs.evolve(request, image=NonBlankStr(image.reference), pull=PullPolicy.NEVER)


def _child_request(spec: SandboxSpec, image: str) -> SandboxStartRequest:
    """A start of ``image`` with ``spec``'s settings (no id, no idempotency key)."""
    options = spec.runtime_options
    return SandboxStartRequest(
        image=NonBlankStr(image),
        image_os=spec.image_os,
        pull=PullPolicy.NEVER,
        memory=SizeStr(str(spec.memory)),
        cpus=spec.cpus,
        limit_cpus=spec.limit_cpus,
        disk=None if spec.disk is None else SizeStr(str(spec.disk)),
        num_gpus=spec.num_gpus,
        accelerator_type=spec.accelerator_type,
        startup_timeout=spec.startup_timeout,
        auto_clear_seconds=spec.auto_clear_seconds,
        auto_delete_seconds=spec.auto_delete_seconds,
        auto_archive_seconds=spec.auto_archive_seconds,
        use_kata_runtime=bool(options.get("use_kata_runtime")),
        env=dict(spec.env),
        metadata={k: v for k, v in spec.metadata.items() if k != IDEMPOTENCY_METADATA_KEY},
        network=options.get("network"),
        network_group=options.get("network_group"),
        pids_limit=spec.pids_limit,
        cap_add=list(spec.cap_add) or None,
        priority=spec.priority,
        restart_policy=spec.restart_policy,
        max_restarts=spec.max_restarts,
    )


async def _unchanged_since_snapshot(
    core: EngineCore, sandbox_id: str, owner: str
) -> SnapshotInfo | None:
    """The sandbox's latest snapshot on the node if the runtime tells its files have not changed
    since (capability ``snapshot_reuse``): a fork starts from it, with no new copy."""
    live = core.live.get(sandbox_id)
    handle = live.handle if live is not None and not live.removing else None
    if handle is None or not core.runtime.capabilities.snapshot_reuse:
        return None
    if live is None or live.record.state not in (State.RUNNING, State.STOPPED):
        return None  # the snapshot refuses it, saying why
    made = await core.runtime.snapshot_images({**_scope(core, owner), LABEL_SANDBOX: sandbox_id})
    latest = _latest_of(made, sandbox_id)
    if latest is None:
        return None
    return _info(latest) if await core.runtime.snapshot_unchanged(handle, latest) else None


def _latest_of(images: Sequence[SnapshotImage], sandbox_id: str) -> SnapshotImage | None:
    """The latest snapshot of ``sandbox_id`` among ``images`` (not ROCK's commits)."""
    named = [
        image
        for image in images
        if image.labels.get(LABEL_NAME) and image.labels.get(LABEL_SANDBOX) == sandbox_id
    ]
    return max(named, key=lambda image: image.created) if named else None


async def fork(
    core: EngineCore,
    sandbox_id: str,
    count: int,
    *,
    tenant: str | None = None,
    quota: Quota | None = None,
) -> tuple[SnapshotInfo, list[SandboxRecord]]:
    """Snapshot ``sandbox_id`` and accept ``count`` starts from the snapshot: sandboxes whose
    files equal the parent's at the call, with its settings and priority, through the start
    queue. Returns the snapshot and the ``pending`` records. A sandbox whose files have not
    changed since its latest snapshot (as the runtime tells: capability ``snapshot_reuse``)
    is forked from that snapshot, with no new one. If a start is refused, those
    already accepted are stopped (the snapshot stays, listed).

    :raises InvalidParameter: ``count`` below 1.
    :raises QuotaExceeded: ``count`` more sandboxes would take the tenant past ``quota``
        (checked before the snapshot, and again at each start), or its snapshot past
        ``max_snapshots``.
    """
    _require(core, "fork")
    record = _record_of(core, sandbox_id, tenant, "fork")
    if count < 1:
        raise InvalidParameter(
            f"count: at least 1, got {count}", field="count", value=count, attempted="fork"
        )
    owner = record.spec.tenant or core.owner
    if quota:
        asked = Usage()
        for _ in range(count):
            asked = asked + usage_of(record.spec)
        using = tenant_usage((live.record for live in core.live.values()), owner)
        refusal = quota_refusal(owner, quota, using, asked)
        if refusal is not None:
            raise QuotaExceeded(
                f"fork of {count}: {refusal[1]}", sandbox_id=sandbox_id, attempted="fork"
            )
    snap = await _unchanged_since_snapshot(core, sandbox_id, owner) or await snapshot(
        core, sandbox_id, f"fork-{secrets.token_hex(6)}", tenant=tenant, quota=quota
    )
    request = _child_request(record.spec, snap.image)
    spec = record.spec
    started: list[SandboxRecord] = []
    try:
        for _ in range(count):
            started.append(
                await starting.start_async(
                    core,
                    request,
                    tenant=spec.tenant,
                    quota=quota,
                    user_id=spec.user_id,
                    experiment_id=spec.experiment_id,
                    namespace=spec.namespace,
                    cluster=spec.cluster,
                )  # fmt: skip
            )
    except RockError:
        for child in started:
            await stopping.stop(core, child.sandbox_id, "fork refused")
        raise
    return snap, started
