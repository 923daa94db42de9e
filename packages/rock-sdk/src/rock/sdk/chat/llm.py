"""The optional LLM backend: any server that speaks OpenAI's chat-completions protocol
(``POST {base_url}/chat/completions`` with ``tools``), given a ``base_url`` and a ``model``.

It is asked only about prompts the built-in rules do not understand. The chat's actions are
its tools (:meth:`rock.sdk.chat.actions.ActionSpec.tool`); every tool call it makes is checked,
previewed and confirmed exactly as a rule's action is, so the model can do nothing the rules
could not. Never required: without an :class:`LLMConfig` nothing here runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx

from rock_core.errors import InternalServerRockError, InvalidParameter

__all__ = ["LLMBackend", "LLMConfig", "LLMError"]


class LLMError(InternalServerRockError):
    """The LLM backend could not be reached or answered something that is not a chat completion;
    the message names its URL."""


def _url(field: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidParameter(
                f"{field}: expected an http:// or https:// URL, got {value!r}",
                field=field,
                value=value,
            )

    return check


def _positive(field: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InvalidParameter(
                f"{field}: expected a number > 0, got {value!r}", field=field, value=value
            )

    return check


def _non_blank(field: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or not value.strip():
            raise InvalidParameter(
                f"{field}: expected a non-blank string, got {value!r}", field=field, value=value
            )

    return check


@attrs.frozen
class LLMConfig:
    """Where the model is.

    :param base_url: the API's root, the part before ``/chat/completions``
        (``http://127.0.0.1:8000/v1``).
    :param model: the model's name as that server knows it.
    :param api_key: sent as ``Authorization: Bearer ...`` when set (not shown in ``repr``).
    :param timeout: seconds one completion may take.
    :param max_rounds: completions one chat may ask for (each may call tools whose results go
        back to the model); the chat stops there and says so.
    """

    base_url: str = attrs.field(validator=_url("llm.base_url"))
    model: str = attrs.field(validator=_non_blank("llm.model"))
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = attrs.field(default=60.0, validator=_positive("llm.timeout"))
    max_rounds: int = attrs.field(default=6, validator=_positive("llm.max_rounds"))


class LLMBackend:
    """A chat-completions client for one :class:`LLMConfig`.

    :param transport: an httpx transport (tests may pass one; the default is the network).
    """

    def __init__(
        self, config: LLMConfig, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._transport = transport

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """One completion: the assistant's message (``content`` and maybe ``tool_calls``).

        :raises LLMError: the server cannot be reached, answers an HTTP error, or answers
            something without ``choices[0].message``.
        """
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": list(messages),
            "temperature": 0,
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        try:
            async with httpx.AsyncClient(
                timeout=self.config.timeout, transport=self._transport
            ) as client:
                response = await client.post(self.url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise LLMError(
                f"LLM backend at {self.url}: {type(exc).__name__}: {exc}", attempted="chat"
            ) from exc
        if response.status_code != 200:
            raise LLMError(
                f"LLM backend at {self.url} answered HTTP {response.status_code}: {response.text[:500]}",
                attempted="chat",
            )
        try:
            message = response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"LLM backend at {self.url} answered no chat completion (expected choices[0].message): {response.text[:500]}",
                attempted="chat",
            ) from exc
        if not isinstance(message, dict):
            raise LLMError(
                f"LLM backend at {self.url}: choices[0].message is not an object: {message!r}",
                attempted="chat",
            )
        return message


def tool_call_arguments(call: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(id, name, arguments)`` of one ``tool_calls`` entry; the arguments are a JSON object
    given as a string (OpenAI's form) or as an object.

    :raises InvalidParameter: the call is malformed (``tool_calls.function.arguments`` and the value).
    """
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InvalidParameter(
            f"tool_calls.function: expected {{name, arguments}}, got {call!r}",
            field="tool_calls.function",
            value=call,
        )
    raw = function.get("arguments") or "{}"
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise InvalidParameter(
            f"tool_calls.function.arguments: not JSON: {raw!r}",
            field="tool_calls.function.arguments",
            value=raw,
        ) from exc
    if not isinstance(args, dict):
        raise InvalidParameter(
            f"tool_calls.function.arguments: expected a JSON object, got {raw!r}",
            field="tool_calls.function.arguments",
            value=raw,
        )
    return str(call.get("id") or ""), function["name"], args
