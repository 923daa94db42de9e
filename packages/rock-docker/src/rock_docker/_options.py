"""The Docker runtime's settings (its constructor's keyword arguments: ``[engine.runtime_options]``,
``[plugins.docker]`` or ``ROCK_PLUGIN_DOCKER_<KEY>``), read by rock-core's converters.

A bad value is named by its setting and value (``max_concurrency: expected an integer >= 1,
got 0``), as every plugin's options are; :class:`~rock_docker.runtime.DockerRuntime` describes
each setting.
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
    """What :class:`~rock_docker.runtime.DockerRuntime` is built with (see its docstring)."""

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
