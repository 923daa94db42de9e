"""``rock plugins``, and the lazily built plugin facade the ``rock`` command shares."""

from __future__ import annotations

import json

import click

from rock_core.errors import PluginError
from rock_core.plugins import PluginInfo, Plugins

__all__ = ["get_plugins", "plugins_command"]

_META_KEY = "rock.plugins"


def get_plugins(ctx: click.Context) -> Plugins:
    """The plugins of this ``rock`` invocation, loaded on first use and shared by its commands.

    :raises rock_core.errors.PluginError: when an installed plugin fails to load.
    """
    meta = ctx.find_root().meta
    if _META_KEY not in meta:
        meta[_META_KEY] = Plugins.load()
    plugins: Plugins = meta[_META_KEY]
    return plugins


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.pass_context
def plugins_command(ctx: click.Context, as_json: bool) -> None:
    """List the installed rock plugins: distribution, version and the hooks each implements.

    Plugins switched off by ROCK_DISABLE_PLUGINS or ROCK_PLUGINS are listed as blocked.
    """
    try:
        infos = get_plugins(ctx).describe()
    except PluginError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps([_as_json(info) for info in infos], indent=2))
    elif not infos:
        click.echo("no plugins installed")
    else:
        click.echo(_table(infos))


def _as_json(info: PluginInfo) -> dict[str, object]:
    return {
        "plugin": info.name,
        "distribution": info.distribution,
        "version": info.version,
        "entry_point": info.entry_point,
        "hooks": list(info.hooks),
        "blocked": info.blocked,
    }


def _table(infos: list[PluginInfo]) -> str:
    rows = [("plugin", "distribution", "version", "hooks")]
    for info in infos:
        hooks = "(blocked)" if info.blocked else ", ".join(info.hooks) or "-"
        rows.append((info.name, info.distribution or "-", info.version or "-", hooks))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3]
        for row in rows
    )
