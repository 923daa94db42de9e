"""The Nomad runtime's settings (``[plugins.nomad]``, ``[engine.runtime_options]`` or
``ROCK_PLUGIN_NOMAD_<KEY>``), read by rock-core's converters as every plugin's options are.

A bad value is named ``plugins.nomad.<key>`` with the value
(``plugins.nomad.priority: expected a whole number 1..100, got 0``); every bad key at once.
Defaults taken from ``NOMAD_*`` variables are :mod:`rock_nomad._connection`'s business, not this table's:
:class:`NomadOptions` describes each setting.
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
    """What :class:`~rock_nomad.runtime.NomadRuntime` is built with (its keyword arguments);
    ``None``: not set (the runtime then reads ``NOMAD_*`` or takes its default).

    :param address: Nomad's HTTP API (``https://nomad.example:4646``); default ``NOMAD_ADDR``,
        else ``http://127.0.0.1:4646``.
    :param token: an ACL token's secret (``submit-job``, ``read-job``, ``read-logs`` in
        ``namespace``, and Variables ``write`` and ``destroy`` on ``nomad/jobs/<job_prefix>*``
        there); default ``NOMAD_TOKEN``; none when the cluster has no ACLs.
    :param namespace: the namespace of the sandboxes' jobs (default ``NOMAD_NAMESPACE`` or ``default``).
    :param region: the region (default ``NOMAD_REGION``, else the agent's own).
    :param datacenters: where sandboxes may be placed (a list, or names separated by commas;
        default ``*``: every datacenter).
    :param node_pool: the node pool of the sandboxes' jobs (default: Nomad's ``default``).
    :param ca_cert: a CA bundle to verify Nomad's TLS certificate with (default ``NOMAD_CACERT``;
        else the system's).
    :param client_cert: / :param client_key: a client certificate for mutual TLS (default
        ``NOMAD_CLIENT_CERT`` / ``NOMAD_CLIENT_KEY``).
    :param tls_skip_verify: do not verify Nomad's certificate (tests only).
    :param sandbox_network: the Docker network, on every client node, that sandboxes join: made
        by the node's operator with inter-container traffic disabled, the node's ``meta``
        ``rock_sandbox_network`` naming it (deploy/nomad/client-setup.sh); sandboxes are placed
        only on such nodes.
    :param job_prefix: the prefix of every sandbox job's ID (``rock-<sandbox id>``); the runtime
        lists jobs by it.
    :param mhz_per_cpu: MHz of Nomad's ``CPU`` per CPU a sandbox asks for.
    :param priority: the jobs' priority (1-100).
    :param kill_timeout: seconds Nomad waits after SIGTERM before it kills a stopped sandbox.
    :param ephemeral_disk_mb: the group's ephemeral disk reservation.
    :param nofile_limit: the open-files limit of the sandbox's processes (docker driver ``ulimit``).
    :param rocklet_url: where Nomad's nodes download the rocklet; default the engine's
        (``[engine] rocklet_url``, which the admin sets to its own ``/rocklet.pyz``). Set it when
        the nodes reach the admin by another address than the one it knows itself by.
    :param api_timeout: seconds to wait for Nomad's answer to one (non-blocking) call.
    :param max_connections: HTTP connections to Nomad at once.
    :param event_stream: follow starts through one event stream (``/v1/event/stream``) instead of
        a blocking query per start; a start hears of its job from it.
    :param poll_after: seconds a start waits for news from the stream before it reads Nomad itself.
    """

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
