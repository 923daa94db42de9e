"""rock-gem's rock plugin: the ``gem`` environment provider and ROCK's GEM routes on the admin.

Announced in the ``rock`` entry-point group (``gem = "rock_gem.plugin"``); its settings are the
table ``[plugins.gem]`` (or ``ROCK_PLUGIN_GEM_<KEY>`` variables), handed to
:class:`~rock_gem.provider.GemProvider`'s constructor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rock_core import hookimpl
from rock_core.hookspecs import Register

__all__ = [
    "rock_admin_routes",
    "rock_cli_commands",
    "rock_configure",
    "rock_register_env_providers",
]


@hookimpl
def rock_configure(config: Mapping[str, Any]) -> None:
    """Read ``[plugins.gem]`` (:class:`~rock_gem.options.GemOptions`) and keep it for EnvHub
    (its database and default image).

    :raises InvalidParameter: a bad or unknown key, named ``plugins.gem.<key>`` with its value.
    """
    from rock_gem import envhub
    from rock_gem.options import GemOptions

    envhub.configured = GemOptions.from_table(config)


@hookimpl
def rock_register_env_providers(register: Register) -> None:
    """Register :class:`~rock_gem.provider.GemProvider` under the name ``gem``."""
    from rock_gem.provider import GemProvider

    register(GemProvider.name, GemProvider)


@hookimpl
def rock_admin_routes() -> list[Any]:
    """``POST /apis/v1/envs/gem/{make,reset,step,close,list,batch}``."""
    from rock_gem import envhub
    from rock_gem.routes import routes

    return routes() + envhub.routes()


@hookimpl
def rock_cli_commands(cli: Any) -> None:
    """``rock envhub register|list|get|delete``."""
    from rock_gem.cli import envhub

    cli.add_command(envhub)
