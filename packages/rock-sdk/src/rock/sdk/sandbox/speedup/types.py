"""ROCK's ``SpeedupType``: the kinds of mirror settings ``sandbox.network.speedup`` writes."""

from __future__ import annotations

import enum

__all__ = ["SpeedupType"]


class SpeedupType(str, enum.Enum):
    """A kind of mirror setting; its value names the strategy that writes it.

    ``APT`` and ``PIP`` take a mirror's base URL (``http://mirror.example``), ``GITHUB`` an IP
    address. The strategies come from the ``rock-speedup`` package; a plugin may register more
    types (then pass the type's name as a string).
    """

    APT = "apt"
    PIP = "pip"
    GITHUB = "github"

    def __str__(self) -> str:
        return self.value
