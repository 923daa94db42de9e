"""From what the client sent to what the engine runs: the :class:`~rock_core.models.SandboxSpec`
a ``SandboxStartRequest`` asks for, every bad field named (re-exported by
:mod:`rock_core.converters`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rock_core._converter_errors import invalid_error
from rock_core._start_wire import size_in_bytes, trusted_maker
from rock_core.actions import SandboxStartRequest
from rock_core.egress import egress_policy
from rock_core.errors import InvalidParameter
from rock_core.models import NonNegativeInt, SandboxSpec
from rock_core.sizes import cpus_to_float, describe_value

__all__ = ["spec_from_start_request", "NETWORK_MODES", "CAPABILITIES", "capability_names"]


def _positive_size(value: str) -> int:
    n = size_in_bytes(value)
    if n <= 0:
        raise ValueError(f"invalid size {describe_value(value)} (must be greater than zero)")
    return n


def spec_from_start_request(
    req: SandboxStartRequest,
    *,
    user_id: str | None = None,
    experiment_id: str | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
) -> SandboxSpec:
    """The :class:`~rock_core.models.SandboxSpec` a start request asks for, sizes in bytes.

    The keyword arguments come from ROCK's request headers (``X-User-Id``, ``X-Experiment-Id``,
    ``X-Namespace``, ``X-Cluster``). The idle timeout is ``auto_clear_seconds``, else
    ``auto_clear_time_minutes`` × 60, else ``auto_clear_time`` × 60, else ``None`` (the engine's
    default). ``use_kata_runtime=True`` becomes the runtime option ``use_kata_runtime``, and
    ``network`` (when set) the runtime option ``network``.

    :raises InvalidParameter: listing every problem: a size of zero or not a size, a CPU count
        that is not positive, a ``network`` that is not a name (the engine checks it against its
        runtime's modes), and
        ``auto_archive_seconds`` together with ``auto_delete_seconds`` (ROCK's SDK forbids the
        pair; ROCK's server silently prefers archive; rock refuses).
    """
    problems: list[tuple[str, str, Any]] = []

    def take(field: str, parse: Callable[[Any], Any], value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            problems.append((field, str(exc), value))
            return None

    memory = take("memory", _positive_size, req.memory)
    disk = take("disk", _positive_size, req.disk)
    cpus = take("cpus", cpus_to_float, req.cpus)
    limit_cpus = take("limit_cpus", cpus_to_float, req.limit_cpus)
    network = take("network", _network_mode, req.network)
    group = take("network_group", _network_group, req.network_group)
    cap_add = take("cap_add", capability_names, req.cap_add)
    egress = None
    if req.egress is not None:
        try:
            egress = egress_policy(req.egress)
        except InvalidParameter as exc:
            problems.append((exc.field or "egress", exc.message.split(": ", 1)[-1], req.egress))
    if egress is not None and network in ("host", "none"):
        problems.append(
            ("egress", f"a sandbox on network {network!r} cannot have an egress policy", None)
        )
    if group is not None and network in ("host", "none"):
        problems.append(
            (
                "network_group",
                f"a sandbox on network {network!r} cannot join a network group",
                group,
            )
        )
    if req.auto_archive_seconds is not None and req.auto_delete_seconds is not None:
        problems.append(
            (
                "auto_archive_seconds, auto_delete_seconds",
                f"cannot both be set (got {req.auto_archive_seconds!r} and {req.auto_delete_seconds!r}); choose one",
                None,
            )
        )
    if problems:
        raise invalid_error(problems)

    if req.auto_clear_seconds is not None:
        auto_clear: NonNegativeInt | None = req.auto_clear_seconds
    elif req.auto_clear_time_minutes is not None:
        auto_clear = NonNegativeInt(req.auto_clear_time_minutes * 60)
    elif req.auto_clear_time is not None:
        auto_clear = NonNegativeInt(req.auto_clear_time * 60)
    else:
        auto_clear = None
    # Left out when not asked for: the spec's own defaults then apply.
    chosen: dict[str, Any] = {}
    if req.priority is not None:
        chosen["priority"] = req.priority
    if req.restart_policy is not None:
        chosen["restart_policy"] = req.restart_policy
    if req.max_restarts is not None:
        chosen["max_restarts"] = req.max_restarts

    # Each value below passed its check when ``req`` was made, or was just made from one that
    # did, in the form the spec's field wants: the spec's own checks would only run them again
    # (test_converters compares this with ``SandboxSpec(...)`` on any request).
    make: Callable[..., SandboxSpec] = SandboxSpec
    if _make_spec is not None and isinstance(req, SandboxStartRequest):
        make = _make_spec
    return make(
        image=req.image,
        image_os=req.image_os,
        memory=memory,
        cpus=cpus,
        limit_cpus=limit_cpus,
        disk=disk,
        num_gpus=req.num_gpus,
        accelerator_type=req.accelerator_type,
        pull=req.pull,
        startup_timeout=req.startup_timeout,
        auto_clear_seconds=auto_clear,
        auto_delete_seconds=req.auto_delete_seconds,
        auto_archive_seconds=req.auto_archive_seconds,
        registry_username=req.registry_username,
        registry_password=req.registry_password,
        env=dict(req.env or {}),
        metadata=dict(req.metadata or {}),
        user_id=user_id,
        experiment_id=experiment_id,
        namespace=namespace,
        cluster=cluster,
        sandbox_id=req.sandbox_id,
        runtime_options={
            **({"use_kata_runtime": True} if req.use_kata_runtime else {}),
            **({"network": network} if network is not None else {}),
            **({"network_group": group} if group is not None else {}),
        },
        pids_limit=req.pids_limit,
        cap_add=cap_add or (),
        egress=egress,
        **chosen,
    )


_make_spec = trusted_maker(SandboxSpec)


#: The network modes rock names (``SandboxStartRequest.network``): ``bridge`` (an isolated
#: network with the agent's ports published on 127.0.0.1), ``host`` (the host's network) and
#: ``none`` (loopback only). Which of them a sandbox may have is its runtime's to say
#: (:attr:`rock_core.runtime.Runtime.network_modes`); the engine checks.
NETWORK_MODES = ("bridge", "host", "none")


def _network_mode(value: str) -> str:
    if not isinstance(value, str) or not value.strip() or any(ch.isspace() for ch in value):
        raise ValueError(
            f"expected a network mode such as {', '.join(NETWORK_MODES)}, got {describe_value(value)}"
        )
    return value


_GROUP = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")


def _network_group(value: str) -> str:
    if not isinstance(value, str) or not _GROUP.match(value):
        raise ValueError(
            f"expected a name of letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit), "
            f"got {describe_value(value)}"
        )
    return value


#: Every Linux capability, by the name Docker and ``capabilities(7)`` use (without ``CAP_``).
CAPABILITIES = frozenset(
    """AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE
    DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN
    MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID
    SETPCAP SETUID SYSLOG SYS_ADMIN SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE
    SYS_RAWIO SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG WAKE_ALARM""".split()
)


def capability_names(value: Any) -> tuple[str, ...]:
    """Capability names as Docker takes them: upper case, without ``CAP_``, each once.

    :raises ValueError: ``value`` is not a list of names, or names an unknown capability.
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"expected a list of capability names like ['NET_RAW'], got {describe_value(value)}"
        )
    names: list[str] = []
    for item in value:
        name = item.strip().upper().removeprefix("CAP_") if isinstance(item, str) else None
        if name not in CAPABILITIES:
            raise ValueError(
                f"unknown capability {describe_value(item)} (see capabilities(7), e.g. 'NET_RAW')"
            )
        if name not in names:
            names.append(name)
    return tuple(names)
