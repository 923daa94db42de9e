"""``rock sandbox egress ID`` (rock): show or replace a running sandbox's egress policy.

Without options it prints the policy in force. ``--default deny`` (or ``allow``) with
``--allow``/``--deny`` rules (``CIDR[:PORTS[:PROTOCOL]]``: ``A.B.C.D:443:tcp``,
``A.B.C.D:8000-8100``, ``A.B.C.D/N``) and ``--domain`` names replaces it, in force on the
host before the command returns; ``--none`` removes it.
"""

from __future__ import annotations

from typing import Any

import click

from rock._cli_common import base_url_option, json_option, print_json, resolve_target, run, spinner
from rock._cli_sandbox import sandbox
from rock_core.actions import SandboxStatusResponse
from rock_core.converters import unstructure_wire
from rock_core.egress import egress_policy

__all__ = ["egress", "parse_rule"]


def parse_rule(action: str, text: str) -> dict[str, Any]:
    """``"A.B.C.D:443,8000-8100:tcp"`` as a rule's wire form."""
    cidr, _, rest = text.partition(":")
    ports, _, protocol = rest.partition(":")
    return {
        "action": action,
        "cidr": cidr,
        "ports": [p for p in ports.split(",") if p],
        "protocol": protocol or ("tcp" if ports else "any"),
    }


@sandbox.command()
@click.argument("sandbox_id")
@click.option("--default", "default", type=click.Choice(["allow", "deny"]), default=None)
@click.option("--allow", "allow", multiple=True, metavar="CIDR[:PORTS[:PROTO]]")
@click.option("--deny", "deny", multiple=True, metavar="CIDR[:PORTS[:PROTO]]")
@click.option("--domain", "domains", multiple=True, metavar="NAME")
@click.option("--none", "remove", is_flag=True, help="Remove the sandbox's policy.")
@base_url_option
@json_option
def egress(
    sandbox_id: str,
    default: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    domains: tuple[str, ...],
    remove: bool,
    base_url: str | None,
    as_json: bool,
) -> None:
    """Show or replace where a running sandbox may connect (its egress policy)."""
    changing = remove or default is not None or allow or deny or domains
    policy = None
    if changing and not remove:
        rules = [parse_rule("allow", r) for r in allow] + [parse_rule("deny", r) for r in deny]
        try:
            policy = egress_policy(
                {"default": default or "deny", "rules": rules, "domains": list(domains)}
            )
        except Exception as exc:  # noqa: BLE001 - InvalidParameter, shown as the usage error
            raise click.UsageError(str(exc)) from None
    target = resolve_target(base_url)

    async def go() -> SandboxStatusResponse:
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        if not changing:
            return await handle.get_status()
        with spinner(f"Changing the egress policy of {sandbox_id}..."):
            return await handle.update_egress(policy)

    found = run(go)
    if as_json:
        print_json(unstructure_wire(found) if changing else {"egress": found.egress})
        return
    shown = egress_policy(found.egress).describe() if found.egress else "no egress policy"
    click.echo(f"{sandbox_id}: {shown}")
