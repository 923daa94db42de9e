"""The Nomad runtime's settings (``[plugins.nomad]``, ``[engine.runtime_options]`` or
``ROCK_PLUGIN_NOMAD_<KEY>``), read by rock-core's converters as every plugin's options are.

A bad value is named ``plugins.nomad.<key>`` with the value
(``plugins.nomad.priority: expected a whole number 1..100, got 0``); every bad key at once.
Defaults taken from ``NOMAD_*`` variables are the runtime's business, not this table's:
:class:`~rock_nomad.runtime.NomadRuntime` describes each setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

import attrs

from rock_core.converters import READ_AS, checked, structure_options, structure_value
from rock_core.models import must
from rock_nomad._job import SANDBOX_NETWORK

__all__ = ["NomadOptions", "PATH"]

#: Where these settings live, the start of every bad setting's name.
PATH = "plugins.nomad"

_JOB_PREFIX = re.compile(r"[A-Za-z0-9_~-]{1,32}")
_DOCKER_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
#: Docker network modes that are not a network an operator made without inter-container traffic.
_NOT_ISOLATED = ("bridge", "default", "host", "none")
_FLAG_TEXT = {"1": True, "yes": True, "on": True, "0": False, "no": False, "off": False}


def _names(value: Any, field: attrs.Attribute[Any]) -> tuple[str, ...]:
    """A list of names, or names separated by commas (as a variable holds them)."""
    if isinstance(value, str):
        value = value.split(",")
    names = structure_value(value, list[str], path=field.name)
    return tuple(name.strip() for name in names if name.strip())


def _flag(value: Any, field: attrs.Attribute[Any]) -> bool:
    """A boolean; as text also ``1``/``0``, ``yes``/``no``, ``on``/``off``."""
    if isinstance(value, str) and value.strip().lower() in _FLAG_TEXT:
        return _FLAG_TEXT[value.strip().lower()]
    return structure_value(value, bool, path=field.name)  # type: ignore[no-any-return]


def _read_by(convert: Any, default: Any, validator: Any = None) -> Any:
    return attrs.field(
        default=default,
        converter=attrs.Converter(convert, takes_field=True),
        validator=validator,
        metadata={READ_AS: Any},
    )


def _at_least(minimum: float, kind: type, *, optional: bool = False) -> Any:
    """A field of ``kind`` (``int``: a whole number) that is ``minimum`` or more."""
    words = "a whole number" if kind is int else "a number"
    return must(lambda v: (optional and v is None) or v >= minimum, f"{words} >= {minimum:g}")


def _network_ok(name: str) -> bool:
    return bool(_DOCKER_NETWORK.fullmatch(name)) and name not in _NOT_ISOLATED


@attrs.frozen(kw_only=True)
class NomadOptions:
    """What :class:`~rock_nomad.runtime.NomadRuntime` is built with; ``None``: not set (the
    runtime then reads ``NOMAD_*`` or takes its default)."""

    address: str | None = checked(Optional[str], default=None)
    token: str | None = checked(Optional[str], default=None)
    namespace: str | None = checked(Optional[str], default=None)
    region: str | None = checked(Optional[str], default=None)
    datacenters: tuple[str, ...] = _read_by(_names, ("*",), must(bool, "at least one name"))
    node_pool: str | None = checked(Optional[str], default=None)
    ca_cert: str | None = checked(Optional[str], default=None)
    client_cert: str | None = checked(Optional[str], default=None)
    client_key: str | None = checked(Optional[str], default=None)
    tls_skip_verify: bool = _read_by(_flag, False)
    sandbox_network: str = checked(
        str,
        default=SANDBOX_NETWORK,
        validator=must(
            _network_ok,
            "the name of a Docker network the nodes' operator made without inter-container traffic "
            "(deploy/nomad/client-setup.sh), not Docker's own bridge, host or none",
        ),
    )
    job_prefix: str = checked(
        str,
        default="rock-",
        validator=must(
            lambda v: bool(_JOB_PREFIX.fullmatch(v)),
            "1 to 32 letters, digits, '-', '_' or '~' (it begins each sandbox's job id and the path of its Nomad Variable)",
        ),
    )
    mhz_per_cpu: int = checked(int, default=1000, validator=_at_least(1, int))
    priority: int = checked(
        int, default=50, validator=must(lambda v: 1 <= v <= 100, "a whole number 1..100")
    )
    kill_timeout: float = checked(float, default=5.0, validator=_at_least(0, float))
    ephemeral_disk_mb: int = checked(int, default=300, validator=_at_least(10, int))
    nofile_limit: int | None = checked(
        Optional[int], default=16384, validator=_at_least(64, int, optional=True)
    )
    rocklet_url: str | None = checked(Optional[str], default=None)
    api_timeout: float = checked(float, default=30.0, validator=_at_least(1, float))
    max_connections: int = checked(int, default=512, validator=_at_least(1, int))
    event_stream: bool = _read_by(_flag, True)
    poll_after: float = checked(float, default=5.0, validator=_at_least(0.1, float))

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> NomadOptions:
        """Read the settings (the runtime's keyword arguments).

        :raises InvalidParameter: naming ``plugins.nomad.<key>`` and the value, every bad key at once.
        """
        return structure_options(table, cls, path=PATH)
