"""``rock sandbox snapshot``, ``rock sandbox snapshots``, ``rock sandbox fork`` and ``rock
sandbox reset`` (rock): filesystem snapshots of sandboxes (their files over their image, never
their processes), the caller's list of them (``--delete NAME`` deletes), forks (a snapshot and N
sandboxes started from it, whose ids are printed one a line), and a reset of a running sandbox to
its image's files or a snapshot's (``--snapshot NAME``).
"""

from __future__ import annotations

from typing import Any

import click

from rock._cli_common import (
    base_url_option,
    json_option,
    print_json,
    print_table,
    resolve_target,
    run,
    spinner,
    when,
)
from rock._cli_sandbox import sandbox
from rock_core.actions import SandboxStatusResponse, SnapshotInfo
from rock_core.converters import unstructure_wire
from rock_core.sizes import format_bytes

__all__ = ["fork", "reset", "snapshot", "snapshots"]


@sandbox.command()
@click.argument("sandbox_id")
@click.option("--name", default=None, help="The snapshot's name [default: one is made up].")
@click.option(
    "--archive",
    is_flag=True,
    help="Keep it in the engine's archive store as well (other nodes, later days).",
)
@base_url_option
@json_option
def snapshot(
    sandbox_id: str, name: str | None, archive: bool, base_url: str | None, as_json: bool
) -> None:
    """Keep a sandbox's files (not its processes) as a snapshot; print its name."""
    target = resolve_target(base_url)

    async def go() -> SnapshotInfo:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        with spinner(f"Snapshotting {sandbox_id}..."):
            made: SnapshotInfo = await handle.snapshot(name, archive=archive)
        return made

    made = run(go)
    if as_json:
        print_json(unstructure_wire(made))
        return
    click.echo(made.name)
    frozen = "" if not made.frozen_seconds else f", frozen {made.frozen_seconds:.2f}s"
    stored = ", kept in the archive store" if made.archived else ""
    click.echo(f"{format_bytes(made.size)} over {made.source_image}{frozen}{stored}", err=True)


@sandbox.command()
@click.option("--delete", "delete", multiple=True, metavar="NAME", help="Delete this snapshot.")
@base_url_option
@json_option
def snapshots(delete: tuple[str, ...], base_url: str | None, as_json: bool) -> None:
    """List your snapshots (name, source sandbox, size, created), or delete some."""
    target = resolve_target(base_url)

    async def go() -> list[SnapshotInfo]:
        handle = target.sandbox()
        for name in delete:
            await handle.delete_snapshot(name)
        found: list[SnapshotInfo] = [] if delete else await handle.snapshots()
        return found

    found = run(go)
    if delete:
        for name in delete:
            click.echo(f"snapshot {name} deleted")
        return
    if as_json:
        print_json([unstructure_wire(s) for s in found])
        return
    rows: list[Any] = [
        [
            s.name,
            s.sandbox_id,
            format_bytes(s.size),
            when(s.created_at),
            s.image if s.on_node else "(archive store)",
        ]
        for s in found
    ]
    print_table(["NAME", "SANDBOX", "SIZE", "CREATED", "IMAGE"], rows)


@sandbox.command()
@click.argument("sandbox_id")
@click.argument("count", type=click.IntRange(min=1))
@base_url_option
@json_option
def fork(sandbox_id: str, count: int, base_url: str | None, as_json: bool) -> None:
    """Snapshot a sandbox and start COUNT sandboxes from it; print their ids once they run."""
    target = resolve_target(base_url)

    async def go() -> list[str]:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        with spinner(f"Forking {sandbox_id} into {count}..."):
            children = await handle.fork(count)
        return [str(child.sandbox_id) for child in children]

    ids = run(go)
    if as_json:
        print_json({"sandbox_ids": ids})
        return
    click.echo("\n".join(ids))


@sandbox.command()
@click.argument("sandbox_id")
@click.option("--snapshot", default=None, metavar="NAME", help="Reset to this snapshot's files.")
@base_url_option
@json_option
def reset(sandbox_id: str, snapshot: str | None, base_url: str | None, as_json: bool) -> None:
    """Put a running sandbox back to its image's files (or a snapshot's): its processes and
    sessions end; its id, ports and limits stay. Prints what it was reset to."""
    target = resolve_target(base_url)

    async def go() -> SandboxStatusResponse:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        with spinner(f"Resetting {sandbox_id}..."):
            done: SandboxStatusResponse = await handle.reset(snapshot)
        return done

    done = run(go)
    if as_json:
        print_json(unstructure_wire(done))
        return
    phase = (done.status or {}).get("reset")
    click.echo(f"{sandbox_id} {phase.message if phase else 'reset'}")
