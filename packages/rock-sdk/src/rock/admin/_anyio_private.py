"""The one private name of anyio the admin uses, in one place.

The admin's pool of tunnels closes idle connections from synchronous code (a pool being
discarded outside any task). anyio closes a stream only in ``await aclose()``; on asyncio its
socket stream holds an ``asyncio.Transport`` in ``_transport``, whose ``close()`` is synchronous
and safe. :func:`close_now` uses it, else closes the raw socket. ``tests/test_library_seams.py``
checks that anyio still has it, naming anyio's version when it does not.
"""

from __future__ import annotations

import anyio.abc

__all__ = ["close_now"]


def close_now(stream: anyio.abc.ByteStream) -> None:
    """Close an idle socket ``stream`` from synchronous code: its transport, else its socket."""
    transport = getattr(stream, "_transport", None)
    if transport is not None:
        transport.close()
        return
    try:
        stream.extra(anyio.abc.SocketAttribute.raw_socket).close()
    except (anyio.TypedAttributeLookupError, AttributeError, OSError):
        pass
