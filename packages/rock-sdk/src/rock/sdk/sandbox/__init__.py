"""ROCK's ``rock.sdk.sandbox``: :class:`~.client.Sandbox`, :class:`~.client.SandboxGroup`, their configs and helpers."""

from rock.sdk.sandbox.client import RunMode, Sandbox, SandboxGroup
from rock.sdk.sandbox.config import BaseConfig, SandboxConfig, SandboxGroupConfig

__all__ = [
    "BaseConfig",
    "RunMode",
    "Sandbox",
    "SandboxConfig",
    "SandboxGroup",
    "SandboxGroupConfig",
]
