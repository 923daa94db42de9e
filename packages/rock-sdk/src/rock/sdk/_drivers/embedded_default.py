"""The process-wide :class:`~rock.sdk._drivers.embedded.EmbeddedDriver`: made on first use, set up
by :func:`configure_embedded_driver`, closed at interpreter exit and forgotten in a forked child.
"""

from __future__ import annotations

import atexit
import os
import threading

from rock.sdk._drivers.embedded import EmbeddedDriver
from rock_core.engine.config import EngineConfig

__all__ = ["close_embedded_driver", "configure_embedded_driver", "get_embedded_driver"]


# -- the process-wide driver ----------------------------------------------------------------------

_default: EmbeddedDriver | None = None
_default_config: EngineConfig | None = None
_default_lock = threading.Lock()
_atexit_registered = False


def configure_embedded_driver(config: EngineConfig) -> None:
    """Set the :class:`EngineConfig` of the process-wide embedded engine.

    Call it before the first sandbox starts (e.g. to cap concurrent starts, or to keep
    stopped sandboxes longer). Once the engine runs with another config it cannot change.

    :raises RuntimeError: the engine already runs with a different config.
    """
    global _default, _default_config
    with _default_lock:
        if _default is not None and not _default.closed:
            if _default.running and _default.config != config:
                raise RuntimeError(
                    "rock's embedded engine is already running with another EngineConfig; call "
                    "configure_embedded_driver() before the first sandbox starts (or close_embedded_driver() first)"
                )
            if not _default.running:
                _default = None
        _default_config = config


def get_embedded_driver() -> EmbeddedDriver:
    """The process-wide :class:`EmbeddedDriver` (made on first use; started on first call)."""
    global _default, _atexit_registered
    driver = _default
    if driver is not None and not driver.closed:
        return driver
    with _default_lock:
        if _default is None or _default.closed:
            _default = EmbeddedDriver(_default_config)
        if not _atexit_registered:
            atexit.register(close_embedded_driver)
            _atexit_registered = True
        return _default


def close_embedded_driver() -> None:
    """Close the process-wide embedded driver and its engine, removing its sandboxes (also run at
    interpreter exit)."""
    global _default
    with _default_lock:
        driver, _default = _default, None
    if driver is not None:
        driver.close()


def _forget_after_fork() -> None:
    # A forked child has no engine thread; it must start its own and leave the parent's alone.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
