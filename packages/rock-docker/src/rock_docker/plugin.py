"""rock-docker's rock plugin: registers :class:`~rock_docker.runtime.DockerRuntime` as ``docker``.

Announced in the ``rock`` entry-point group (``docker = "rock_docker.plugin"``), so rock finds
it once the distribution is installed.
"""

from __future__ import annotations

from rock_core import hookimpl
from rock_core.hookspecs import Register

__all__ = ["rock_register_runtimes"]


@hookimpl
def rock_register_runtimes(register: Register) -> None:
    """Register the Docker runtime under the name ``docker``."""
    # Imported here, when an engine asks for runtimes: every `rock` command loads the plugins
    # (for theirs), and Docker's client library is most of that load.
    from rock_docker.runtime import DockerRuntime

    register(DockerRuntime.name, DockerRuntime)
