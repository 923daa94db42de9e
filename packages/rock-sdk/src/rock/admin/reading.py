"""What the admin reads of a request besides its input: the tenant and quota of its key (from
the key gate's scope), whether it carries a body, the keys of a body its model does not know,
and the ``Warning`` header that names those it ignored."""

from __future__ import annotations

import functools
import json
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import Response

from rock.admin.key_gate import scope_key, scope_tenant
from rock_core.tenancy import Quota

__all__ = ["has_body", "quota_of", "tenant_of", "unknown_keys", "warned"]


def warned(request: Request, response: Response) -> Response:
    """``response`` with a ``Warning`` header naming the request's ignored fields, if any."""
    ignored = getattr(request.state, "ignored_keys", None)
    if ignored:
        # A header is printable ASCII: JSON's escapes for anything else, at most 20 names.
        names = [
            json.dumps(k)[1:-1].replace('\\"', "'").replace("\x7f", "\\u007f") for k in ignored[:20]
        ]
        more = f" and {len(ignored) - 20} more" if len(ignored) > 20 else ""
        response.headers["Warning"] = (
            f'299 rock "unknown field(s) ignored: {", ".join(names)}{more}"'
        )
    return response


def unknown_keys(data: Any, cls: type) -> list[str]:
    """The top-level keys of ``data`` that name no field of ``cls`` (an attrs class)."""
    if not isinstance(data, dict) or not attrs.has(cls):
        return []
    names = _field_names(cls)
    return sorted(str(key) for key in data if key not in names)


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in attrs.fields(cls))  # (each body's model asks, every time)


def has_body(request: Request) -> bool:
    """Whether the request carries a body (a ``Content-Length`` above 0, or a chunked one)."""
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "chunked" in request.headers.get("transfer-encoding", "").lower()


def tenant_of(request: Request) -> str | None:
    """The tenant of the request's key (``None``: keys are off)."""
    return scope_tenant(request.scope)


def quota_of(request: Request) -> Quota | None:
    """The quota of the request's key (``None``: keys are off, no quota)."""
    key = scope_key(request.scope)
    return None if key is None else key.quota
