"""Settings of an engine (:class:`~rock_core.engine.manager.SandboxManager`), with documented defaults."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import attrs

from rock_core.actions import SandboxStartRequest
from rock_core.converters import (
    READ_AS,
    capability_names,
    checked,
    spec_from_start_request,
    structure_wire,
)
from rock_core.errors import InvalidParameter
from rock_core.models import (
    ByteSize,
    NonBlankStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PullPolicy,
)
from rock_core.sizes import GiB

__all__ = ["EngineConfig", "WarmPoolConfig", "default_start_concurrency", "warm_pools_from"]


def default_start_concurrency() -> int:
    """Starts allowed at once by default: 4 per host core, at least 4.

    A start is mostly waiting (dockerd, the rocklet's first answer), so more starts than cores
    overlap well; beyond a few per core they only slow each other down.
    """
    return max(4, 4 * (os.cpu_count() or 1))


@attrs.frozen
class WarmPoolConfig:
    """A warm pool the engine keeps from its start: ``size`` sandboxes of the kind ``request`` asks for.

    A start whose request asks for the same kind (image, pull policy, memory, CPUs, disk,
    environment, runtime options; see :func:`rock_core.engine.pool.pool_key`) is served from it.
    """

    request: SandboxStartRequest
    size: NonNegativeInt = checked(NonNegativeInt)

    def __attrs_post_init__(self) -> None:
        spec = spec_from_start_request(
            self.request
        )  # bad sizes or CPUs fail here, naming the field
        if spec.pull is PullPolicy.ALWAYS and self.size:
            raise InvalidParameter(
                "pull: 'always' asks for a fresh pull at every start, which a warm pool cannot honour; "
                "use 'missing' or 'never'",
                field="pull",
                value="always",
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "warm_pools") -> WarmPoolConfig:
        """Build from a table such as ``{"image": "python:3.11", "memory": "512m", "cpus": 1, "size": 10}``.

        Every key but ``size`` is a field of :class:`~rock_core.actions.SandboxStartRequest`.

        :raises InvalidParameter: naming ``where`` and the bad key.
        """
        if not isinstance(data, Mapping):
            raise InvalidParameter(
                f"{where}: expected a table of start-request fields and 'size', got {data!r}",
                field=where,
                value=data,
            )
        fields = dict(data)
        if "size" not in fields:
            raise InvalidParameter(
                f"{where}.size: missing (how many sandboxes to keep ready)", field=f"{where}.size"
            )
        size = fields.pop("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidParameter(
                f"{where}.size: expected a whole number >= 0, got {size!r}",
                field=f"{where}.size",
                value=size,
            )
        try:
            return cls(
                request=structure_wire(fields, SandboxStartRequest), size=NonNegativeInt(size)
            )
        except InvalidParameter as exc:
            raise InvalidParameter(
                f"{where}: {exc.message}", field=f"{where}.{exc.field or 'size'}", value=size
            ) from exc


def warm_pools_from(
    value: Iterable[WarmPoolConfig | Mapping[str, Any]],
) -> tuple[WarmPoolConfig, ...]:
    """:attr:`EngineConfig.warm_pools` from pool configs or tables (``[[engine.warm_pools]]`` in TOML).

    :raises InvalidParameter: naming the pool (``warm_pools[1].memory``) and the bad value.
    """
    if isinstance(value, (str, bytes, Mapping)):
        raise InvalidParameter(
            f"warm_pools: expected a list of pools, got {value!r}", field="warm_pools", value=value
        )
    return tuple(
        item
        if isinstance(item, WarmPoolConfig)
        else WarmPoolConfig.from_mapping(item, f"warm_pools[{i}]")
        for i, item in enumerate(value)
    )


def _capabilities(value: Any) -> tuple[str, ...]:
    try:
        return capability_names(value)
    except ValueError as exc:
        raise InvalidParameter(
            f"allowed_cap_add: {exc}", field="allowed_cap_add", value=value
        ) from None


@attrs.frozen(kw_only=True)
class EngineConfig:
    """How an engine runs its sandboxes.

    :param runtime: the registered runtime to use (``"docker"``).
    :param runtime_options: keyword arguments for the runtime's constructor.
    :param store_path: SQLite file for the records (``None``: in memory, for embedded mode);
        used when ``store`` is not set.
    :param store: the URL of a record store a plugin serves, by its scheme
        (``postgresql://user@host:port/database``: rock-postgres), instead of SQLite; ``None``:
        SQLite (``store_path``). A URL no installed plugin serves, or a malformed one, stops
        the engine naming ``store`` (its password masked); so does a server it cannot reach.
    :param max_concurrent_starts: starts running at once (creating and starting their unit;
        a started unit's rocklet boots outside the count); the rest wait in the start queue, by
        priority, fair across experiments within one.
    :param restart_backoff_seconds: the wait before a crashed sandbox's first restart (its
        ``restart_policy``), doubled for each restart after it, at most 30 s.
    :param stats_interval: seconds between two samples of every running sandbox's resource use
        (CPU, memory, network, processes, OOM kills) from the runtime; ``0`` turns it off.
    :param queue_aging_seconds: waiting this long raises a queued start's priority one level,
        so no start waits forever behind higher ones (:mod:`rock_core.engine.start_queue`).
    :param default_auto_clear_seconds: idle time after which a live sandbox is stopped, when the
        request does not say (ROCK's server default: 360 minutes).
    :param default_auto_delete_seconds: how long a stopped sandbox is kept (for ``restart``)
        when the request sets neither ``auto_delete_seconds`` nor ``auto_archive_seconds``.
        ``0``, as ROCK's default ``--rm`` behaviour: a stop removes the container at once.
    :param max_auto_delete_seconds: cap on any keep-stopped delay, so no stopped container is kept
        forever (ROCK's cluster ``auto_delete_seconds`` cap). ``None``: no cap.
    :param default_startup_timeout: seconds a start may take when the request does not say.
    :param max_cpus: / ``max_memory`` / ``max_disk``: the largest sandbox accepted (ROCK's
        ``max_allowed_spec``: 16 CPUs, 64 GiB, 256 GiB).
    :param stop_timeout: seconds a stopping sandbox gets before it is killed.
    :param cluster: the name of a cluster of engines sharing one record store (``store``, a
        store that holds a lease: PostgreSQL): they elect one leader, which alone runs the
        background work (reconcile and the runtime's watch, timers, sweeps, warm pools, restarts
        after crashes, the usage sampler; :mod:`rock_core.engine.leadership`). Needs
        ``remove_on_close`` false. ``None``: one engine, no lease.
    :param cluster_address: where the other members of ``cluster`` reach this one while it
        leads (the admin sets its own URL when this is not set): a follower hands the leader
        what only the leader does (starts, stops, deletions, pools).
    :param reconcile_interval: seconds between comparisons of the records with the runtime.
    :param timer_interval: seconds between checks of idle and auto-delete deadlines.
    :param idle_counts_paused: whether the time a sandbox spends paused counts towards its idle
        stop (``auto_clear_seconds``); by default it does not (rock_core/engine/pausing.py).
    :param engine_label: value of the ``rock.engine`` label on every unit this engine makes.
    :param remove_on_close: remove this engine's sandboxes when it closes (embedded mode: the
        trainer's process owns them, nothing must outlive it).
    :param reap_orphans: at start, remove units whose owning process has died.
    :param warm_pools: pools of started sandboxes to keep ready (:class:`WarmPoolConfig`, or
        tables of start-request fields plus ``size``); empty by default.
    :param max_warm_pool_members: the most sandboxes all warm pools together may keep ready.
    :param default_pids_limit: the most processes (and threads) a sandbox may run when its
        request does not say: a fork bomb then exhausts its own quota, not the host's.
    :param max_pids_limit: the largest ``pids_limit`` a request may ask for.
    :param allowed_cap_add: the Linux capabilities a request may add with ``cap_add``, beyond
        the reduced set every sandbox has (docs/security.md). By default the ones Docker grants
        that rock drops, and ``SYS_PTRACE`` (debuggers); never ``SYS_ADMIN`` unless listed here.
    :param disk_check_interval: seconds between two looks at the disk use of sandboxes whose
        ``disk`` limit the runtime cannot enforce itself; one look covers every sandbox.
    :param plugin_options: each plugin's configuration table, by entry-point name
        (``{"archive-s3": {"bucket": "..."}}``); ``ROCK_PLUGIN_<NAME>_<KEY>`` variables go on top.
        The engine hands each plugin its own through ``rock_configure``.
    :param archive_store: the registered archive store that keeps archived sandboxes (``None``:
        archiving is off); built with its plugin's table as keyword arguments.
    :param archive_timeout: seconds an archive may take (snapshot and upload of both parts);
        past it the archive fails, its objects are deleted and the sandbox is stopped again
        (ROCK's ``archive_timeout_seconds``).
    :param restore_timeout: seconds a restore may take, from ``restart`` of an archived
        sandbox to its rocklet answering; past it the sandbox is archived again, with the reason.
    :param commit_registries: the registries (host names, with a port when not the default:
        ``"registry.example.com"``, ``"localhost:5000"``) ROCK's commit may push to; a commit
        whose ``image_tag`` names another registry is refused, and with none (the default) every
        push is refused: the image is then only tagged on the node.
    :param rocklet_url: where runtimes whose units run on other hosts have them download
        ``rocklet.pyz`` (checked by its SHA-256); the admin sets its own ``/rocklet.pyz`` when
        this is not set. ``None``: nothing serves it (a runtime on this host mounts the file).
    :param forward_rocklet_port: serve a host port on ``127.0.0.1`` for port 22555 (the
        rocklet's own) of sandboxes whose runtime leaves forwarding to the engine, as ROCK's
        ``port_mapping`` has it; off by default, since rock's own clients never use it (they
        reach the rocklet through the engine) and it only gives every local process one more way
        to the rocklet. Other ports (8080) are forwarded either way.
    :param max_rocklet_answer: the largest answer read from a rocklet (a command's output, a
        file read, a JSON answer; a streamed line): past it the call fails naming this setting,
        since a sandbox's root can make its rocklet answer anything (64 MiB).
    :param disk_keep_seconds: how long a sandbox stopped for passing its disk limit keeps its
        unit (its files, for inspection or ``restart``) before it is deleted, when its own
        policy would delete it sooner.
    """

    runtime: NonBlankStr = checked(NonBlankStr, default="docker")
    runtime_options: Mapping[str, Any] = checked(dict[str, Any], factory=dict)
    store_path: str | None = checked(Optional[str], default=None)
    store: NonBlankStr | None = checked(Optional[NonBlankStr], default=None, repr=False)
    cluster: NonBlankStr | None = checked(Optional[NonBlankStr], default=None)
    cluster_address: NonBlankStr | None = checked(Optional[NonBlankStr], default=None)
    max_concurrent_starts: PositiveInt = checked(PositiveInt, factory=default_start_concurrency)
    queue_aging_seconds: PositiveFloat = checked(PositiveFloat, default=60.0)
    restart_backoff_seconds: PositiveFloat = checked(PositiveFloat, default=1.0)
    stats_interval: NonNegativeFloat = checked(NonNegativeFloat, default=5.0)
    default_auto_clear_seconds: NonNegativeInt = checked(NonNegativeInt, default=360 * 60)
    default_auto_delete_seconds: NonNegativeInt = checked(NonNegativeInt, default=0)
    max_auto_delete_seconds: NonNegativeInt | None = checked(
        Optional[NonNegativeInt], default=24 * 3600
    )
    default_startup_timeout: PositiveFloat = checked(PositiveFloat, default=180.0)
    max_cpus: PositiveFloat = checked(PositiveFloat, default=16.0)
    max_memory: ByteSize = checked(ByteSize, default=64 * GiB)
    max_disk: ByteSize = checked(ByteSize, default=256 * GiB)
    stop_timeout: PositiveFloat = checked(PositiveFloat, default=3.0)
    reconcile_interval: PositiveFloat = checked(PositiveFloat, default=30.0)
    timer_interval: PositiveFloat = checked(PositiveFloat, default=1.0)
    idle_counts_paused: bool = checked(bool, default=False)
    engine_label: NonBlankStr = checked(NonBlankStr, default="rock")
    remove_on_close: bool = checked(bool, default=True)
    reap_orphans: bool = checked(bool, default=True)
    # Read as tables (a TOML file's [[engine.warm_pools]]), each then checked by WarmPoolConfig.
    warm_pools: tuple[WarmPoolConfig, ...] = attrs.field(
        default=(), converter=warm_pools_from, metadata={READ_AS: list[dict[str, Any]]}
    )
    max_warm_pool_members: NonNegativeInt = checked(NonNegativeInt, default=64)
    default_pids_limit: PositiveInt = checked(PositiveInt, default=4096)
    max_pids_limit: PositiveInt = checked(PositiveInt, default=65536)
    allowed_cap_add: tuple[str, ...] = attrs.field(
        default=("NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT", "SYS_PTRACE"),
        converter=_capabilities,
        metadata={READ_AS: list[str]},  # the names checked by _capabilities
    )
    disk_check_interval: PositiveFloat = checked(PositiveFloat, default=5.0)
    disk_keep_seconds: NonNegativeInt = checked(NonNegativeInt, default=3600)
    plugin_options: Mapping[str, Mapping[str, Any]] = checked(
        dict[str, dict[str, Any]], factory=dict
    )
    archive_store: NonBlankStr | None = checked(Optional[NonBlankStr], default=None)
    rocklet_url: NonBlankStr | None = checked(Optional[NonBlankStr], default=None)
    archive_timeout: PositiveFloat = checked(PositiveFloat, default=1800.0)
    restore_timeout: PositiveFloat = checked(PositiveFloat, default=1800.0)
    max_rocklet_answer: ByteSize = checked(ByteSize, default=64 * 1024 * 1024)
    forward_rocklet_port: bool = checked(bool, default=False)
    commit_registries: tuple[str, ...] = attrs.field(
        default=(), converter=tuple, metadata={READ_AS: list[str]}
    )

    def __attrs_post_init__(self) -> None:
        if self.cluster is not None and self.remove_on_close:
            raise InvalidParameter(
                f"cluster: {self.cluster!r} needs remove_on_close = false (an engine of a "
                f"cluster that closes leaves the sandboxes to the others)",
                field="cluster",
                value=self.cluster,
            )
        if self.default_pids_limit > self.max_pids_limit:
            raise InvalidParameter(
                f"default_pids_limit: {self.default_pids_limit} is above max_pids_limit {self.max_pids_limit}",
                field="default_pids_limit",
                value=self.default_pids_limit,
            )
