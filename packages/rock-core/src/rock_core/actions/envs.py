"""GEM environments: make, reset, step, close and list, as the admin and the rocklet read them."""

from __future__ import annotations

from typing import Any

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.models import (
    NonBlankStr,
    constrained,
)

__all__ = [
    "EnvMakeRequest",
    "EnvResetRequest",
    "EnvStepRequest",
    "EnvCloseRequest",
    "EnvListRequest",
    "EnvMakeResponse",
    "EnvResetResponse",
    "EnvStepResponse",
    "EnvCloseResponse",
    "EnvListResponse",
]


@attrs.frozen(kw_only=True)
class EnvMakeRequest:
    """Create GEM environment ``env_id`` (in sandbox ``sandbox_id`` when talking to a rocklet)."""

    env_id: NonBlankStr = constrained(NonBlankStr)
    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)


@attrs.frozen(kw_only=True)
class EnvResetRequest:
    """Reset the environment of ``sandbox_id``, optionally with a ``seed``."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    seed: int | None = None


@attrs.frozen(kw_only=True)
class EnvStepRequest:
    """Send ``action`` (text, e.g. ``"\\boxed{up}"``) to the environment of ``sandbox_id``."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    action: str


@attrs.frozen(kw_only=True)
class EnvCloseRequest:
    """Close the environment of ``sandbox_id`` (the admin also stops the sandbox)."""

    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class EnvListRequest:
    """``POST /apis/v1/envs/gem/list``: list environment ids, asked of ``sandbox_id``'s agent."""

    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)


@attrs.frozen(kw_only=True)
class EnvMakeResponse:
    """The sandbox that now holds the environment."""

    sandbox_id: str


@attrs.frozen(kw_only=True)
class EnvResetResponse:
    """The first observation after a reset, and GEM's ``info``."""

    observation: Any
    info: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EnvStepResponse:
    """What one step returned: GEM's five-tuple, as named fields."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EnvCloseResponse:
    """The sandbox whose environment was closed."""

    sandbox_id: str


@attrs.frozen(kw_only=True)
class EnvListResponse:
    """The registered GEM environment ids."""

    env_id: list[str] = attrs.field(factory=list)
