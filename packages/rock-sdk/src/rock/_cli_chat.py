"""``rock sandbox chat ID "PROMPT"``: the Chat protocol from the command line.

It runs ``sandbox.chat(PROMPT)`` against the sandbox ``ID`` of the admin (``--base-url``,
``$ROCK_BASE_URL`` or ``rock admin start``) and prints the reply on stdout. Each action is
announced on stderr (``rock: running: ...``) just before it runs. Destructive actions (delete,
stop, ``rm -rf``) need ``--yes``; ``--dry-run`` shows the plan and runs nothing.

Settings: ``--pip-mirror``/``--apt-mirror`` (else ``$ROCK_CHAT_PIP_MIRROR``/``$ROCK_CHAT_APT_MIRROR``),
``--llm-base-url`` and ``--llm-model`` (else ``$ROCK_CHAT_LLM_BASE_URL``/``$ROCK_CHAT_LLM_MODEL``;
the key only from ``$ROCK_CHAT_LLM_API_KEY``).

Exit codes: 0 when every planned action ran and succeeded (or the prompt asked for help), 1
otherwise (an action failed, the prompt was not understood, a destructive action waits for
``--yes``), 2 bad usage, 3 no such sandbox.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from rock._cli_common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    base_url_option,
    fail,
    json_option,
    print_json,
    resolve_target,
    run,
    sandbox_status,
)
from rock._cli_sandbox import sandbox

__all__ = ["chat_command"]


@sandbox.command("chat")
@click.argument("sandbox_id")
@click.argument("prompt")
@base_url_option
@click.option(
    "--yes", "-y", "confirm", is_flag=True, help="Allow destructive actions (delete, stop, rm -rf)."
)
@click.option("--dry-run", is_flag=True, help="Show what would run; run nothing.")
@click.option(
    "--pip-mirror",
    default=None,
    metavar="URL",
    help="PyPI mirror for installs [default: $ROCK_CHAT_PIP_MIRROR].",
)
@click.option(
    "--apt-mirror",
    default=None,
    metavar="URL",
    help="Debian mirror for installs [default: $ROCK_CHAT_APT_MIRROR].",
)
@click.option(
    "--llm-base-url",
    default=None,
    metavar="URL",
    help="An OpenAI-compatible API for free-form prompts [default: $ROCK_CHAT_LLM_BASE_URL].",
)
@click.option(
    "--llm-model", default=None, help="The model's name there [default: $ROCK_CHAT_LLM_MODEL]."
)
@json_option
def chat_command(
    sandbox_id: str,
    prompt: str,
    base_url: str | None,
    confirm: bool,
    dry_run: bool,
    pip_mirror: str | None,
    apt_mirror: str | None,
    llm_base_url: str | None,
    llm_model: str | None,
    as_json: bool,
) -> None:
    """Tell a sandbox what to do in plain English or Chinese; print its reply.

    Examples: `rock sandbox chat ID "install numpy"`, `rock sandbox chat ID "显示资源使用情况"`,
    `rock sandbox chat ID --yes "delete /tmp/old"`.
    """
    import attrs

    from rock.sdk.chat import ChatConfig, LLMConfig
    from rock_core.errors import InvalidParameter

    try:
        config = ChatConfig.from_env()
        changes: dict[str, Any] = {}
        if pip_mirror:
            changes["pip_mirror"] = pip_mirror
        if apt_mirror:
            changes["apt_mirror"] = apt_mirror
        if llm_base_url or llm_model:
            current = config.llm
            url = llm_base_url or (current.base_url if current else None)
            model = llm_model or (current.model if current else None)
            if not (url and model):
                raise InvalidParameter(
                    f"--llm-{'model' if url else 'base-url'}: required with the other --llm-* option, got None",
                    field="llm",
                    value=None,
                )
            changes["llm"] = LLMConfig(
                base_url=url, model=model, api_key=current.api_key if current else None
            )
        config = attrs.evolve(config, **changes)
    except InvalidParameter as exc:
        fail(str(exc), EXIT_USAGE)
    target = resolve_target(base_url)

    def announce(action: Any) -> None:
        click.echo(f"rock: running: {action.preview}", err=True)

    async def go() -> Any:
        await sandbox_status(target, sandbox_id)  # unknown id: exit 3 with the target named
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        return await handle.chat(
            prompt, confirm=confirm, dry_run=dry_run, config=config, on_action=announce
        )

    response = run(go)
    if as_json:
        from rock_core.converters import unstructure_wire

        print_json(unstructure_wire(response))
    else:
        click.echo(response.reply)
    answered = not response.actions and response.backend is not None  # help, or the model's answer
    sys.exit(EXIT_OK if response.ok or answered or (dry_run and response.actions) else EXIT_ERROR)
