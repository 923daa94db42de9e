"""A sandbox leaves its network one container at a time, before its container is removed.

Docker 20.10 before 20.10.27 (Debian's ``docker.io`` 20.10.24 among them) can deadlock its
network controller when containers of one network leave it at the same moment (moby/moby#42545,
backported to 20.10 as moby/libnetwork#2679 for moby/moby#46661): a container leaving a network
reads the network's service records holding the network's lock and then waits for the
controller's, while the controller's watch loop, handling the deletion of another endpoint of the
same network, holds the controller's lock and waits for the network's. From then on dockerd
answers no call that needs either lock (starts, removals, soon ``docker ps``) until it is
restarted. The service records are copied with both locks held, so the window grows with the
containers on the network: it struck at most 1,000-sandbox teardowns on one bridge.

``docker rm -f`` of a running container leaves its network when dockerd sees the container exit,
so removals in parallel leave in parallel. :func:`leave_network` disconnects the container
first, one disconnection at a time in this process: each leave and the endpoint deletion it hands
to the watch loop are over before the next leave begins, and the removal that follows (in
parallel, as before) has no network left to leave. It is best effort: a container that is gone,
not connected, or on the host's network is removed as before.
"""

from __future__ import annotations

import threading

import docker
import docker.errors
import requests.exceptions

__all__ = ["LEAVE_LOCK", "leave_network"]

#: One network leave at a time in this process (every runtime of it, and the reaper).
LEAVE_LOCK = threading.Lock()


def leave_network(api: docker.APIClient, unit_id: str, network: str) -> bool:
    """Disconnect container ``unit_id`` from ``network`` while holding :data:`LEAVE_LOCK`;
    whether it was (blocking; any refusal is left to the removal that follows).

    A call that times out raises (``requests``' timeout): dockerd did not answer, which the
    removal would meet too.
    """
    with LEAVE_LOCK:
        try:
            api.disconnect_container_from_network(unit_id, network, force=True)
        except (docker.errors.APIError, requests.exceptions.HTTPError):
            return False  # gone, not connected, or a network it cannot leave (host, none)
    return True
