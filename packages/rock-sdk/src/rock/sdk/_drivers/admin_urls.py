"""Several admin URLs (issue #24 point 4): reading ``ROCK_BASE_URL`` / ``SandboxConfig.base_url``
as one URL, a comma-separated list or a list, and which calls may move on to the next admin after
the request may have reached the previous one (no I/O here): reads, stop, delete, and a start
carrying an ``Idempotency-Key`` (the admin answers a repeated key with the first start's sandbox).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence

from rock_core.errors import InvalidParameter

__all__ = ["IDEMPOTENCY_HEADER", "KEYED_POSTS", "SAFE_POSTS", "admin_urls", "safe_to_repeat"]

# POST routes a second admin may be sent after the first may have received them: reads, what
# the transport already repeats as idempotent (stop, delete), and the SDK's start batches (every
# item carries its own Idempotency-Key). A command, a write: never.
SAFE_POSTS = frozenset(
    {"/stop", "/delete", "/read_file", "/list_dir", "/stat", "/sandboxes/start_batch"}
)
# POST routes safe to repeat when they carry an Idempotency-Key header: the admin answers a
# second start with the key by the first one's sandbox.
KEYED_POSTS = frozenset({"/start", "/start_async"})
IDEMPOTENCY_HEADER = "Idempotency-Key"


def admin_urls(
    value: str | Sequence[str],
    field: str = "base_url",
    error: type[InvalidParameter] = InvalidParameter,
) -> tuple[str, ...]:
    """The admin URLs ``value`` names, in order, each without its trailing ``/``.

    ``value`` is one URL, several separated by commas (``ROCK_BASE_URL=http://a:8080,http://b:8080``)
    or a list of URLs.

    :raises InvalidParameter: (``error``) an empty item, a URL that is not http/https with a host,
        or the same URL twice; naming ``field`` and the value.
    """
    items = value.split(",") if isinstance(value, str) else list(value)
    if not items:
        raise error(
            f"{field}: expected at least one admin URL, got {value!r}", field=field, value=value
        )
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise error(f"{field}: an empty admin URL in {value!r}", field=field, value=value)
        url = item.strip().rstrip("/")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise error(
                f"{field}: {item!r} is no http:// or https:// URL with a host (in {value!r})",
                field=field,
                value=value,
            )
        if url in urls:
            raise error(f"{field}: {url!r} is named twice in {value!r}", field=field, value=value)
        urls.append(url)
    return tuple(urls)


def safe_to_repeat(method: str, route: str, headers: Mapping[str, str] | None = None) -> bool:
    """Whether a call may be sent again (to the next admin) after the request may have reached
    one: a GET, a route of :data:`SAFE_POSTS`, or a start carrying an ``Idempotency-Key``
    among its ``headers``."""
    if method == "GET" or route in SAFE_POSTS:
        return True
    keyed = any(name.lower() == IDEMPOTENCY_HEADER.lower() for name in headers or {})
    return method == "POST" and route in KEYED_POSTS and keyed
