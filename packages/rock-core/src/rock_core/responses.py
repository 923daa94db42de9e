"""The wire views of a sandbox's record: what ROCK's API answers for a start and a status.

The engine keeps :class:`~rock_core.models.SandboxRecord` s; the admin (``rock.admin``) and the
SDK (``rock.sdk``) answer with the models of :mod:`rock_core.actions`. This module is the one
place those answers are built from a record, so the engine's records and ROCK's wire fields
(sizes as ``"8.00g"``, the ``queued`` phase, ``disk_limit_rootfs``, ``gateway_version``) meet
only here. (The engine's ``start_async``, ``restart``, ``get_status`` and ``status_of`` still
return these models, built by calling this module: issue #9 point 4 left that ripple for later.)
"""

from __future__ import annotations

from datetime import datetime, timezone

from rock_core import __version__
from rock_core.actions import SandboxStartResponse, SandboxStatusResponse, StateHistoryEntry
from rock_core.models import Phase, PhaseStatus, SandboxRecord
from rock_core.states import LIVE_STATES, State
from rock_core.units import format_size

__all__ = ["PHASE_QUEUED", "start_response", "status_response"]

#: Name of the phase shown while a start waits for a slot.
PHASE_QUEUED = "queued"


def _disk(record: SandboxRecord) -> str | None:
    return format_size(record.spec.disk) if record.spec.disk is not None else None


def start_response(record: SandboxRecord) -> SandboxStartResponse:
    """The answer to ``start``, ``start_async`` and ``restart``: where ``record``'s sandbox is
    placed and the resources it got."""
    spec = record.spec
    disk = _disk(record)
    return SandboxStartResponse(
        sandbox_id=record.sandbox_id,
        host_name=record.host_name,
        host_ip=record.host_ip,
        disk=disk,
        disk_limit_rootfs=disk,
        cpus=spec.cpus,
        memory=format_size(spec.memory),
    )


def status_response(
    record: SandboxRecord, *, last_activity: float, queue_position: int | None = None
) -> SandboxStatusResponse:
    """The answer to ``get_status`` for ``record``: ROCK's fields, plus reason, notes, security
    and queue position.

    :param last_activity: the time (``time.time()``) of the sandbox's last activity, from which
        a live sandbox's idle deadline (``auto_stop_time``) is counted.
    :param queue_position: the sandbox's place in the start queue while it waits (1 = next);
        it is also shown as the ``queued`` phase.
    """
    spec = record.spec
    phases = dict(record.phases)
    if record.state is State.PENDING and queue_position is not None:
        phases[PHASE_QUEUED] = Phase(
            status=PhaseStatus.WAITING,
            message=f"waiting for a start slot: position {queue_position} in the start queue",
        )
    else:
        queue_position = None
    auto_stop = auto_archive = auto_delete = None
    if record.state in LIVE_STATES and spec.auto_clear_seconds:
        auto_stop = datetime.fromtimestamp(last_activity + spec.auto_clear_seconds, timezone.utc)
    elif record.auto_transition_state is State.ARCHIVED:
        auto_archive = record.auto_transition_time
    elif record.auto_transition_state is State.DELETED:
        auto_delete = record.auto_transition_time
    disk = _disk(record)
    return SandboxStatusResponse(
        sandbox_id=record.sandbox_id,
        status=phases,
        state=record.state,
        port_mapping=dict(record.port_mapping),
        host_name=record.host_name,
        host_ip=record.host_ip,
        is_alive=record.state is State.RUNNING,
        image=spec.image,
        metadata=dict(spec.metadata),
        gateway_version=__version__,
        swe_rex_version=None,
        user_id=spec.user_id,
        experiment_id=spec.experiment_id,
        namespace=spec.namespace,
        cpus=spec.cpus,
        memory=format_size(spec.memory),
        num_gpus=spec.num_gpus,
        accelerator_type=spec.accelerator_type,
        disk=disk,
        disk_limit_rootfs=disk,
        start_time=record.start_time,
        stop_time=record.stop_time,
        create_time=record.create_time,
        archive_time=record.archive_time,
        delete_time=record.delete_time,
        auto_stop_time=auto_stop,
        auto_archive_time=auto_archive,
        auto_delete_time=auto_delete,
        state_history=[StateHistoryEntry.from_change(c) for c in record.state_history],
        reason=record.reason,
        notes=list(record.notes),
        queue_position=queue_position,
        security=dict(record.security),
    )
