"""``rock sandbox commit SANDBOX_ID IMAGE_TAG`` (ROCK's commit): keep a sandbox's files (not its
processes) as the image ``IMAGE_TAG`` on its node and wait until it is done; print the tag, or
``--json`` the commit's last status. A tag naming a registry is pushed there only when the
engine's ``commit_registries`` lists it (``--username``; the password from
``ROCK_COMMIT_PASSWORD`` or ``--password``); otherwise the commit is refused, naming the setting.
A failed commit exits 1 with its stage and message.
"""

from __future__ import annotations

import click

from rock._cli_common import (
    base_url_option,
    fail,
    json_option,
    print_json,
    resolve_target,
    run,
    spinner,
)
from rock._cli_sandbox import sandbox
from rock_core.actions import CommitPhase, CommitStatusResponse
from rock_core.converters import unstructure_wire

__all__ = ["commit"]


@sandbox.command()
@click.argument("sandbox_id")
@click.argument("image_tag")
@click.option("--username", default="", help="The registry's user, for a push.")
@click.option(
    "--password",
    default="",
    envvar="ROCK_COMMIT_PASSWORD",
    show_envvar=True,
    help="The registry's password, for a push (better from the environment).",
)
@click.option(
    "--timeout", default=1800.0, show_default=True, help="Seconds to wait for the commit."
)
@base_url_option
@json_option
def commit(
    sandbox_id: str,
    image_tag: str,
    username: str,
    password: str,
    timeout: float,
    base_url: str | None,
    as_json: bool,
) -> None:
    """Commit a sandbox's files (not its processes) as an image tag (ROCK's commit)."""
    target = resolve_target(base_url)

    async def go() -> CommitStatusResponse | None:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        with spinner(f"Committing {sandbox_id} as {image_tag}..."):
            return await handle.commit(image_tag, username, password, timeout=timeout, interval=1)

    status = run(go)
    if status is None:
        fail(f"sandbox {sandbox_id} has no id to commit", 1)
    if as_json:
        print_json(unstructure_wire(status))
    if status.phase is not CommitPhase.SUCCEEDED:
        fail(
            f"commit of {sandbox_id} to {image_tag} failed at {status.failed_stage} "
            f"({status.error_code.value if status.error_code else 'unknown'}): "
            f"{status.error_message}",
            1,
        )
    if not as_json:
        click.echo(status.image_tag)
