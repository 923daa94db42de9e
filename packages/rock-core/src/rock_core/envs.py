"""The contract an environment provider implements: :class:`EnvProvider` and :class:`Environment`.

``rock.make(env_id)`` asks the registered providers which one serves ``env_id`` and has it make an
:class:`Environment`, usually backed by a sandbox (GEM environments run inside the sandbox's
rocklet). Plugins register provider classes with the ``rock_register_env_providers`` hook.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

__all__ = ["EnvProvider", "Environment"]


class Environment(abc.ABC):
    """One running environment, driven with ROCK's GEM protocol: reset, step, close."""

    @abc.abstractmethod
    async def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a new episode; return ``(observation, info)``."""

    @abc.abstractmethod
    async def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply ``action``; return ``(observation, reward, terminated, truncated, info)``."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the environment and what backs it (its sandbox). Idempotent."""


class EnvProvider(abc.ABC):
    """Abstract base of every environment provider: one family of environments (``gem``).

    The engine builds each provider once, when an environment is first asked of it, as
    ``cls(engine, **table)``: the :class:`~rock_core.engine.manager.SandboxManager` whose
    sandboxes back the environments, and the registering plugin's configuration table.
    """

    #: The name the provider is registered under (``"gem"``).
    name: ClassVar[str]

    @abc.abstractmethod
    def accepts(self, env_id: str) -> bool:
        """Whether this provider serves ``env_id`` (e.g. ``"game:Sokoban-v0-easy"``); cheap, no I/O."""

    @abc.abstractmethod
    async def make(self, env_id: str, **kwargs: Any) -> Environment:
        """Make the environment ``env_id``, ready for :meth:`Environment.reset`.

        ``kwargs`` are the provider's options as the caller of ``rock.make`` passed them. An
        unknown ``env_id`` raises :class:`~rock_core.errors.InvalidParameter` naming ``env_id``.
        """
