"""rock's SDK, ROCK-compatible: ``from rock.sdk.sandbox.client import Sandbox``.

With no ``base_url`` (and no ``ROCK_BASE_URL``) sandboxes run in this process's embedded engine
on the local Docker engine (``pip install rock-sdk rock-docker``). The process-wide engine starts
on first use and removes this process's sandboxes at exit; :func:`configure_embedded_engine`
changes its settings before the first sandbox starts.
"""

from rock.sdk._engine import (
    EmbeddedEngine,
    Engine,
    close_embedded_engine,
    configure_embedded_engine,
    get_embedded_engine,
)
from rock.sdk.sandbox.client import RunMode, Sandbox, SandboxGroup
from rock.sdk.sandbox.config import BaseConfig, SandboxConfig, SandboxGroupConfig
from rock.sdk.warm_pool import warm_pool

__all__ = [
    "BaseConfig",
    "EmbeddedEngine",
    "Engine",
    "RunMode",
    "Sandbox",
    "SandboxConfig",
    "SandboxGroup",
    "SandboxGroupConfig",
    "close_embedded_engine",
    "configure_embedded_engine",
    "get_embedded_engine",
    "warm_pool",
]
