"""An action of the chat as data: :class:`ActionSpec` (its name, words, parameters, how it is
previewed and run) and :class:`Param`; :meth:`ActionSpec.check` reads its arguments, naming the
field and the value of a bad one."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rock.sdk.chat.response import ActionObservation
from rock_core.errors import InvalidParameter

if TYPE_CHECKING:
    from rock.sdk.chat.session import ChatContext

__all__ = ["ActionSpec", "Param"]


@attrs.frozen
class Param:
    """One argument of an action: its JSON type (``string``, ``integer``, ``array`` of strings),
    whether it is required, and what it means (the LLM reads this)."""

    name: str
    type: str
    description: str
    required: bool = True


@attrs.frozen
class ActionSpec:
    """An action: its name, what it does (English and Chinese), its arguments, whether it is
    destructive, and how it is previewed and run."""

    name: str
    summary: dict[str, str]
    params: tuple[Param, ...]
    run: Callable[[ChatContext, dict[str, Any]], Awaitable[ActionObservation]]
    render: Callable[[dict[str, Any], ChatContext | None], str]
    destructive: bool | Callable[[dict[str, Any]], bool] = False
    #: When it is offered: ``None`` always, else a test of the context (rock-gem installed).
    available: Callable[[ChatContext | None], bool] | None = None
    #: A rule the parameters' types do not say: ``validate(action name, args)`` raises
    #: :class:`InvalidParameter` naming the field and the value.
    validate: Callable[[str, dict[str, Any]], None] | None = None

    def check(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """``args`` checked against the parameters: missing, unknown or mistyped ones raise
        :class:`InvalidParameter` naming ``<action>.<field>`` and the value."""
        args = dict(args or {})
        known = {p.name for p in self.params}
        for key in args:
            if key not in known:
                raise InvalidParameter(
                    f"{self.name}.{key}: unknown argument (expected {', '.join(sorted(known)) or 'none'})",
                    field=f"{self.name}.{key}",
                    value=args[key],
                )
        out: dict[str, Any] = {}
        for param in self.params:
            field = f"{self.name}.{param.name}"
            value = args.get(param.name)
            if value is None or value == "" or value == []:
                if param.required:
                    raise InvalidParameter(
                        f"{field}: required, got {value!r}", field=field, value=value
                    )
                continue
            out[param.name] = _typed(field, param.type, value)
        if "\x00" in str(out.get("path", "")):
            raise InvalidParameter(
                f"{self.name}.path: a NUL byte in {out['path']!r}",
                field=f"{self.name}.path",
                value=out["path"],
            )
        if self.validate is not None:
            self.validate(self.name, out)
        return out

    def is_destructive(self, args: Mapping[str, Any]) -> bool:
        """Whether these arguments make it destructive (a ``run_command`` of ``rm -rf``)."""
        return self.destructive(dict(args)) if callable(self.destructive) else self.destructive

    def tool(self) -> dict[str, Any]:
        """The action as an OpenAI ``tools`` entry (a function with a JSON schema)."""
        properties: dict[str, Any] = {}
        for p in self.params:
            schema: dict[str, Any] = {"type": p.type, "description": p.description}
            if p.type == "array":
                schema["items"] = {"type": "string"}
            properties[p.name] = schema
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.summary["en"]
                + (" Destructive: needs the user's confirmation." if self.destructive else ""),
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": [p.name for p in self.params if p.required],
                    "additionalProperties": False,
                },
            },
        }


def _typed(field: str, kind: str, value: Any) -> Any:
    if kind == "string":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise InvalidParameter(
                f"{field}: expected a string, got {value!r}", field=field, value=value
            )
        return value
    if kind == "integer":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidParameter(
                f"{field}: expected an integer, got {value!r}", field=field, value=value
            )
        return value
    if kind == "array":
        if isinstance(value, str):
            value = value.replace(",", " ").split()
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise InvalidParameter(
                f"{field}: expected a list of names, got {value!r}", field=field, value=value
            )
        return list(value)
    raise AssertionError(kind)
