"""rock-nomad's rock plugin: registers :class:`~rock_nomad.runtime.NomadRuntime` as ``nomad``.

Announced in the ``rock`` entry-point group (``nomad = "rock_nomad.plugin"``). Its settings are
the plugin table ``[plugins.nomad]`` (``ROCK_PLUGIN_NOMAD_*`` variables on top), which the engine
gives the runtime's constructor with ``[engine.runtime_options]`` on top.
"""

from __future__ import annotations

from rock_core import hookimpl
from rock_core.hookspecs import Register

__all__ = ["rock_register_runtimes"]


@hookimpl
def rock_register_runtimes(register: Register) -> None:
    """Register the Nomad runtime under the name ``nomad``."""
    from rock_nomad.runtime import NomadRuntime

    register(NomadRuntime.name, NomadRuntime)
