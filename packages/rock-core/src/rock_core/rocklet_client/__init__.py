"""The client of a sandbox's rocklet (:class:`RockletClient`), which the engine, the admin and
the embedded SDK share, and the engine's pooled HTTP client of rocklets (:func:`new_http_client`).

Modules by job: :mod:`.client` (the calls, the catalog's operations through
:meth:`RockletClient.call`), :mod:`.transport` (the pool over TCP and unix sockets),
:mod:`.answers` (capped reads, rocklet errors as rock errors) and :mod:`.connections` (probes,
tunnels, terminals).
"""

from __future__ import annotations

from rock_core.rocklet_client.client import RockletClient, process_request
from rock_core.rocklet_client.transport import (
    DEFAULT_MAX_ANSWER,
    RockletHttp,
    RockletTransport,
    new_http_client,
)

__all__ = [
    "DEFAULT_MAX_ANSWER",
    "RockletClient",
    "RockletHttp",
    "RockletTransport",
    "new_http_client",
    "process_request",
]
