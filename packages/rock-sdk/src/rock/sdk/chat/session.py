"""``await chat(sandbox, prompt)``: understand the prompt, show the plan, run it, answer.

``Sandbox.chat`` calls :func:`chat`. The rules (:mod:`rock.sdk.chat.rules`) read the prompt
first; only a prompt they do not understand goes to the LLM backend, and only when one is
configured (:class:`ChatConfig` ``llm``). Either way the actions are
:data:`rock.sdk.chat.actions.ACTIONS`, checked and previewed before anything runs.

What a chat remembers between prompts, per :class:`~rock.sdk.sandbox.client.Sandbox` handle:
the GEM envs it made (so "step up" steps the env made last). Nothing else: each prompt stands
alone.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from rock.sdk.chat.actions import ACTIONS, available_actions, describe_error, plan
from rock.sdk.chat.llm import LLMBackend, LLMConfig, tool_call_arguments
from rock.sdk.chat.messages import EXAMPLES, MISSING, WHAT, say
from rock.sdk.chat.response import ActionObservation, ChatAction, ChatResponse, Language
from rock.sdk.chat.rules import detect_language, interpret
from rock_core.envs import EnvFailed
from rock_core.errors import InvalidParameter, RockError

__all__ = ["ChatConfig", "ChatContext", "ChatState", "chat", "close_envs"]

#: Environment variables :meth:`ChatConfig.from_env` reads.
ENVIRONMENT = {
    "pip_mirror": "ROCK_CHAT_PIP_MIRROR",
    "apt_mirror": "ROCK_CHAT_APT_MIRROR",
    "llm_base_url": "ROCK_CHAT_LLM_BASE_URL",
    "llm_model": "ROCK_CHAT_LLM_MODEL",
    "llm_api_key": "ROCK_CHAT_LLM_API_KEY",
}


def _mirror(field: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidParameter(
                f"{field}: expected an http:// or https:// URL, got {value!r}",
                field=field,
                value=value,
            )

    return check


def _seconds(field: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InvalidParameter(
                f"{field}: expected a number of seconds > 0, got {value!r}",
                field=field,
                value=value,
            )

    return check


@attrs.frozen
class ChatConfig:
    """How a chat runs.

    :param llm: the optional model for prompts the rules do not understand (``None``: rules only).
    :param pip_mirror: a PyPI mirror's base URL; when set, a Python install first points the
        sandbox's pip and uv at it (``sandbox.network.speedup(SpeedupType.PIP, ...)``, rock-speedup).
    :param apt_mirror: a Debian mirror's base URL, used the same way for apt installs.
    :param command_timeout: seconds a command may run.
    :param install_timeout: seconds an install may run.
    """

    llm: LLMConfig | None = None
    pip_mirror: str | None = attrs.field(default=None, validator=_mirror("pip_mirror"))
    apt_mirror: str | None = attrs.field(default=None, validator=_mirror("apt_mirror"))
    command_timeout: float = attrs.field(default=300.0, validator=_seconds("command_timeout"))
    install_timeout: float = attrs.field(default=900.0, validator=_seconds("install_timeout"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ChatConfig:
        """The settings of :data:`ENVIRONMENT`: ``ROCK_CHAT_PIP_MIRROR``, ``ROCK_CHAT_APT_MIRROR``,
        and the model when both ``ROCK_CHAT_LLM_BASE_URL`` and ``ROCK_CHAT_LLM_MODEL`` are set
        (``ROCK_CHAT_LLM_API_KEY`` optional). Unset variables leave the defaults: no model.

        :raises InvalidParameter: a variable's value is bad (the field and the value named).
        """
        env = os.environ if environ is None else environ
        get = {key: env.get(name) or None for key, name in ENVIRONMENT.items()}
        llm = None
        if get["llm_base_url"] or get["llm_model"]:
            if not (get["llm_base_url"] and get["llm_model"]):
                missing = (
                    ENVIRONMENT["llm_model"] if get["llm_base_url"] else ENVIRONMENT["llm_base_url"]
                )
                raise InvalidParameter(
                    f"{missing}: required with the other ROCK_CHAT_LLM_* settings, got None",
                    field=missing,
                    value=None,
                )
            llm = LLMConfig(
                base_url=get["llm_base_url"], model=get["llm_model"], api_key=get["llm_api_key"]
            )
        return cls(llm=llm, pip_mirror=get["pip_mirror"], apt_mirror=get["apt_mirror"])


class ChatState:
    """What a chat keeps between prompts of one sandbox handle: the GEM envs it made, by handle,
    and the one made last (the default of reset, step and close)."""

    def __init__(self) -> None:
        self.envs: dict[str, Any] = {}
        self.current: str | None = None

    def add(self, env: Any) -> None:
        """Keep ``env`` (an :class:`~rock.sdk.envs.AsyncRockEnv`) and make it the current one."""
        self.envs[env.sandbox_id] = env
        self.current = env.sandbox_id

    def discard(self, handle: str | None) -> None:
        """Forget the env ``handle`` (closed)."""
        self.envs.pop(handle or "", None)
        if self.current == handle:
            self.current = next(reversed(self.envs), None) if self.envs else None

    def get(self, ctx: ChatContext, handle: str | None) -> Any:
        """The env ``handle`` (default: the current one). An env this chat did not make is
        reached by its handle through the sandbox's engine (an admin keeps envs between
        processes, so ``rock sandbox chat`` can step an env an earlier call made).

        :raises EnvFailed: ``no_env``: no handle given and no env made yet.
        """
        handle = handle or self.current
        if handle is None:
            raise EnvFailed(
                'no env yet: start one first ("start a Sokoban environment")', kind="no_env"
            )
        env = self.envs.get(handle)
        if env is None:
            from rock.sdk.envs._backend import backend_for
            from rock.sdk.envs.rock_env import AsyncRockEnv

            env = AsyncRockEnv(
                handle, backend_for(ctx.sandbox.config.base_url, ctx.api_key()), handle
            )
            self.add(env)
        return env


_STATES: weakref.WeakKeyDictionary[Any, ChatState] = weakref.WeakKeyDictionary()


async def close_envs(sandbox: Any) -> None:
    """Close every GEM env the chats of ``sandbox`` (a handle) made and still hold."""
    state = _STATES.get(sandbox)
    while state is not None and state.envs:
        handle, env = next(iter(state.envs.items()))
        try:
            await env.aclose()
        finally:
            state.discard(handle)


@attrs.define
class ChatContext:
    """One chat's sandbox, settings, remembered state and language (what actions run with)."""

    sandbox: Any
    config: ChatConfig
    state: ChatState
    language: Language

    def api_key(self) -> str | None:
        """The admin's API key this sandbox sends, for the env calls (``None``: ``$ROCK_API_KEY``)."""
        headers = getattr(self.sandbox.config, "extra_headers", None) or {}
        return headers.get("X-API-Key")


async def chat(
    sandbox: Any,
    prompt: str,
    *,
    confirm: bool = False,
    dry_run: bool = False,
    config: ChatConfig | None = None,
    on_action: Callable[[ChatAction], Any] | None = None,
) -> ChatResponse:
    """Carry out ``prompt`` in ``sandbox`` and answer in the prompt's language.

    :param sandbox: a started (or attached) :class:`~rock.sdk.sandbox.client.Sandbox`.
    :param prompt: the instruction, in English or Chinese.
    :param confirm: allow destructive actions (delete, stop, ``rm -rf``); without it they are
        shown and not run (``needs_confirmation``).
    :param dry_run: plan and show, run nothing.
    :param config: the settings (default: :meth:`ChatConfig.from_env`).
    :param on_action: called with each :class:`ChatAction` just before it runs (the CLI prints it).
    :raises InvalidParameter: ``prompt`` is not a non-blank string.
    :raises LLMError: the configured model could not be asked (only for prompts the rules do
        not understand).
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidParameter(
            f"prompt: expected a non-blank string, got {prompt!r}", field="prompt", value=prompt
        )
    config = ChatConfig.from_env() if config is None else config
    language = detect_language(prompt)
    state = _STATES.get(sandbox)
    if state is None:
        state = _STATES[sandbox] = ChatState()
    ctx = ChatContext(sandbox=sandbox, config=config, state=state, language=language)
    reading = interpret(prompt)
    if reading.kind == "help":
        return ChatResponse(reply=_capabilities(ctx, "help"), language=language, backend="rules")
    if reading.kind == "incomplete":
        assert reading.action is not None and reading.missing is not None
        reply = say(
            "incomplete",
            language,
            what=WHAT[reading.action][language],
            missing=MISSING[reading.missing][language],
            example=EXAMPLES[reading.action][language],
        )
        return ChatResponse(reply=reply, language=language)
    if reading.kind == "action":
        assert reading.action is not None
        spec = ACTIONS[reading.action]
        if spec.available is not None and not spec.available(ctx):
            return ChatResponse(reply=say("unavailable", language), language=language)
        try:
            action = plan(reading.action, reading.args, ctx)
        except InvalidParameter as exc:
            return ChatResponse(reply=say("invalid", language, error=exc), language=language)
        return await _carry_out(
            ctx, [action], confirm=confirm, dry_run=dry_run, on_action=on_action
        )
    if config.llm is not None:
        return await _ask_model(
            ctx,
            prompt,
            LLMBackend(config.llm),
            confirm=confirm,
            dry_run=dry_run,
            on_action=on_action,
        )
    return ChatResponse(reply=_capabilities(ctx, "unknown"), language=language)


def _capabilities(ctx: ChatContext, intro: str) -> str:
    lang = ctx.language
    lines = [say(intro, lang)]
    for spec in available_actions(ctx):
        note = say("needs_confirm", lang) if spec.destructive else ""
        lines.append(
            f"- {spec.summary[lang]}{note} {say('example', lang, example=EXAMPLES[spec.name][lang])}"
        )
    return "\n".join(lines)


async def _run_one(ctx: ChatContext, action: ChatAction) -> ActionObservation:
    try:
        return await ACTIONS[action.name].run(ctx, action.args)
    except (RockError, EnvFailed) as exc:
        return ActionObservation(action=action.name, ok=False, output=describe_error(exc))


def _blocked(
    ctx: ChatContext, actions: list[ChatAction], *, confirm: bool, dry_run: bool
) -> str | None:
    """The reply when these actions must not run (dry run, or destructive without confirm)."""
    lang = ctx.language
    if dry_run:
        return say("dry_run", lang)
    destructive = [a.preview for a in actions if a.destructive]
    if destructive and not confirm:
        return say("confirm", lang, previews="; ".join(destructive))
    return None


async def _carry_out(
    ctx: ChatContext,
    actions: list[ChatAction],
    *,
    confirm: bool,
    dry_run: bool,
    on_action: Callable[[ChatAction], Any] | None,
) -> ChatResponse:
    lang = ctx.language
    lines = [say("will_run", lang, preview=a.preview) for a in actions]
    blocked = _blocked(ctx, actions, confirm=confirm, dry_run=dry_run)
    if blocked is not None:
        return ChatResponse(
            reply="\n".join([*lines, blocked]),
            actions=actions,
            language=lang,
            needs_confirmation=not dry_run,
            backend="rules",
        )
    observations = []
    for index, action in enumerate(actions):
        if on_action is not None:
            on_action(action)
        observation = await _run_one(ctx, action)
        observations.append(observation)
        lines.append(_describe(ctx, action, observation))
        if not observation.ok and index + 1 < len(actions):
            lines.append(
                say("not_run", lang, previews="; ".join(a.preview for a in actions[index + 1 :]))
            )
            break
    return ChatResponse(
        reply="\n".join(lines),
        actions=actions,
        observations=observations,
        language=lang,
        backend="rules",
    )


def _describe(ctx: ChatContext, action: ChatAction, obs: ActionObservation) -> str:
    """One action's outcome in the chat's words, its output below."""
    lang = ctx.language
    if not obs.ok:
        code = say("exit_code", lang, code=obs.exit_code) if obs.exit_code is not None else ""
        head = say("failed", lang, action=action.preview, code=code)
        return f"{head}\n{_block(obs.output)}" if obs.output else head
    data = obs.data or {}
    args = action.args
    values: dict[str, Any] = {
        "sandbox": ctx.sandbox.sandbox_id,
        "path": args.get("path"),
        "code": obs.exit_code,
    }
    key = action.name
    if key.startswith("install_"):
        mirror = data.get("mirror")
        values.update(
            packages=", ".join(args["packages"]),
            via=say("via", lang, mirror=mirror) if mirror else "",
        )
    elif key == "write_file":
        values["size"] = len(args["content"].encode())
    elif key == "show_logs" and args.get("path"):
        key = "show_logs_file"
    elif key in ("make_env", "reset_env", "step_env", "close_env"):
        values.update(
            {k: data.get(k) for k in ("env", "env_id", "reward", "terminated", "truncated")}
        )
    head = say(key, lang, **values)
    quiet = key in ("write_file", "delete_file", "stop_sandbox", "close_env")
    return head if quiet or not obs.output.strip() else f"{head}\n{_block(obs.output)}"


def _block(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip("\n").splitlines())


# -- the model --------------------------------------------------------------------------------------------


def _system_prompt(ctx: ChatContext) -> str:
    language = "Chinese (简体中文)" if ctx.language == "zh" else "English"
    return (
        "You operate one Linux sandbox (a container) for the user, only through the tools given. "
        "Call tools to do what the user asks; their results come back to you. Then answer briefly "
        f"in {language}, saying what you ran and what came of it. If the request cannot be done "
        "with these tools, call none and say what you can do instead. Destructive tools (deleting, "
        "stopping, rm) run only if the user confirmed; you may still call them."
    )


async def _ask_model(
    ctx: ChatContext,
    prompt: str,
    backend: LLMBackend,
    *,
    confirm: bool,
    dry_run: bool,
    on_action: Callable[[ChatAction], Any] | None,
) -> ChatResponse:
    lang = ctx.language
    tools = [spec.tool() for spec in available_actions(ctx)]
    offered = {t["function"]["name"] for t in tools}
    history: list[dict[str, Any]] = [
        {"role": "system", "content": _system_prompt(ctx)},
        {"role": "user", "content": prompt},
    ]
    actions: list[ChatAction] = []
    observations: list[ActionObservation] = []
    lines: list[str] = []
    assert ctx.config.llm is not None
    for _ in range(ctx.config.llm.max_rounds):
        message = await backend.complete(history, tools)
        calls = message.get("tool_calls") or []
        if not calls:
            text = str(message.get("content") or "").strip()
            reply = (
                "\n".join([*lines, text])
                if text
                else "\n".join(lines) or _capabilities(ctx, "unknown")
            )
            return ChatResponse(
                reply=reply,
                actions=actions,
                observations=observations,
                language=lang,
                backend="llm" if actions or text else None,
            )
        history.append(
            {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
        )
        planned: list[tuple[str, ChatAction | None, str | None]] = []
        for call in calls:
            call_id = str(call.get("id") or "") if isinstance(call, dict) else ""
            try:
                call_id, name, args = tool_call_arguments(call)
                if name not in offered:
                    raise InvalidParameter(
                        f"action: unknown action {name!r} (known: {', '.join(sorted(offered))})",
                        field="action",
                        value=name,
                    )
                planned.append((call_id, plan(name, args, ctx), None))
            except InvalidParameter as exc:
                planned.append((call_id, None, str(exc)))
        ready = [a for _, a, _ in planned if a is not None]
        lines += [say("will_run", lang, preview=a.preview) for a in ready]
        blocked = _blocked(ctx, ready, confirm=confirm, dry_run=dry_run)
        if blocked is not None:
            return ChatResponse(
                reply="\n".join([*lines, blocked]),
                actions=[*actions, *ready],
                observations=observations,
                language=lang,
                needs_confirmation=not dry_run,
                backend="llm",
            )
        for call_id, action, error in planned:
            if action is None:
                lines.append(say("llm_rejected", lang, error=error))
                result: dict[str, Any] = {"ok": False, "error": error}
            else:
                if on_action is not None:
                    on_action(action)
                observation = await _run_one(ctx, action)
                actions.append(action)
                observations.append(observation)
                lines.append(_describe(ctx, action, observation))
                result = {
                    "ok": observation.ok,
                    "exit_code": observation.exit_code,
                    "output": observation.output,
                }
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": json.dumps(result, ensure_ascii=False, default=str),
                }
            )
    lines.append(say("rounds", lang, rounds=ctx.config.llm.max_rounds))
    return ChatResponse(
        reply="\n".join(lines),
        actions=actions,
        observations=observations,
        language=lang,
        backend="llm",
    )
