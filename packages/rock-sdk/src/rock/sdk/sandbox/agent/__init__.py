"""ROCK's ``rock.sdk.sandbox.agent``: :class:`RockAgent` (``sandbox.agent``) and its config
:class:`RockAgentConfig`; rock's :class:`AgentInstallError` and :class:`AgentRunResult`."""

from rock.sdk.sandbox.agent.config import (
    AgentBashCommand,
    AgentConfig,
    RockAgentConfig,
    RuntimeEnvConfig,
)
from rock.sdk.sandbox.agent.rock_agent import AgentInstallError, AgentRunResult, RockAgent

__all__ = [
    "AgentBashCommand",
    "AgentConfig",
    "AgentInstallError",
    "AgentRunResult",
    "RockAgent",
    "RockAgentConfig",
    "RuntimeEnvConfig",
]
