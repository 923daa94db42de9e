"""``rock sandbox pause`` and ``rock sandbox resume`` (rock): freeze a running sandbox, memory
and processes kept, and thaw it. A paused sandbox stays ``running`` (ROCK's state) and ``rock
sandbox status`` shows ``running (paused)``; calls into it are refused until it is resumed.
Each command prints the sandbox's state after it, or ``--json`` its whole status.
"""

from __future__ import annotations

import click

from rock._cli_common import (
    base_url_option,
    json_option,
    print_json,
    resolve_target,
    run,
    spinner,
    state_of,
)
from rock._cli_sandbox import sandbox
from rock_core.actions import SandboxStatusResponse
from rock_core.converters import unstructure_wire

__all__ = ["pause", "resume"]


def _pause_or_resume(sandbox_id: str, base_url: str | None, as_json: bool, pausing: bool) -> None:
    target = resolve_target(base_url)

    async def go() -> SandboxStatusResponse:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        with spinner(f"{'Pausing' if pausing else 'Resuming'} {sandbox_id}..."):
            return await (handle.pause() if pausing else handle.resume())

    found = run(go)
    if as_json:
        print_json(unstructure_wire(found))
        return
    click.echo(f"{sandbox_id} {state_of(found)}")


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
@json_option
def pause(sandbox_id: str, base_url: str | None, as_json: bool) -> None:
    """Pause a running sandbox: its processes freeze (no CPU), memory and processes kept."""
    _pause_or_resume(sandbox_id, base_url, as_json, pausing=True)


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
@json_option
def resume(sandbox_id: str, base_url: str | None, as_json: bool) -> None:
    """Resume a paused sandbox: its processes go on where they were."""
    _pause_or_resume(sandbox_id, base_url, as_json, pausing=False)
