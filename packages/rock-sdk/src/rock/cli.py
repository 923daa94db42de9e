"""The ``rock`` command."""

import click

from rock import __version__


@click.group()
@click.version_option(__version__, prog_name="rock")
def main() -> None:
    """rock: sandboxes for agentic reinforcement learning."""
