"""``rock model-service ...``: ROCK's model service commands (:mod:`rock.sdk.model.cli`), the
same program the sandbox runs from its zipapp."""

from __future__ import annotations

import click


@click.command(
    "model-service",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def model_service(args: tuple[str, ...]) -> None:
    """The model service: start --type local|proxy, stop, watch-agent --pid, anti-call-llm --index."""
    from rock.sdk.model.cli import main

    main(["model-service", *args])
