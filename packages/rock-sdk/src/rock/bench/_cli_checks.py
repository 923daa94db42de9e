"""What the ``rock bench`` commands check before anything starts."""

from __future__ import annotations

import click

__all__ = ["check_memory"]


def check_memory(memory: str) -> None:
    """Refuse a bad ``--memory`` before anything starts."""
    from rock_core.errors import InvalidParameter
    from rock_core.sizes import parse_size

    try:
        parse_size(memory, field="--memory")
    except InvalidParameter as exc:
        raise click.UsageError(exc.message) from None
