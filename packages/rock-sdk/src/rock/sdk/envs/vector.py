"""Many envs stepped together: :class:`VecEnv` (synchronous) and :class:`AsyncVecEnv`.

``rock.make_vec(env_id, num_envs, seed=...)`` / ``await rock.amake_vec(...)``. Each call is one
batch: through rock's admin one HTTP request, embedded one rocklet request per sandbox.

Autoreset is DISABLED (Gymnasium's term): an env whose episode ended stays ended until the
caller resets it (``reset(indices=[i])``); stepping it first fails with kind
``episode_ended``. Partial steps: ``step({i: action, ...})`` steps only those envs.

Results are lists aligned with the envs acted on: all of them in order, or the given indices
in the order given. A failure of any env raises :class:`VecEnvError` after the whole batch ran;
it carries each env's result or error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from rock.sdk.envs._backend import Backend, Call, backend_for
from rock_core.envs import EnvFailed
from rock_core.errors import InvalidParameter

__all__ = ["AsyncVecEnv", "VecEnv", "VecEnvError", "amake_vec", "make_vec"]


class VecEnvError(EnvFailed):
    """Some envs of a batch failed.

    :attr errors: ``{index: EnvFailed}`` of the envs that failed.
    :attr results: ``{index: answer}`` of those that did not (ROCK's JSON shape).
    """

    def __init__(self, errors: dict[int, BaseException], results: dict[int, Any]) -> None:
        first_index, first = next(iter(errors.items()))
        kind = getattr(first, "kind", "env_error")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"env {first_index}: {first}{more}", kind=kind)
        self.errors = errors
        self.results = results


def _seeds(seed: int | Sequence[int] | None, indices: list[int]) -> list[int | None]:
    if seed is None:
        return [None] * len(indices)
    if isinstance(seed, int) and not isinstance(seed, bool):
        return [seed + i for i in indices]  # GEM's and Gymnasium's rule: env i gets seed + i
    # A bool is not a seed: list() refuses it here (a TypeError, as it always did).
    seeds: list[int | None] = list(cast("Sequence[int]", seed))
    if len(seeds) != len(indices):
        raise InvalidParameter(
            f"seed: expected {len(indices)} seeds, got {len(seeds)}", field="seed", value=seed
        )
    return seeds


class _VecBase:
    metadata = {"autoreset_mode": "disabled"}

    def __init__(
        self,
        env_id: str,
        backend: Backend,
        handles: list[str],
        seed: int | Sequence[int] | None = None,
    ) -> None:
        self._first_seed = seed
        self.env_id = env_id
        self.num_envs = len(handles)
        self.handles = handles
        self._backend = backend
        self.closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.env_id} x{self.num_envs}{' closed' if self.closed else ''}>"

    def _indices(self, indices: Sequence[int] | None) -> list[int]:
        if self.closed:
            raise EnvFailed(
                f"the vector env of {self.env_id} is closed", kind="no_env", env_id=self.env_id
            )
        chosen = list(range(self.num_envs)) if indices is None else [int(i) for i in indices]
        for i in chosen:
            if not 0 <= i < self.num_envs:
                raise InvalidParameter(
                    f"indices: {i} is not an env index (0 to {self.num_envs - 1})",
                    field="indices",
                    value=i,
                )
        return chosen

    def _reset_calls(
        self, seed: Any, indices: Sequence[int] | None
    ) -> tuple[list[int], list[Call]]:
        chosen = self._indices(indices)
        if seed is None and self._first_seed is not None and indices is None:
            seed = self._first_seed  # make_vec(seed=...) seeds the first reset of all envs
        self._first_seed = None
        seeds = _seeds(seed, chosen)
        return chosen, [("reset", self.handles[i], {"seed": s}) for i, s in zip(chosen, seeds)]

    def _step_calls(
        self, actions: Sequence[str] | Mapping[int, str]
    ) -> tuple[list[int], list[Call]]:
        if isinstance(actions, Mapping):
            chosen = self._indices(list(actions))
            acts = [actions[i] for i in chosen]
        else:
            acts = list(actions)
            if len(acts) != self.num_envs:
                raise InvalidParameter(
                    f"actions: expected {self.num_envs} actions (or a dict of some), got {len(acts)}",
                    field="actions",
                )
            chosen = self._indices(None)
        return chosen, [("step", self.handles[i], {"action": a}) for i, a in zip(chosen, acts)]

    @staticmethod
    def _check(chosen: list[int], results: list[Any]) -> list[Any]:
        errors = {i: r for i, r in zip(chosen, results) if isinstance(r, BaseException)}
        if errors:
            raise VecEnvError(
                errors, {i: r for i, r in zip(chosen, results) if not isinstance(r, BaseException)}
            )
        return results

    @staticmethod
    def _resets(results: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
        return [r["observation"] for r in results], [r["info"] for r in results]

    @staticmethod
    def _steps(
        results: list[Any],
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        return (
            [r["observation"] for r in results],
            [r["reward"] for r in results],
            [r["terminated"] for r in results],
            [r["truncated"] for r in results],
            [r["info"] for r in results],
        )


class VecEnv(_VecBase):
    """``num_envs`` envs of one id, reset and stepped as batches (synchronous)."""

    def reset(
        self, seed: int | Sequence[int] | None = None, indices: Sequence[int] | None = None
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Reset the envs at ``indices`` (default all): ``(observations, infos)``.

        ``seed``: an int gives env ``i`` the seed ``seed + i``; a list gives one per env reset.
        """
        chosen, calls = self._reset_calls(seed, indices)
        return self._resets(self._check(chosen, self._backend.batch(calls)))

    def step(
        self, actions: Sequence[str] | Mapping[int, str]
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """Step every env (a list of ``num_envs`` actions) or some (``{index: action}``):
        ``(observations, rewards, terminations, truncations, infos)``."""
        chosen, calls = self._step_calls(actions)
        return self._steps(self._check(chosen, self._backend.batch(calls)))

    def close(self) -> None:
        """Close every env (their sandboxes stop with their last env). Idempotent."""
        if not self.closed:
            self.closed = True
            self._backend.batch([("close", h, {}) for h in self.handles])

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncVecEnv(_VecBase):
    """The async twin of :class:`VecEnv`."""

    async def reset(
        self, seed: int | Sequence[int] | None = None, indices: Sequence[int] | None = None
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """See :meth:`VecEnv.reset`."""
        chosen, calls = self._reset_calls(seed, indices)
        return self._resets(self._check(chosen, await self._backend.abatch(calls)))

    async def step(
        self, actions: Sequence[str] | Mapping[int, str]
    ) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict[str, Any]]]:
        """See :meth:`VecEnv.step`."""
        chosen, calls = self._step_calls(actions)
        return self._steps(self._check(chosen, await self._backend.abatch(calls)))

    async def aclose(self) -> None:
        """Close every env. Idempotent."""
        if not self.closed:
            self.closed = True
            await self._backend.abatch([("close", h, {}) for h in self.handles])

    close = aclose

    async def __aenter__(self) -> AsyncVecEnv:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


def _make_calls(
    env_id: str, num_envs: int, image: str | None, kwargs: dict[str, Any]
) -> list[Call]:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise InvalidParameter(
            f"num_envs: expected a positive integer, got {num_envs!r}",
            field="num_envs",
            value=num_envs,
        )
    args: dict[str, Any] = {"env_id": env_id}
    if kwargs:
        args["kwargs"] = kwargs
    if image:
        args["image"] = image
    return [("make", None, args)] * num_envs


def _handles(results: list[Any], backend: Backend, sync: bool) -> list[str]:
    errors = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
    if errors:
        made: list[Call] = [
            ("close", r["sandbox_id"], {}) for r in results if not isinstance(r, BaseException)
        ]
        if made and sync:
            backend.batch(made)
        raise VecEnvError(
            errors, {i: r for i, r in enumerate(results) if not isinstance(r, BaseException)}
        )
    return [r["sandbox_id"] for r in results]


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    seed: int | Sequence[int] | None = None,
    base_url: str | None = None,
    image: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> VecEnv:
    """``num_envs`` envs of ``env_id`` made in one batch. ``seed`` is the seed of the first
    :meth:`~VecEnv.reset` of all envs when that reset gives none (env ``i`` gets ``seed + i``).
    See :class:`VecEnv`."""
    backend = backend_for(base_url, api_key)
    return VecEnv(
        env_id,
        backend,
        _handles(backend.batch(_make_calls(env_id, num_envs, image, kwargs)), backend, True),
        seed,
    )


async def amake_vec(
    env_id: str,
    num_envs: int,
    *,
    seed: int | Sequence[int] | None = None,
    base_url: str | None = None,
    image: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> AsyncVecEnv:
    """The async twin of :func:`make_vec`."""
    backend = backend_for(base_url, api_key)
    results = await backend.abatch(_make_calls(env_id, num_envs, image, kwargs))
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await backend.abatch(
            [("close", r["sandbox_id"], {}) for r in results if not isinstance(r, BaseException)]
        )
    return AsyncVecEnv(env_id, backend, _handles(results, backend, False), seed)
