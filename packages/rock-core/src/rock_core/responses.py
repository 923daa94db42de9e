"""The wire views of a sandbox's record: what ROCK's API answers for a start and a status.

The engine answers with its own types: a :class:`~rock_core.models.SandboxRecord` (``start_async``,
``restart``) and a :class:`~rock_core.models.SandboxStatus` (``get_status``, ``wait_until_running``,
``status_of``). The admin (``rock.admin``) and the SDK's embedded engine (``rock.sdk``) answer
with the models of :mod:`rock_core.actions`, built here, the one place where the engine's
records and ROCK's wire fields (sizes as ``"8.00g"``, the ``queued`` phase,
``disk_limit_rootfs``, ``gateway_version``) meet. The engine never calls this module.
"""

from __future__ import annotations

from typing import Any

from rock_core import __version__
from rock_core.actions import SandboxStartResponse, SandboxStatusResponse, StateHistoryEntry
from rock_core.models import Phase, PhaseStatus, SandboxRecord, SandboxStatus, SandboxUsage
from rock_core.sizes import format_size
from rock_core.states import LIVE_STATES, State

__all__ = [
    "PHASE_QUEUED",
    "rocklet_statistics",
    "start_response",
    "statistics_response",
    "status_response",
    "usage_view",
]

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


def status_response(status: SandboxStatus) -> SandboxStatusResponse:
    """The answer to ``get_status`` for the engine's ``status`` of a sandbox: ROCK's fields, plus
    reason, notes, security and queue position (also shown as the ``queued`` phase)."""
    record = status.record
    queue_position = status.queue_position
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
    if record.state in LIVE_STATES:
        auto_stop = status.idle_deadline
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
        is_alive=record.state is State.RUNNING and not record.paused,
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
        restart_count=record.restart_count,
        usage=usage_view(status.usage) if status.usage is not None else None,
        warnings=list(status.usage.warnings) if status.usage is not None else [],
        paused=record.paused,
        paused_time=record.paused_time if record.paused else None,
        egress=record.spec.egress.to_dict() if record.spec.egress is not None else None,
    )


def usage_view(usage: SandboxUsage) -> dict[str, Any]:
    """A sandbox's sampled resource use as JSON-ready values (``usage`` of ``get_status``)."""
    return {
        "sampled_at": usage.sampled_at.isoformat(),
        "cpu_percent": usage.cpu_percent,
        "cpu_seconds": usage.cpu_seconds,
        "memory_bytes": usage.memory_bytes,
        "memory_peak_bytes": usage.memory_peak_bytes,
        "memory_limit_bytes": usage.memory_limit_bytes,
        "memory_percent": None if usage.memory_percent is None else round(usage.memory_percent, 1),
        "network_rx_bytes": usage.network_rx_bytes,
        "network_tx_bytes": usage.network_tx_bytes,
        "disk_bytes": usage.disk_bytes,
        "pids": usage.pids,
        "oom_kills": usage.oom_kills,
        "egress_refused": usage.egress_refused,
    }


def statistics_response(status: SandboxStatus) -> dict[str, Any]:
    """``GET .../sandboxes/{id}/statistics``: ROCK's ``get_statistics`` figures (``cpu`` and
    ``mem`` in percent, ``disk`` in percent of the disk limit, ``net`` bytes received plus sent)
    from the engine's last sample, and rock's whole ``usage`` beside them. ``None`` figures: not
    sampled yet, or not measured by the runtime."""
    usage = status.usage
    if usage is None:
        return {"cpu": None, "mem": None, "disk": None, "net": None, "usage": None, "warnings": []}
    disk_limit = status.record.spec.disk
    net = None
    if usage.network_rx_bytes is not None and usage.network_tx_bytes is not None:
        net = usage.network_rx_bytes + usage.network_tx_bytes
    return {
        "cpu": usage.cpu_percent,
        "mem": None if usage.memory_percent is None else round(usage.memory_percent, 1),
        "disk": round(100.0 * usage.disk_bytes / disk_limit, 1)
        if usage.disk_bytes is not None and disk_limit
        else None,
        "net": net,
        "usage": usage_view(usage),
        "warnings": list(usage.warnings),
    }


def rocklet_statistics(figures: dict[str, Any], status: SandboxStatus) -> dict[str, Any]:
    """``get_statistics``: the rocklet's figures, with ``disk`` the sandbox's own use in percent
    of its disk limit, as ``.../statistics`` has it (``None`` until the engine sampled it).

    The rocklet measures its root filesystem, which on Docker is the host's disk (ROCK's own
    code calls its ``disk`` "a legacy name, actually rootfs usage"): that figure stays, as
    ``disk_root_fs_percent``, so both routes agree on ``disk``."""
    return {
        **figures,
        "disk": statistics_response(status)["disk"],
        "disk_root_fs_percent": figures.get("disk"),
    }
