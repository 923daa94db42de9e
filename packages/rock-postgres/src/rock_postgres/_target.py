"""The server a ``store`` URL names, read without connecting: for the errors, which say where.

``postgresql://user[:password]@host[:port]/database`` (a TCP address), or with ``?host=/folder``
(a unix socket in that folder; ``port`` then names the socket file, ``.s.PGSQL.<port>``), as
libpq and asyncpg read them. The password never appears in what this module gives back.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from rock_core.errors import InvalidParameter
from rock_core.records import mask_url

__all__ = ["Target", "read_target"]

SCHEMES = ("postgresql", "postgres")
DEFAULT_PORT = 5432


@attrs.frozen
class Target:
    """Where a store URL points.

    :param url: the URL as given (with its password: only for connecting).
    :param masked: the URL with its password masked, for messages.
    :param where: the server, for messages: ``127.0.0.1:5432`` or ``socket /folder/.s.PGSQL.5432``.
    :param database: the database's name.
    """

    url: str = attrs.field(repr=False)
    masked: str
    where: str
    database: str


def read_target(url: str) -> Target:
    """Read ``url``.

    :raises InvalidParameter: naming ``store`` and the URL (password masked): not a
        ``postgresql://`` URL, a port that is not a number, no database.
    """
    masked = mask_url(url)

    def bad(problem: str) -> InvalidParameter:
        return InvalidParameter(
            f"store: {masked!r} {problem} (postgresql://user@host:port/database, or "
            f"postgresql://user@/database?host=/socket/folder)",
            field="store",
            value=masked,
        )

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(f"is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise bad(f"is not a PostgreSQL URL (scheme {parts.scheme!r})")
    query = parse_qs(parts.query)
    database = unquote(parts.path.lstrip("/")) or (query.get("dbname") or [""])[-1]
    if not database:
        raise bad("names no database")
    host = parts.hostname or (query.get("host") or [""])[-1]
    port_text = (query.get("port") or [""])[-1]
    if port_text and not port_text.isdigit():
        raise bad(f"has a port that is not a number ({port_text!r})")
    if port is None and port_text:
        port = int(port_text)
    port = port or DEFAULT_PORT
    if not host or host.startswith("/"):
        folder = host or "/run/postgresql"
        where = f"socket {folder.rstrip('/')}/.s.PGSQL.{port}"
    else:
        where = f"{host}:{port}"
    return Target(url=url, masked=masked, where=where, database=database)
