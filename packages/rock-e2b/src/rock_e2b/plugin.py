"""rock-e2b's rock plugin: E2B's API on the admin, so E2B's unmodified SDK drives rock's
sandboxes (``E2B_API_URL=http://<admin>/e2b``, ``E2B_SANDBOX_URL=http://<admin>/e2b/envd``,
``E2B_API_KEY=<an admin API key>``).

Announced in the ``rock`` entry-point group (``e2b = "rock_e2b.plugin"``); its settings are the
table ``[plugins.e2b]``: ``templates`` (template name -> image; other names are images) and
``access_token_secret`` (the data plane's token key, shared by a cluster's admins; default: a
random one per admin process).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rock_core import hookimpl
from rock_core.errors import InvalidParameter

__all__ = ["rock_admin_routes", "rock_configure"]

_KEYS = {"templates", "access_token_secret"}


@hookimpl
def rock_configure(config: Mapping[str, Any]) -> None:
    """Read ``[plugins.e2b]``.

    :raises InvalidParameter: an unknown key or a value of the wrong shape.
    """
    from rock_e2b import access, control

    for key in config:
        if key not in _KEYS:
            raise InvalidParameter(
                f"plugins.e2b.{key}: unknown setting (known: {', '.join(sorted(_KEYS))})",
                field=f"plugins.e2b.{key}",
            )
    table = config.get("templates") or {}
    if not isinstance(table, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise InvalidParameter(
            "plugins.e2b.templates: a table of template name = image",
            field="plugins.e2b.templates",
        )
    secret = config.get("access_token_secret")
    if secret is not None and not isinstance(secret, str):
        raise InvalidParameter(
            "plugins.e2b.access_token_secret: a string", field="plugins.e2b.access_token_secret"
        )
    control.templates = control.Templates(table)
    access.configure_secret(secret)


@hookimpl
def rock_admin_routes() -> list[Any]:
    """E2B's control plane under ``/e2b`` and its data plane under ``/e2b/envd``."""
    from rock_e2b import control, dataplane

    return control.routes() + dataplane.routes()
