"""Checks of the values the strategies accept: a mirror URL, an IP address.

A value ends up in a shell script and in configuration files (``pip.conf``, ``sources.list``,
``/etc/hosts``), so anything that could break out of them (whitespace, quotes, ``$``, ``;``, a
newline) is refused here, before anything runs in the sandbox.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from rock_core.errors import InvalidParameter

__all__ = ["ip_address", "mirror_url"]

FIELD = "speedup_value"

# RFC 3986 characters that need no quoting in a config file or a shell word inside single quotes;
# no whitespace, quotes, `$`, backquote, backslash, `;`, `&`, `|`, `<`, `>`, `?` or `#`.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/@%+=,!*()\[\]]+")


def _invalid(value: object, why: str, strategy: str) -> InvalidParameter:
    return InvalidParameter(
        f"{FIELD}: {value!r} is not a valid {strategy} mirror: {why}",
        field=FIELD,
        value=value,
        attempted="speedup",
    )


def mirror_url(value: str, strategy: str) -> str:
    """``value`` as a mirror base URL without its trailing ``/``, or :class:`InvalidParameter`.

    A mirror URL has the scheme ``http`` or ``https``, a host, optionally a port, credentials
    and a path prefix; no query or fragment. ``strategy`` names the speedup type in the message.

    >>> mirror_url("https://mirror.example/", "pip")
    'https://mirror.example'
    """
    text = value.strip()
    bad = sorted({c for c in text if not _URL_CHARS.fullmatch(c)} - {"?", "#"})
    if bad:
        raise _invalid(
            value, f"it contains characters a mirror URL cannot have: {''.join(bad)!r}", strategy
        )
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:  # e.g. "[not-v6]": Python checks bracketed hosts
        raise _invalid(value, f"it cannot be parsed as a URL ({exc})", strategy) from None
    if not parts.scheme or "://" not in text:
        raise _invalid(value, "it needs a scheme (http:// or https://)", strategy)
    if parts.scheme not in ("http", "https"):
        raise _invalid(value, f"the scheme must be http or https, not {parts.scheme!r}", strategy)
    if "?" in text or "#" in text:
        raise _invalid(value, "a mirror URL has no query (?) or fragment (#)", strategy)
    if not parts.hostname:
        raise _invalid(value, "it has no host name", strategy)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in 0..65535
    except ValueError as exc:
        raise _invalid(value, f"bad port ({exc})", strategy) from None
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(parts.hostname)
        except ValueError:
            raise _invalid(
                value, f"{parts.hostname!r} in brackets is not an IPv6 address", strategy
            ) from None
    # The scheme is case-insensitive; tools compare it in lower case.
    return (parts.scheme + text[len(parts.scheme) :]).rstrip("/")


def ip_address(value: str, strategy: str) -> str:
    """``value`` as an IPv4 or IPv6 address in its canonical text form, or :class:`InvalidParameter`.

    Octets above 255 (``999.1.1.1``) and leading zeros (``0127.0.0.1``, read as octal by some
    resolvers) are refused.

    >>> ip_address(" 203.0.113.10 ", "github")
    '203.0.113.10'
    """
    text = value.strip()
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise InvalidParameter(
            f"{FIELD}: {value!r} is not an IPv4 or IPv6 address (like 203.0.113.10) for {strategy}",
            field=FIELD,
            value=value,
            attempted="speedup",
        ) from None
    if getattr(address, "scope_id", None):
        raise InvalidParameter(
            f"{FIELD}: {value!r} has a zone (%{address.scope_id}), which /etc/hosts cannot hold",  # type: ignore[union-attr]
            field=FIELD,
            value=value,
            attempted="speedup",
        )
    return str(address)
