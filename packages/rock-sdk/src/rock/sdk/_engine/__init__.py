"""The engines behind :class:`~rock.sdk.sandbox.client.Sandbox`: the :class:`Engine` protocol and
the embedded engine (rock-core's ``SandboxManager`` in this process)."""

from rock.sdk._engine.base import Engine, remote_mode_unavailable
from rock.sdk._engine.embedded import (
    EmbeddedEngine,
    close_embedded_engine,
    configure_embedded_engine,
    get_embedded_engine,
)

__all__ = [
    "EmbeddedEngine",
    "Engine",
    "close_embedded_engine",
    "configure_embedded_engine",
    "get_embedded_engine",
    "remote_mode_unavailable",
]
