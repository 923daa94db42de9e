"""How the chat's GEM env actions run (rock-gem): make, reset, step and close an env, through
``rock.amake`` and the env's own calls; the env this chat made last is the default."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rock.sdk.chat.response import ActionObservation

if TYPE_CHECKING:
    from rock.sdk.chat.session import ChatContext

__all__ = [
    "close_env",
    "env_label",
    "gem_installed",
    "make_env",
    "make_render",
    "reset_env",
    "reset_render",
    "step_env",
    "step_render",
]


def gem_installed(ctx: ChatContext | None = None) -> bool:
    """Whether GEM envs can be made: rock-gem is installed here (embedded), or the sandbox is on
    an admin (which answers for its own plugins)."""
    if ctx is not None and ctx.sandbox.config.base_url:
        return True
    from importlib.util import find_spec

    return find_spec("rock_gem") is not None


def env_label(args: dict[str, Any], ctx: ChatContext | None) -> str:
    handle = args.get("env") or (ctx.state.current if ctx is not None else None)
    return f"env {handle}" if handle else "env"


async def make_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    from rock.sdk.envs import amake

    env = await amake(args["env_id"], base_url=ctx.sandbox.config.base_url, api_key=ctx.api_key())
    ctx.state.add(env)
    observation, info = await env.reset(seed=args.get("seed"))
    return ActionObservation(
        action="make_env",
        ok=True,
        output=_env_text(observation, info),
        data={
            "env": env.sandbox_id,
            "env_id": args["env_id"],
            "observation": observation,
            "info": _plain(info),
        },
    )


async def reset_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    observation, info = await env.reset(seed=args.get("seed"))
    return ActionObservation(
        action="reset_env",
        ok=True,
        output=_env_text(observation, info),
        data={"env": env.sandbox_id, "observation": observation, "info": _plain(info)},
    )


async def step_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    observation, reward, terminated, truncated, info = await env.step(args["action"])
    return ActionObservation(
        action="step_env",
        ok=True,
        output=_env_text(observation, info),
        data={
            "env": env.sandbox_id,
            "observation": observation,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "info": _plain(info),
        },
    )


async def close_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    handle = env.sandbox_id
    await env.aclose()
    ctx.state.discard(handle)
    return ActionObservation(
        action="close_env", ok=True, output=f"env {handle} closed", data={"env": handle}
    )


def _env_text(observation: Any, info: Any) -> str:
    # GEM games put the board they show the player in info["suffix"].
    suffix = info.get("suffix") if isinstance(info, dict) else None
    text = str(observation)
    return (
        f"{text}\n{suffix}"
        if isinstance(suffix, str) and suffix.strip() and suffix not in text
        else text
    )


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def step_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    return f"{env_label(args, ctx)}.step({args['action']!r})"


def reset_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    seed = args.get("seed")
    return f"{env_label(args, ctx)}.reset({'' if seed is None else f'seed={seed}'})"


def make_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    seed = args.get("seed")
    return f"rock.amake({args['env_id']!r}); env.reset({'' if seed is None else f'seed={seed}'})"
