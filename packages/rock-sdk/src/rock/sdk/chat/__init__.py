"""The Chat protocol: ``await sandbox.chat("install numpy")`` turns an instruction in plain
language (English or Chinese) into the sandbox's own operations and answers in plain language.

- :mod:`~rock.sdk.chat.rules`: the built-in interpreter, offline and deterministic;
- :mod:`~rock.sdk.chat.actions`: the action set both interpreters use (:data:`ACTIONS`);
- :mod:`~rock.sdk.chat.llm`: the optional backend for free-form prompts, any OpenAI-compatible
  chat-completions server, with the actions as tools;
- :mod:`~rock.sdk.chat.session`: :func:`chat` itself and :class:`ChatConfig`;
- :mod:`~rock.sdk.chat.response`: :class:`ChatResponse` and its parts.

Each action is shown (``ChatAction.preview``) before it runs; a destructive one (delete, stop,
``rm -rf``) runs only with ``confirm=True``. A prompt neither interpreter understands gets a
reply listing what the chat can do, and nothing runs.
"""

from __future__ import annotations

from rock.sdk.chat.actions import ACTIONS, ActionSpec, is_destructive_command
from rock.sdk.chat.llm import LLMConfig, LLMError
from rock.sdk.chat.response import ActionObservation, ChatAction, ChatResponse
from rock.sdk.chat.rules import Interpretation, detect_language, interpret
from rock.sdk.chat.session import ChatConfig, chat, close_envs

__all__ = [
    "ACTIONS",
    "ActionObservation",
    "ActionSpec",
    "ChatAction",
    "ChatConfig",
    "ChatResponse",
    "Interpretation",
    "LLMConfig",
    "LLMError",
    "chat",
    "close_envs",
    "detect_language",
    "interpret",
    "is_destructive_command",
]
