"""The Docker runtime's settings (its constructor's keyword arguments: ``[engine.runtime_options]``,
``[plugins.docker]`` or ``ROCK_PLUGIN_DOCKER_<KEY>``), read by rock-core's converters.

A bad value is named by its setting and value (``max_concurrency: expected an integer >= 1,
got 0``), as every plugin's options are; :class:`DockerOptions` describes each setting.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import attrs

from rock_core.converters import READ_AS, checked, structure_value
from rock_core.models import NonNegativeFloat, PositiveFloat, must

__all__ = ["DockerOptions"]


def _path(value: Any, field: attrs.Attribute[Any]) -> str | os.PathLike[str] | None:
    """A folder's path: a ``Path`` as given (from Python), else read as text (from a file)."""
    if isinstance(value, os.PathLike):
        return value
    return structure_value(value, Optional[str], path=field.name)  # type: ignore[no-any-return]


def _path_field() -> Any:
    return attrs.field(
        default=None,
        converter=attrs.Converter(_path, takes_field=True),
        metadata={READ_AS: Optional[str]},
    )


def _is_whole(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@attrs.frozen(kw_only=True)
class DockerOptions:
    """What :class:`~rock_docker.runtime.DockerRuntime` is built with: its keyword arguments.

    :param base_url: the engine's address (``unix:///var/run/docker.sock``, ``tcp://...``);
        ``None`` reads ``DOCKER_HOST`` and friends like the docker CLI does. The engine must see
        this machine's files: the rocklet is bind-mounted from ``rocklet_dir``.
    :param rocklet_dir: where ``rocklet.pyz`` is built and kept, one sub-directory per content
        hash (default :func:`~rock_core.rocklet_delivery.default_rocklet_dir`).
    :param publish_host: the host address container ports are published on.
    :param network: the network mode of containers whose spec names none (``bridge``, ``host``,
        ``none`` or the name of a Docker network); a spec may choose with the runtime option
        ``network`` (``bridge``, ``host`` or ``none``).
    :param stop_timeout: seconds Docker itself waits before killing a container it stops on its
        own (engine shutdown); :meth:`~rock_docker.runtime.DockerRuntime.stop` takes its own.
    :param max_concurrency: Docker calls in flight at once (worker threads and pooled
        connections); more wait their turn.
    :param api_timeout: seconds to wait for the engine's answer to one call.
    :param init: run Docker's init as the container's first process, so that the orphans a
        sandbox's commands leave behind are reaped.
    :param socket_dir: where the rocklets' unix sockets live on this host, one sub-directory per
        container (default ``$TMPDIR/rock-<uid>``; keep it short: a socket path has at most 107
        bytes). Made mode 0700; an existing one must be a folder (not a link) of this user that
        no one else may write, or every create is refused naming it.
    :param isolated_network: the Docker network that ``network: bridge`` means, one where
        inter-container communication is disabled, so sandboxes reach the outside but not each
        other. ``None`` (the default): Docker's default bridge when the engine runs with
        ``--icc=false`` (``"icc": false`` in daemon.json; the fastest starts), else
        ``rock-sandboxes``, a bridge network rock creates on first use with inter-container
        communication disabled (its embedded DNS costs each start some 50 ms). A name: that
        network, created so if missing.
    :param nofile_limit: the open-files limit (soft and hard) of every process in a sandbox;
        ``None`` keeps Docker's (the engine's own, often a million). It must not exceed the
        Docker engine's own hard limit.
    :param publish_ports: publish each sandbox's ports 22555 and 8080 through Docker (one
        ``docker-proxy`` process and packet-filter rules each) and reach the rocklet there. By
        default the rocklet listens on a unix socket in ``socket_dir`` instead, and the engine
        serves ``port_mapping``'s host ports itself, through the rocklet: faster starts, some
        3 MB less per sandbox, and any port of the sandbox reachable the same way.
    :param egress_dns: the name server (``address`` or ``address:port``) the domains of egress
        allow-lists are resolved with, which sandboxes with such a list may reach on port 53;
        with it set, every container is given it as its DNS server (Docker's ``--dns``, which
        uses port 53). ``None``: the host's resolver, and its name servers as Docker gives them.
    :param egress_resolve_interval: seconds between two resolutions of an allow-list's domains
        (checked at the engine's reconcile, so at most every ``reconcile_interval``).
    """

    base_url: str | None = checked(Optional[str], default=None)
    rocklet_dir: str | os.PathLike[str] | None = _path_field()
    publish_host: str = checked(str, default="127.0.0.1")
    network: str = checked(str, default="bridge")
    stop_timeout: float = checked(NonNegativeFloat, default=10.0)
    max_concurrency: int = checked(
        int, default=32, validator=must(lambda v: _is_whole(v, 1), "an integer >= 1")
    )
    api_timeout: float = checked(PositiveFloat, default=120.0)
    init: bool = checked(bool, default=True)
    socket_dir: str | os.PathLike[str] | None = _path_field()
    isolated_network: str | None = checked(Optional[str], default=None)
    nofile_limit: int | None = checked(
        Optional[int],
        default=16384,
        validator=must(lambda v: v is None or _is_whole(v, 64), "a whole number >= 64 or None"),
    )
    # Only a real boolean: a text "false" is refused rather than read (as the tests ask).
    publish_ports: bool = attrs.field(
        default=False,
        validator=must(lambda v: isinstance(v, bool), "true or false"),
        metadata={READ_AS: Any},
    )
    egress_dns: str | None = checked(Optional[str], default=None)
    egress_resolve_interval: float = checked(PositiveFloat, default=30.0)
