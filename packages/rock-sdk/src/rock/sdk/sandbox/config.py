"""ROCK's SDK configs: :class:`BaseConfig`, :class:`SandboxConfig`, :class:`SandboxGroupConfig`.

Same field names and defaults as ROCK (reference §2.1), built with keyword arguments and
mutable (``Sandbox.attach`` writes what it learns back into the config). A field with a bad value
is refused when it is set, with an error naming the field and the value; the error is both a
:class:`ValueError` (as ROCK's pydantic validation error is) and rock's
:class:`~rock_core.errors.InvalidParameter`.

One difference from ROCK: ``base_url`` defaults to ``ROCK_BASE_URL`` when that is set, else to
``None``, which means *embedded mode* — sandboxes run in this process's own engine on the local
Docker engine, no server needed. ROCK's default was ``http://localhost:8080``.

Sizes (``memory``, ``disk``) and CPU counts are checked when the sandbox starts (as ROCK's
server does), so a config can be built first and completed later.
"""

from __future__ import annotations

import math
import os
from typing import Any

import attrs
from rock_core.errors import InvalidParameter

__all__ = ["BaseConfig", "SandboxConfig", "SandboxGroupConfig", "InvalidConfig"]


class InvalidConfig(InvalidParameter, ValueError):
    """A config field was given a value it cannot take (a :class:`ValueError` too, as in ROCK)."""


def _fail(attribute: attrs.Attribute[Any], value: Any, must: str) -> None:
    raise InvalidConfig(f"{attribute.name}: {must}, got {value!r}", field=attribute.name, value=value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(minimum: int, optional: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            _fail(attribute, value, f"must be an integer >= {minimum}" + (" or None" if optional else ""))

    return check


def _non_negative_int(optional: bool) -> Any:
    return _int_at_least(0, optional)


def _positive_int(optional: bool) -> Any:
    return _int_at_least(1, optional)


def _positive_number(optional: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if not _is_number(value) or value <= 0:
            _fail(attribute, value, "must be a number > 0" + (" or None" if optional else ""))

    return check


def _text(optional: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str):
            _fail(attribute, value, "must be a string" + (" or None" if optional else ""))

    return check


def _str_dict(optional: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            _fail(attribute, value, "must be a dict of strings to strings" + (" or None" if optional else ""))

    return check


def _str_list(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        _fail(attribute, value, "must be a list of strings or None")


def _bool(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        _fail(attribute, value, "must be True or False")


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise InvalidConfig(
            f"environment variable {name} must be a number of seconds, got {raw!r}", field=name, value=raw
        ) from None


@attrs.define(kw_only=True)
class BaseConfig:
    """Where the SDK finds its engine, and what it sends along.

    :param base_url: the admin server (``rock admin start``) to use; ``None`` (the default when
        ``ROCK_BASE_URL`` is unset) runs sandboxes in this process — embedded mode.
    :param xrl_authorization: deprecated; sent as ``XRL-Authorization: Bearer <value>`` to a server.
    :param extra_headers: extra HTTP headers for every call to a server.
    """

    base_url: str | None = attrs.field(factory=lambda: os.environ.get("ROCK_BASE_URL") or None, validator=_text(True))
    xrl_authorization: str | None = attrs.field(default=None, repr=False, validator=_text(True))
    extra_headers: dict[str, str] = attrs.field(factory=dict, validator=_str_dict(False))


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

    :raises InvalidConfig: a negative ``auto_*`` value, both ``auto_archive_seconds`` and
        ``auto_delete_seconds``, a value of the wrong type.
    """

    image: str = attrs.field(default="python:3.11", validator=_text(False))
    image_os: str = attrs.field(default="linux", validator=_text(False))
    auto_clear_seconds: int = attrs.field(default=300, validator=_non_negative_int(False))
    startup_timeout: float = attrs.field(
        factory=lambda: _env_float("ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS", 180.0), validator=_positive_number(False)
    )
    memory: str = attrs.field(default="8g", validator=_text(False))
    cpus: float = 2
    limit_cpus: float | None = None
    num_gpus: int | None = attrs.field(default=None, validator=_non_negative_int(True))
    accelerator_type: str | None = attrs.field(default=None, validator=_text(True))
    user_id: str | None = attrs.field(default=None, validator=_text(True))
    experiment_id: str | None = attrs.field(default=None, validator=_text(True))
    cluster: str = attrs.field(
        factory=lambda: os.environ.get("ROCK_DEFAULT_CLUSTER") or "vpc-nt-a", validator=_text(False)
    )
    namespace: str | None = attrs.field(default=None, validator=_text(True))
    registry_username: str | None = attrs.field(default=None, validator=_text(True))
    registry_password: str | None = attrs.field(default=None, repr=False, validator=_text(True))
    use_kata_runtime: bool = attrs.field(default=False, validator=_bool)
    sandbox_id: str | None = attrs.field(default=None, validator=_text(True))
    auto_archive_seconds: int | None = attrs.field(default=None, validator=_non_negative_int(True))
    auto_delete_seconds: int | None = attrs.field(default=None, validator=_non_negative_int(True))
    disk: str | None = attrs.field(default="50G", validator=_text(True))
    # rock additions
    env: dict[str, str] | None = attrs.field(default=None, validator=_str_dict(True))
    metadata: dict[str, str] | None = attrs.field(default=None, validator=_str_dict(True))
    network: str | None = attrs.field(default=None, validator=_text(True))
    network_group: str | None = attrs.field(default=None, validator=_text(True))
    pids_limit: int | None = attrs.field(default=None, validator=_positive_int(True))
    cap_add: list[str] | None = attrs.field(default=None, validator=_str_list)

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


def _at_least_one(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(attribute, value, "must be an integer >= 1")


@attrs.define(kw_only=True)
class SandboxGroupConfig(SandboxConfig):
    """A :class:`SandboxConfig` for ``size`` identical sandboxes.

    :param size: how many sandboxes.
    :param start_concurrency: how many ``start()`` calls run at once.
    :param start_retry_times: attempts per sandbox before ``SandboxGroup.start()`` gives up.
    """

    size: int = attrs.field(default=2, validator=_at_least_one)
    start_concurrency: int = attrs.field(default=2, validator=_at_least_one)
    start_retry_times: int = attrs.field(default=3, validator=_at_least_one)
