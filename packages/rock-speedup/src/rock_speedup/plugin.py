"""rock-speedup's rock plugin: registers the ``apt``, ``pip`` and ``github`` speedup strategies.

Announced in the ``rock`` entry-point group (``speedup = "rock_speedup.plugin"``), so
``sandbox.network.speedup(...)`` finds the strategies once the distribution is installed.
"""

from __future__ import annotations

from rock_core import hookimpl
from rock_core.hookspecs import Register
from rock_speedup.apt import AptSpeedup
from rock_speedup.github import GitHubSpeedup
from rock_speedup.pip import PipSpeedup

__all__ = ["rock_register_speedups"]


@hookimpl
def rock_register_speedups(register: Register) -> None:
    """Register :class:`AptSpeedup`, :class:`PipSpeedup` and :class:`GitHubSpeedup` by their type names."""
    for strategy in (AptSpeedup, PipSpeedup, GitHubSpeedup):
        register(strategy.name, strategy)
