"""The ``rock`` command.

Built-in commands live here; installed plugins add theirs through the ``rock_cli_commands`` hook.
Plugins are loaded only when a command that is not built in is asked for (or ``--help`` lists
them), so ``rock --version`` and the built-in commands work even when a plugin is broken.
"""

from __future__ import annotations

import importlib
import sys
import types

import click

from rock import __version__

__all__ = ["BUILT_IN", "RockGroup", "main"]

_META_KEY = "rock.plugin_commands"

# httpx imports its own command line (``httpx._main``: rich, pygments, ...) when it is imported and
# rich is installed, some 60 ms of every `rock` command that talks HTTP. The `rock` process never
# runs httpx's command line; without that module httpx's ``main`` is its own stub saying so.
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", types.ModuleType("httpx._main"))

#: The built-in commands: name -> (module, attribute). A command's module is imported only when
#: that command runs (or ``--help`` lists it), so ``rock sandbox list`` never loads the engine,
#: the admin's web stack or the benches.
BUILT_IN = {
    "admin": ("rock.admin.cli", "admin"),
    "bench": ("rock.bench.cli", "bench"),
    "log": ("rock._cli_log", "log_command"),
    "model-service": ("rock._cli_model_service", "model_service"),
    "plugins": ("rock._cli_plugins", "plugins_command"),
    "sandbox": ("rock._cli_sandbox", "sandbox"),
}


class RockGroup(click.Group):
    """A click group whose commands are its own (imported on first use) plus those installed
    plugins add, loaded lazily."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Built-in command names and the plugins' command names, sorted."""
        return sorted({*super().list_commands(ctx), *BUILT_IN, *self._plugin_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """A built-in command, else a plugin's command of that name (loading plugins on first need)."""
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in BUILT_IN:
            module, attribute = BUILT_IN[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        if command is None:
            command = self._plugin_commands(ctx).get(cmd_name)
        return command

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        meta = ctx.find_root().meta
        if _META_KEY not in meta:
            meta[_META_KEY] = self._load_plugin_commands(ctx)
        commands: dict[str, click.Command] = meta[_META_KEY]
        return commands

    def _load_plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        # A broken plugin costs its own commands, with a warning, never the whole CLI.
        from rock._cli_plugins import get_plugins
        from rock_core.errors import PluginError

        collected = click.Group("rock")
        try:
            get_plugins(ctx).add_cli_commands(collected)
        except PluginError as exc:
            click.echo(f"rock: warning: plugin commands unavailable: {exc}", err=True)
            return {}
        commands: dict[str, click.Command] = {}
        for name, command in collected.commands.items():
            if name in self.commands or name in BUILT_IN:
                click.echo(
                    f"rock: warning: a plugin's command {name!r} is ignored: it is built in",
                    err=True,
                )
            else:
                commands[name] = command
        return commands


def _distribution_version(distribution: str, fallback: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return fallback


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import rock_core

    sdk = _distribution_version("rock-sdk", __version__)
    core = _distribution_version("rock-core", rock_core.__version__)
    click.echo(f"rock-sdk {sdk}, rock-core {core}")
    ctx.exit()


@click.group(cls=RockGroup)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the versions of rock-sdk and rock-core and exit.",
)
@click.pass_context
def main(ctx: click.Context) -> None:
    """rock: sandboxes for agentic reinforcement learning."""
    from rock._cli_common import local_admin_url
    from rock_core.hookspecs import LOCAL_ADMIN_URL

    ctx.meta[LOCAL_ADMIN_URL] = local_admin_url
