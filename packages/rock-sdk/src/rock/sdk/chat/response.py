"""What a chat answers: :class:`ChatResponse`, the :class:`ChatAction`\\ s it planned and the
:class:`ActionObservation`\\ s of those that ran."""

from __future__ import annotations

from typing import Any, Literal

import attrs

__all__ = ["ActionObservation", "ChatAction", "ChatResponse", "Language"]

#: The languages a chat answers in: the prompt's own (Chinese when it holds Chinese characters).
Language = Literal["en", "zh"]


@attrs.frozen
class ChatAction:
    """One operation the chat planned.

    :param name: the action's name in :data:`rock.sdk.chat.actions.ACTIONS` (also its LLM tool name).
    :param args: its checked arguments.
    :param preview: what it runs, shown before it runs (``python3 -m pip install numpy``).
    :param destructive: it deletes or stops something: it runs only with ``confirm=True``.
    """

    name: str
    args: dict[str, Any]
    preview: str
    destructive: bool = False


@attrs.frozen
class ActionObservation:
    """What one action did.

    :param action: the action's name.
    :param ok: it succeeded (a command's exit code 0, a call that did not raise).
    :param output: its text: a command's output, a file's content, a listing, an error message.
    :param exit_code: a command's exit code, else ``None``.
    :param data: the figures behind ``output`` when there are any (statistics, a status, an env's
        observation and reward), as plain JSON values.
    """

    action: str
    ok: bool
    output: str = ""
    exit_code: int | None = None
    data: dict[str, Any] | None = None


@attrs.frozen
class ChatResponse:
    """The answer of ``await sandbox.chat(prompt)``.

    :param reply: the answer in plain language (the prompt's language), starting with what it
        runs; the text a person reads.
    :param actions: every action planned, in order (also those that did not run).
    :param observations: one per action that ran, in the same order; fewer than ``actions`` when
        a destructive action waits for ``confirm=True``, on ``dry_run``, or after a failure.
    :param language: ``"en"`` or ``"zh"``.
    :param needs_confirmation: nothing ran because an action is destructive and ``confirm`` was
        not given.
    :param backend: who understood the prompt: ``"rules"`` (the built-in interpreter, also
        for "help"), ``"llm"`` (the configured model), or ``None`` (nothing could be done: not
        understood, a part missing, an argument refused; the reply says why and what the chat
        can do).
    """

    reply: str
    actions: list[ChatAction] = attrs.field(factory=list)
    observations: list[ActionObservation] = attrs.field(factory=list)
    language: Language = "en"
    needs_confirmation: bool = False
    backend: Literal["rules", "llm"] | None = None

    @property
    def ok(self) -> bool:
        """Every planned action ran and succeeded (``False`` when nothing was planned)."""
        return (
            bool(self.actions)
            and len(self.observations) == len(self.actions)
            and all(o.ok for o in self.observations)
        )
