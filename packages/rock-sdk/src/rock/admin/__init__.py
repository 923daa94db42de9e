"""rock's admin server: ROCK's HTTP API over the engine, run by ``rock admin start|serve``.

See :mod:`rock.admin.app` for the API, :mod:`rock.admin.config` for the settings and
:mod:`rock.admin.daemon` for running it. Names are imported on first use, so that the ``rock``
command does not load the web stack until ``rock admin`` needs it.
"""

from __future__ import annotations

from rock._lazy import lazy_names

__all__ = ["PREFIX", "AdminApp", "AdminSettings", "create_app", "load_settings"]

_WHERE = {
    "PREFIX": "rock.admin.app",
    "AdminApp": "rock.admin.app",
    "create_app": "rock.admin.app",
    "AdminSettings": "rock.admin.config",
    "load_settings": "rock.admin.config",
}


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
