"""``rock admin start|serve|stop|status``: run the admin server.

``start`` runs it in the background (pid file and log file in the state directory,
``$ROCK_ADMIN_STATE_DIR`` or ``~/.rock/admin``); ``serve`` runs it in the foreground (systemd,
a Nomad job). Exit codes: 0 success, 1 failure (including "already running"), 3 from ``status``
when no admin runs.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import attrs
import click

from rock.admin import daemon
from rock.admin.config import AdminSettings, load_settings
from rock_core.errors import InvalidParameter
from rock_core.sizes import format_size

__all__ = ["admin"]

_config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file (default: $ROCK_CONFIG); see rock.admin.config.",
)


def _settings(config_file: str | None, **overrides: Any) -> AdminSettings:
    try:
        return load_settings(config_file, **overrides)
    except InvalidParameter as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def admin() -> None:
    """Run rock's admin server (ROCK's HTTP API for remote trainers)."""


_insecure_option = click.option(
    "--insecure-no-keys",
    "insecure_no_keys",
    is_flag=True,
    default=False,
    help="Serve without API keys on a non-loopback --host: anyone who reaches it drives every sandbox.",
)


@admin.command()
@click.option("--host", default=None, help="Address to listen on.  [default: 127.0.0.1]")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port to listen on.  [default: 8080]",
)
@_config_option
@_insecure_option
def start(
    host: str | None, port: int | None, config_file: str | None, insecure_no_keys: bool
) -> None:
    """Start the admin server in the background."""
    settings = _settings(
        config_file, host=host, port=port, allow_keyless_remote=insecure_no_keys or None
    )
    try:
        data = daemon.start(settings, config_file)
    except (daemon.AdminAlreadyRunning, daemon.KeylessRemoteRefused) as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"rock admin started: {data['url']} (pid {data['pid']}, log {settings.log_file})")


@admin.command()
@click.option("--host", default=None, help="Address to listen on.  [default: 127.0.0.1]")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port to listen on.  [default: 8080]",
)
@_config_option
@_insecure_option
def serve(
    host: str | None, port: int | None, config_file: str | None, insecure_no_keys: bool
) -> None:
    """Run the admin server in the foreground until SIGTERM or Ctrl-C."""
    settings = _settings(
        config_file, host=host, port=port, allow_keyless_remote=insecure_no_keys or None
    )
    try:
        code = daemon.serve(settings)
    except (
        daemon.AdminAlreadyRunning,
        daemon.MissingServerLibraries,
        daemon.KeylessRemoteRefused,
        daemon.UnsafeStateDir,
        InvalidParameter,  # a setting read only when the server is built ([plugins.x] tables)
    ) as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)


@admin.command()
@_config_option
@click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds before SIGKILL."
)
@click.option(
    "--remove-sandboxes",
    is_flag=True,
    help="Stop and remove the admin's sandboxes before it exits (default: they keep running "
    "and the next `rock admin start` on the same state takes them back).",
)
def stop(config_file: str | None, timeout: float, remove_sandboxes: bool) -> None:
    """Stop the background admin server; its sandboxes keep running unless --remove-sandboxes."""
    settings = _settings(config_file)
    if remove_sandboxes and settings.engine.cluster is not None:
        raise click.ClickException(
            f"--remove-sandboxes: the sandboxes belong to cluster {settings.engine.cluster!r}, "
            "whose other admins take them over; delete them through the API instead"
        )
    held = daemon.sandboxes_held(daemon.status(settings))
    pid = daemon.stop(settings, timeout=timeout, remove_sandboxes=remove_sandboxes)
    if pid is None:
        click.echo("rock admin is not running")
        return
    count = "its sandboxes" if held is None else f"its {held} sandbox(es)"
    if remove_sandboxes:
        click.echo(f"rock admin stopped (pid {pid}); {count} were stopped and removed")
    elif not held:  # none, or the admin did not say how many (API keys, no ROCK_API_KEY)
        click.echo(f"rock admin stopped (pid {pid}); its sandboxes keep running")
    else:
        click.echo(
            f"rock admin stopped (pid {pid}); {count} keep running: the next `rock admin "
            "start` on this state takes them back, `rock admin stop --remove-sandboxes` "
            "removes them at a stop"
        )


@admin.command()
@_config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(config_file: str | None, as_json: bool) -> None:
    """Show where the admin server runs and its sandboxes by state (exit 3 if not running)."""
    settings = _settings(config_file)
    found = daemon.status(settings)
    if as_json:
        click.echo(
            json.dumps({"running": found is not None, **(attrs.asdict(found) if found else {})})
        )
    elif found is None:
        click.echo("rock admin is not running")
    else:
        click.echo(f"rock admin is running: {found.url}")
        click.echo(f"  pid:       {found.pid}")
        click.echo(
            f"  log:       {found.log_file or 'its terminal (rock admin serve): no log file'}"
        )
        click.echo(f"  store:     {found.store_path}")
        if found.process:
            click.echo(f"  process:   {_process_line(found.process)}")
        if found.sandboxes is None:
            click.echo(f"  sandboxes: unknown ({found.unanswered})")
        else:
            counts = (
                ", ".join(f"{state} {n}" for state, n in found.sandboxes.items() if n) or "none"
            )
            click.echo(f"  sandboxes: {counts}")
        for tenant, row in (found.tenants or {}).items():
            click.echo(f"  tenant:    {tenant}: {_tenant_use(row)}")
        for key, pool in (found.warm_pools or {}).items():
            click.echo(
                f"  warm pool: {key} ({pool.get('image')}) {pool.get('ready', 0)}/{pool.get('size', 0)} ready"
            )
    if found is None:
        sys.exit(3)


def _process_line(process: dict[str, Any]) -> str:
    """The admin process's memory and collector settings in words: ``68.9 MiB resident, gc
    thresholds 1000000/50/100, 69389 objects frozen``."""
    rss = process.get("rss_bytes")
    memory = f"{int(rss) / 2**20:.1f} MiB resident" if rss is not None else "memory unknown"
    thresholds = "/".join(str(n) for n in process.get("gc_thresholds") or [])
    return f"{memory}, gc thresholds {thresholds}, {process.get('gc_frozen', 0)} objects frozen"


def _tenant_use(row: dict[str, Any]) -> str:
    """A tenant's row of ``/admin/status`` in words: ``2 sandboxes (max 5), 1.00g memory,
    1 cpus (max 4), 3 snapshots (max 10)``."""
    quota = row.get("quota") or {}

    def part(value: Any, limit: Any, unit: str, show: Any) -> str:
        text = f"{show(value)} {unit}"
        return text if limit is None else f"{text} (max {show(limit)})"

    return ", ".join(
        [
            part(row.get("sandboxes", 0), quota.get("max_sandboxes"), "sandboxes", str),
            part(
                row.get("memory", 0),
                quota.get("max_memory"),
                "memory",
                lambda n: format_size(int(n)),
            ),
            part(row.get("cpus", 0), quota.get("max_cpus"), "cpus", lambda n: f"{float(n):g}"),
            part(row.get("snapshots", 0), quota.get("max_snapshots"), "snapshots", str),
        ]
    )
