"""rock's SDK, ROCK-compatible: ``from rock.sdk.sandbox.client import Sandbox``.

With no ``base_url`` (and no ``ROCK_BASE_URL``) sandboxes run through the embedded driver:
rock-core's engine in this process, on the local Docker engine (``pip install rock-sdk
rock-docker``). The process-wide driver starts on first use and removes this process's sandboxes at exit;
:func:`configure_embedded_driver` changes its settings before the first sandbox starts.

Names are imported on first use, so that a module of the SDK (the remote driver the ``rock``
command uses) does not load the embedded driver with it. ``warm_pool`` is the exception: the
function shadows its module of the same name only if it is bound here first.
"""

from __future__ import annotations

from typing import Any

from rock._lazy import lazy_names
from rock.sdk.warm_pool import warm_pool

__all__ = [
    "BaseConfig",
    "Driver",
    "EmbeddedDriver",
    "EmbeddedEngine",
    "Engine",
    "RunMode",
    "Sandbox",
    "SandboxConfig",
    "SandboxGroup",
    "SandboxGroupConfig",
    "close_embedded_driver",
    "close_embedded_engine",
    "configure_embedded_driver",
    "configure_embedded_engine",
    "get_embedded_driver",
    "get_embedded_engine",
    "warm_pool",
]

_WHERE = {
    "BaseConfig": "rock.sdk.sandbox.config",
    "Driver": "rock.sdk._drivers.base",
    "EmbeddedDriver": "rock.sdk._drivers.embedded",
    "RunMode": "rock.sdk.sandbox.client",
    "Sandbox": "rock.sdk.sandbox.client",
    "SandboxConfig": "rock.sdk.sandbox.config",
    "SandboxGroup": "rock.sdk.sandbox.client",
    "SandboxGroupConfig": "rock.sdk.sandbox.config",
    "close_embedded_driver": "rock.sdk._drivers.embedded_default",
    "configure_embedded_driver": "rock.sdk._drivers.embedded_default",
    "get_embedded_driver": "rock.sdk._drivers.embedded_default",
}

# The old names, before the SDK's ways of reaching sandboxes were called drivers (issue #23:
# "engine" is rock-core's SandboxManager). Kept for code written against them: each is the very
# object its new name gives.
_OLD_NAMES = {
    "EmbeddedEngine": "EmbeddedDriver",
    "Engine": "Driver",
    "close_embedded_engine": "close_embedded_driver",
    "configure_embedded_engine": "configure_embedded_driver",
    "get_embedded_engine": "get_embedded_driver",
}

_lazy_getattr, _lazy_dir = lazy_names(__name__, _WHERE)


def __getattr__(name: str) -> Any:
    """A name of ``__all__`` (an old name gives its new name's object), imported on first use."""
    return _lazy_getattr(_OLD_NAMES.get(name, name))


def __dir__() -> list[str]:
    """The module's names, with those imported on first use and the old names."""
    return sorted({*_lazy_dir(), *_OLD_NAMES})
