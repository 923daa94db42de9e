"""ROCK's SDK configs: :class:`BaseConfig`, :class:`SandboxConfig`, :class:`SandboxGroupConfig`.

Same field names and defaults as ROCK (reference §2.1), built with keyword arguments and
mutable (``Sandbox.attach`` writes what it learns back into the config). Every field is read
when it is set by rock-core's wire converter (:func:`rock_core.converters.checked`), as the same
value in a start request would be: ``"300"`` is taken as ``300``, as ROCK's pydantic models take
it, while ``True`` is no count and ``5`` no image. A bad value is refused with an error naming the
field and the value (``pids_limit: expected an integer > 0, got 0``); the error is both a
:class:`ValueError` (as ROCK's pydantic validation error is) and rock's
:class:`~rock_core.errors.InvalidParameter`.

One difference from ROCK: ``base_url`` defaults to ``ROCK_BASE_URL`` when that is set, else to
``None``, which means *embedded mode* — sandboxes run in this process's own engine on the local
Docker engine, no server needed. ROCK's default was ``http://localhost:8080``.

Sizes (``memory``, ``disk``) and CPU counts are checked when the sandbox starts (as ROCK's
server does), so a config can be built first and completed later.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from rock.sdk._drivers.admin_urls import admin_urls
from rock_core.converters import READ_AS, checked, structure_value
from rock_core.egress import EgressPolicy, EgressRule, egress_policy
from rock_core.errors import InvalidParameter
from rock_core.models import NonNegativeInt, PositiveFloat, PositiveInt, Priority, RestartPolicy

__all__ = [
    "BaseConfig",
    "SandboxConfig",
    "SandboxGroupConfig",
    "InvalidConfig",
    "EgressPolicy",
    "EgressRule",
]


class InvalidConfig(InvalidParameter, ValueError):
    """A config field was given a value it cannot take (a :class:`ValueError` too, as in ROCK)."""


def _field(kind: Any, **kwargs: Any) -> Any:
    # Every field is read by rock-core's wire converter, as the same value in a request would be.
    return checked(kind, error=InvalidConfig, **kwargs)


def _admin_urls(value: Any) -> str | list[str] | None:
    # One URL stays the string it was (as in ROCK); several are checked here, when set.
    if value is None or value == "":
        return value  # type: ignore[no-any-return]
    if not isinstance(value, str | list | tuple):
        raise InvalidConfig(
            f"base_url: expected a URL or a list of URLs, got {value!r}",
            field="base_url",
            value=value,
        )
    urls = admin_urls(value, "base_url", InvalidConfig)
    return value if isinstance(value, str) else list(urls)


def _egress(value: Any) -> EgressPolicy | None:
    # A policy, or its wire form (a mapping), checked as the engine will check it.
    if value is None:
        return None
    try:
        return egress_policy(value)
    except InvalidParameter as exc:
        raise InvalidConfig(exc.message, field=exc.field, value=exc.value) from None


def _from_environment(name: str, kind: Any, default: Any) -> Any:
    raw = os.environ.get(name)
    return default if not raw else structure_value(raw, kind, path=name, error=InvalidConfig)


@attrs.define(kw_only=True)
class BaseConfig:
    """Where the SDK finds its engine, and what it sends along.

    :param base_url: the admin server (``rock admin start``) to use; ``None`` (the default when
        ``ROCK_BASE_URL`` is unset) runs sandboxes in this process — embedded mode. Several
        admins of one cluster (rock): a list of URLs, or one string of URLs separated by commas
        (``ROCK_BASE_URL=http://a:8080,http://b:8080``); the SDK moves to the next admin when
        one cannot be reached (:class:`~rock.sdk._drivers.remote.RemoteDriver`). An empty item,
        a URL that is not http/https, or one named twice raises :class:`InvalidConfig`.
    :param xrl_authorization: deprecated; sent as ``XRL-Authorization: Bearer <value>`` to a server.
    :param extra_headers: extra HTTP headers for every call to a server.
    """

    base_url: str | list[str] | None = attrs.field(
        factory=lambda: os.environ.get("ROCK_BASE_URL") or None,
        converter=_admin_urls,
        metadata={READ_AS: str | None},
    )
    xrl_authorization: str | None = _field(str | None, default=None, repr=False)
    extra_headers: dict[str, str] = _field(dict[str, str], factory=dict)


@attrs.define(kw_only=True)
class SandboxConfig(BaseConfig):
    """What sandbox to start: ROCK's fields and defaults, plus rock's ``env``, ``metadata``,
    ``network``, ``network_group``, ``pids_limit`` and ``cap_add``.

    :param image: the container image.
    :param image_os: ``"linux"`` (rock runs Linux images only).
    :param auto_clear_seconds: idle seconds after which the sandbox is stopped (ROCK: 300).
    :param startup_timeout: seconds ``start()`` waits for the sandbox to run
        (``ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS``, else 180).
    :param memory: memory limit, ``"8g"``, ``"512m"`` (1024-based); checked at start.
    :param cpus: CPUs (Docker ``--cpus``); ``limit_cpus`` caps them when set.
    :param num_gpus: / ``accelerator_type``: GPUs to request (when the runtime supports them).
    :param user_id: / ``experiment_id`` / ``namespace`` / ``cluster``: labels of the sandbox
        (ROCK's identity headers); the start queue is fair across experiments.
    :param registry_username: / ``registry_password``: credentials for pulling ``image``.
    :param use_kata_runtime: run in Kata containers (when the runtime supports it).
    :param sandbox_id: ask for this id (else a random one); also the container name.
    :param auto_archive_seconds: after a stop, archive after this many seconds (needs an archive store).
    :param auto_delete_seconds: after a stop, keep the stopped sandbox (for ``restart()``) this many
        seconds, then delete it. ``None``: deleted at once, as ROCK's default ``--rm``.
    :param disk: disk limit, ``"50G"``; checked at start.
    :param env: (rock) environment variables of the sandbox's container.
    :param metadata: (rock) free-form labels, shown in ``get_status``.
    :param network: (rock) the sandbox's network: ``"bridge"`` (the runtime's default when
        ``None``: a network of its own, reached through ports published on 127.0.0.1),
        ``"host"`` (the host's network: it reaches services on the host's ``127.0.0.1``, e.g.
        a local mirror) or ``"none"`` (loopback only: nothing gets in or out; rock drives it
        through a unix socket and publishes no port). Checked at start
        (:class:`~rock_core.errors.InvalidParameter` naming ``network``).
    :param network_group: (rock) sandboxes started with the same group name share a network and
        may connect to each other (by sandbox id as host name), for multi-container tasks.
        Without it, no sandbox can open a connection to any other (docs/security.md).
    :param pids_limit: (rock) the most processes and threads the sandbox may run; ``None``: the
        engine's default (4096). A fork bomb then exhausts only the sandbox's own quota.
    :param cap_add: (rock) Linux capabilities to grant beyond rock's reduced set, e.g.
        ``["NET_RAW"]`` for ``ping``; the engine refuses those it does not allow.
    :param egress: (rock) where the sandbox may connect: an
        :class:`~rock_core.egress.EgressPolicy` (or its mapping form), enforced on the host
        before the sandbox's first command; ``Sandbox.update_egress`` replaces it.
    :param priority: (rock) 0..9, higher starts first when starts wait in the engine's queue
        (``None``: 5, normal); fair within a priority, and a long wait raises it (no start
        waits forever). An admin with API keys caps it per key (``max_priority``).
    :param restart_policy: (rock) ``"never"`` (``None``: the default), ``"on-failure"`` or
        ``"always"``: when the sandbox's container dies behind rock's back (a crash, a kill, an
        OOM kill), start it again with the same id, at most ``max_restarts`` times (``None``: 3),
        after a back-off. Files survive where the runtime keeps them (Docker: the same
        container); sessions and processes are gone. ``get_status()`` shows ``restart_count``,
        and each restart's reason in ``notes``.
    :param snapshot: (rock) start from this snapshot of the caller's (``Sandbox.snapshot()``):
        its files, not its processes; ``image`` is then the snapshot's.

    :raises InvalidConfig: a negative ``auto_*`` value, both ``auto_archive_seconds`` and
        ``auto_delete_seconds``, a value of the wrong type.
    """

    image: str = _field(str, default="python:3.11")
    image_os: str = _field(str, default="linux")
    auto_clear_seconds: int = _field(NonNegativeInt, default=300)
    startup_timeout: float = _field(
        PositiveFloat,
        factory=lambda: _from_environment(
            "ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS", PositiveFloat, 180.0
        ),
    )
    memory: str = _field(str, default="8g")
    cpus: float = 2
    limit_cpus: float | None = None
    num_gpus: int | None = _field(NonNegativeInt | None, default=None)
    accelerator_type: str | None = _field(str | None, default=None)
    user_id: str | None = _field(str | None, default=None)
    experiment_id: str | None = _field(str | None, default=None)
    cluster: str = _field(str, factory=lambda: os.environ.get("ROCK_DEFAULT_CLUSTER") or "vpc-nt-a")
    namespace: str | None = _field(str | None, default=None)
    registry_username: str | None = _field(str | None, default=None)
    registry_password: str | None = _field(str | None, default=None, repr=False)
    use_kata_runtime: bool = _field(bool, default=False)
    sandbox_id: str | None = _field(str | None, default=None)
    auto_archive_seconds: int | None = _field(NonNegativeInt | None, default=None)
    auto_delete_seconds: int | None = _field(NonNegativeInt | None, default=None)
    disk: str | None = _field(str | None, default="50G")
    # rock additions
    env: dict[str, str] | None = _field(dict[str, str] | None, default=None)
    metadata: dict[str, str] | None = _field(dict[str, str] | None, default=None)
    network: str | None = _field(str | None, default=None)
    network_group: str | None = _field(str | None, default=None)
    pids_limit: int | None = _field(PositiveInt | None, default=None)
    cap_add: list[str] | None = _field(list[str] | None, default=None)
    priority: int | None = _field(Priority | None, default=None)
    restart_policy: str | None = _field(RestartPolicy | None, default=None)
    max_restarts: int | None = _field(NonNegativeInt | None, default=None)
    snapshot: str | None = _field(str | None, default=None)
    egress: EgressPolicy | None = attrs.field(default=None, converter=_egress)

    def __attrs_post_init__(self) -> None:
        self.check_lifecycle()

    def check_lifecycle(self) -> None:
        """Refuse ``auto_archive_seconds`` together with ``auto_delete_seconds`` (ROCK's rule).

        :raises InvalidConfig: both are set.
        """
        if self.auto_archive_seconds is not None and self.auto_delete_seconds is not None:
            raise InvalidConfig(
                "auto_archive_seconds and auto_delete_seconds cannot both be set "
                f"(got {self.auto_archive_seconds!r} and {self.auto_delete_seconds!r}); choose one",
                field="auto_archive_seconds, auto_delete_seconds",
                value=(self.auto_archive_seconds, self.auto_delete_seconds),
            )


@attrs.define(kw_only=True)
class SandboxGroupConfig(SandboxConfig):
    """A :class:`SandboxConfig` for ``size`` identical sandboxes.

    :param size: how many sandboxes.
    :param start_concurrency: how many ``start()`` calls run at once.
    :param start_retry_times: attempts per sandbox before ``SandboxGroup.start()`` gives up.
    """

    size: int = _field(PositiveInt, default=2)
    start_concurrency: int = _field(PositiveInt, default=2)
    start_retry_times: int = _field(PositiveInt, default=3)
