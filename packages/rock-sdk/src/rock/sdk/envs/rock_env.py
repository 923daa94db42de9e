"""ROCK's ``RockEnv`` (synchronous) and its async twin, :class:`AsyncRockEnv`.

``rock.make(env_id)`` → :class:`RockEnv`; ``await rock.amake(env_id)`` → :class:`AsyncRockEnv`.
Both run the env in a sandbox: through this process's embedded engine by default, through rock's
admin when ``base_url`` or ``ROCK_BASE_URL`` names one.
"""

from __future__ import annotations

from typing import Any

from rock.sdk.envs._backend import Backend, backend_for
from rock_core.envs import EnvFailed

__all__ = ["AsyncRockEnv", "RockEnv", "amake", "make"]


def _make_args(env_id: str, image: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(env_id, str) or not env_id.strip():
        from rock_core.errors import InvalidParameter

        raise InvalidParameter(
            f"env_id: expected a non-blank string, got {env_id!r}", field="env_id", value=env_id
        )
    args: dict[str, Any] = {"env_id": env_id}
    if kwargs:
        args["kwargs"] = kwargs
    if image:
        args["image"] = image
    return args


class _EnvBase:
    env_id: str
    sandbox_id: str | None
    _backend: Backend

    def __repr__(self) -> str:
        state = "closed" if self.sandbox_id is None else self.sandbox_id
        return f"<{type(self).__name__} {self.env_id} {state}>"

    def _handle(self) -> str:
        if self.sandbox_id is None:
            raise EnvFailed(f"env {self.env_id} is closed", kind="no_env", env_id=self.env_id)
        return self.sandbox_id


class RockEnv(_EnvBase):
    """A GEM env in a sandbox, driven synchronously (ROCK's ``rock.sdk.envs.RockEnv``).

    :param env_id: a GEM id (``"game:Sokoban-v0-easy"``).
    :param base_url: rock's admin (default ``$ROCK_BASE_URL``; unset: the embedded engine).
    :param image: the sandbox's image (default: the ``gem`` provider's, see rock-gem).
    :param api_key: for an admin with keys (default ``$ROCK_API_KEY``).
    :param kwargs: GEM's constructor arguments (``max_turns=5``); ROCK's ``make`` takes none.
        GEM's Sokoban generates no room at make: its first :meth:`reset` does, or a :meth:`step`
        before any reset (with ``seed=S`` given here: the room ``reset(seed=S)`` gives).

    :raises EnvFailed: the id is unknown (the message lists close matches), a package or
        offline data it needs is missing (``kind`` says which).
    """

    def __init__(
        self,
        env_id: str,
        *,
        base_url: str | None = None,
        image: str | None = None,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.env_id = env_id
        self.sandbox_id: str | None = None
        self._backend = backend_for(base_url, api_key)
        self.sandbox_id = self._backend.call("make", None, _make_args(env_id, image, kwargs))[
            "sandbox_id"
        ]

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode: ``(observation, info)``. The same ``seed`` gives the same episode."""
        answer = self._backend.call("reset", self._handle(), {"seed": seed})
        return answer["observation"], answer["info"]

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply ``action``: ``(observation, reward, terminated, truncated, info)``.

        After the episode ended (``terminated or truncated``) a step raises :class:`EnvFailed`
        with ``kind == "episode_ended"`` until :meth:`reset`.
        """
        a = self._backend.call("step", self._handle(), {"action": action})
        return a["observation"], a["reward"], a["terminated"], a["truncated"], a["info"]

    def close(self) -> None:
        """End the env's process (and its sandbox when no other env is in it). Idempotent."""
        handle, self.sandbox_id = self.sandbox_id, None
        if handle is not None:
            self._backend.call("close", handle, {})

    def __enter__(self) -> RockEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncRockEnv(_EnvBase):
    """The async twin of :class:`RockEnv`; made by ``await rock.amake(env_id)``.

    An async context manager; :meth:`aclose` is idempotent.
    """

    def __init__(self, env_id: str, backend: Backend, sandbox_id: str) -> None:
        self.env_id = env_id
        self._backend = backend
        self.sandbox_id: str | None = sandbox_id

    async def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode: ``(observation, info)``."""
        answer = await self._backend.acall("reset", self._handle(), {"seed": seed})
        return answer["observation"], answer["info"]

    async def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply ``action``: ``(observation, reward, terminated, truncated, info)`` (see :meth:`RockEnv.step`)."""
        a = await self._backend.acall("step", self._handle(), {"action": action})
        return a["observation"], a["reward"], a["terminated"], a["truncated"], a["info"]

    async def aclose(self) -> None:
        """End the env's process (and its sandbox when no other env is in it). Idempotent."""
        handle, self.sandbox_id = self.sandbox_id, None
        if handle is not None:
            await self._backend.acall("close", handle, {})

    close = aclose

    async def __aenter__(self) -> AsyncRockEnv:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


def make(
    env_id: str,
    *,
    base_url: str | None = None,
    image: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> RockEnv:
    """ROCK's ``rock.make``: a synchronous GEM env in a sandbox (see :class:`RockEnv`)."""
    return RockEnv(env_id, base_url=base_url, image=image, api_key=api_key, **kwargs)


async def amake(
    env_id: str,
    *,
    base_url: str | None = None,
    image: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> AsyncRockEnv:
    """``await rock.amake(env_id)``: the async twin of :func:`make` (see :class:`AsyncRockEnv`)."""
    backend = backend_for(base_url, api_key)
    answer = await backend.acall("make", None, _make_args(env_id, image, kwargs))
    return AsyncRockEnv(env_id, backend, answer["sandbox_id"])
