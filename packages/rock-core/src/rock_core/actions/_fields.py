"""Field helpers shared by the wire models of :mod:`rock_core.actions`."""

from __future__ import annotations

from typing import Any

from rock_core.models import NonBlankStr, constrained


def sandbox_id_field() -> Any:
    """The ``sandbox_id`` field of a server variant: required and non-blank (ROCK declares the
    field ``NonBlankStr``)."""
    return constrained(NonBlankStr)
