"""The engines behind :class:`~rock.sdk.sandbox.client.Sandbox`: the :class:`Engine` protocol, the
embedded engine (rock-core's ``SandboxManager`` in this process) and the remote engine (rock's
admin server over HTTP).

Names are imported on first use: a remote trainer (and ``rock sandbox list``) never loads the
embedded engine.
"""

from __future__ import annotations

from rock._lazy import lazy_names

__all__ = [
    "EmbeddedEngine",
    "Engine",
    "RemoteEngine",
    "close_embedded_engine",
    "configure_embedded_engine",
    "get_embedded_engine",
    "get_remote_engine",
]

_WHERE = {
    "EmbeddedEngine": "rock.sdk._engine.embedded",
    "Engine": "rock.sdk._engine.base",
    "RemoteEngine": "rock.sdk._engine.remote",
    "close_embedded_engine": "rock.sdk._engine.embedded_default",
    "configure_embedded_engine": "rock.sdk._engine.embedded_default",
    "get_embedded_engine": "rock.sdk._engine.embedded_default",
    "get_remote_engine": "rock.sdk._engine.remote",
}


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
