"""Environments in sandboxes, as ROCK's ``rock.sdk.envs``: ``make`` (synchronous, ROCK's API),
``amake`` (its async twin), ``make_vec`` / ``amake_vec`` (many envs in batches).

The env ids are GEM's (``game:Sokoban-v0-easy``); the ``gem`` provider of rock-gem serves them.
Envs run through this process's embedded engine by default, or through rock's admin when
``base_url`` or ``ROCK_BASE_URL`` names one. Failures are :class:`EnvFailed` with a ``kind``
(:data:`rock_core.envs.ENV_FAILURE_KINDS`).
"""

from __future__ import annotations

from rock.sdk.envs.rock_env import AsyncRockEnv, RockEnv, amake, make
from rock.sdk.envs.vector import AsyncVecEnv, VecEnv, VecEnvError, amake_vec, make_vec
from rock_core.envs import ENV_FAILURE_KINDS, EnvFailed

__all__ = [
    "ENV_FAILURE_KINDS",
    "AsyncRockEnv",
    "AsyncVecEnv",
    "EnvFailed",
    "RockEnv",
    "VecEnv",
    "VecEnvError",
    "amake",
    "amake_vec",
    "make",
    "make_vec",
]
