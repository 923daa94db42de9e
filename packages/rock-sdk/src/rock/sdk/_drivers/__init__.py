"""The drivers behind :class:`~rock.sdk.sandbox.client.Sandbox`: the :class:`Driver` protocol, the
embedded driver (rock-core's engine, ``SandboxManager``, in this process) and the remote driver
(rock's admin server over HTTP).

Names are imported on first use: a remote trainer (and ``rock sandbox list``) never loads the
embedded driver (nor rock-core's engine).
"""

from __future__ import annotations

from rock._lazy import lazy_names

__all__ = [
    "EmbeddedDriver",
    "Driver",
    "RemoteDriver",
    "close_embedded_driver",
    "configure_embedded_driver",
    "get_embedded_driver",
    "get_remote_driver",
]

_WHERE = {
    "EmbeddedDriver": "rock.sdk._drivers.embedded",
    "Driver": "rock.sdk._drivers.base",
    "RemoteDriver": "rock.sdk._drivers.remote",
    "close_embedded_driver": "rock.sdk._drivers.embedded_default",
    "configure_embedded_driver": "rock.sdk._drivers.embedded_default",
    "get_embedded_driver": "rock.sdk._drivers.embedded_default",
    "get_remote_driver": "rock.sdk._drivers.remote",
}


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
