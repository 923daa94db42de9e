"""The engines behind :class:`~rock.sdk.sandbox.client.Sandbox`: the :class:`Engine` protocol, the
embedded engine (rock-core's ``SandboxManager`` in this process) and the remote engine (rock's
admin server over HTTP)."""

from rock.sdk._engine.base import Engine
from rock.sdk._engine.embedded import (
    EmbeddedEngine,
    close_embedded_engine,
    configure_embedded_engine,
    get_embedded_engine,
)
from rock.sdk._engine.remote import RemoteEngine, get_remote_engine

__all__ = [
    "EmbeddedEngine",
    "Engine",
    "RemoteEngine",
    "close_embedded_engine",
    "configure_embedded_engine",
    "get_embedded_engine",
    "get_remote_engine",
]
