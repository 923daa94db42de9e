"""The contract an environment provider implements: :class:`EnvProvider` and :class:`Environment`.

``rock.make(env_id)`` asks the registered providers which one serves ``env_id`` and has it make an
:class:`Environment`, usually backed by a sandbox (GEM environments run inside the sandbox's
rocklet). Plugins register provider classes with the ``rock_register_env_providers`` hook.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

from rock_core.errors import InternalServerRockError

__all__ = ["EnvFailed", "EnvProvider", "Environment", "ENV_FAILURE_KINDS"]

#: What :attr:`EnvFailed.kind` may be, and what each means.
ENV_FAILURE_KINDS = {
    "unknown_env": "the env id is not registered (the message lists close matches)",
    "missing_dependency": "a Python package the env needs is not installed where it runs",
    "missing_data": "data the env needs is not available offline (a corpus, a dataset)",
    "episode_ended": "a step after the episode ended (terminated or truncated): reset first",
    "env_died": "the env's process exited; make the env again",
    "timeout": "the env did not answer in time and was ended",
    "no_env": "no such env (closed, or its process died)",
    "bad_request": "the call itself is malformed",
    "env_error": "the env raised an error of its own",
    "runtime": "the env's worker could not be started",
}


class EnvFailed(InternalServerRockError):
    """An environment failed to make, reset or step.

    :param kind: one of :data:`ENV_FAILURE_KINDS`.
    :param env_id: the env's id, when known.
    :param traceback: the env's own traceback lines (``env_error``), else empty.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "env_error",
        env_id: str | None = None,
        traceback: Sequence[str] = (),
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.kind = kind
        self.env_id = env_id
        self.traceback = list(traceback)


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
