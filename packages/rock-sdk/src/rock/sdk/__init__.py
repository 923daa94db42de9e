"""rock's SDK, ROCK-compatible: ``from rock.sdk.sandbox.client import Sandbox``.

With no ``base_url`` (and no ``ROCK_BASE_URL``) sandboxes run in this process's embedded engine
on the local Docker engine (``pip install rock-sdk rock-docker``). The process-wide engine starts
on first use and removes this process's sandboxes at exit; :func:`configure_embedded_engine`
changes its settings before the first sandbox starts.

Names are imported on first use, so that a module of the SDK (the remote engine the ``rock``
command uses) does not load the embedded engine with it. ``warm_pool`` is the exception: the
function shadows its module of the same name only if it is bound here first.
"""

from __future__ import annotations

from rock._lazy import lazy_names
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

_WHERE = {
    "BaseConfig": "rock.sdk.sandbox.config",
    "EmbeddedEngine": "rock.sdk._engine.embedded",
    "Engine": "rock.sdk._engine.base",
    "RunMode": "rock.sdk.sandbox.client",
    "Sandbox": "rock.sdk.sandbox.client",
    "SandboxConfig": "rock.sdk.sandbox.config",
    "SandboxGroup": "rock.sdk.sandbox.client",
    "SandboxGroupConfig": "rock.sdk.sandbox.config",
    "close_embedded_engine": "rock.sdk._engine.embedded_default",
    "configure_embedded_engine": "rock.sdk._engine.embedded_default",
    "get_embedded_engine": "rock.sdk._engine.embedded_default",
}


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
