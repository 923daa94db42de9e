"""A sandbox's container stops, and so leaves its networks, one container at a time before it is
removed.

Docker 20.10 before 20.10.27 (Debian's ``docker.io`` 20.10.24 among them) can deadlock its
network controller when containers of one network leave it at the same moment (moby/moby#42545,
backported to 20.10 as moby/libnetwork#2679 for moby/moby#46661): a container leaving a network
reads the network's service records holding the network's lock and then waits for the
controller's, while the controller's watch loop, handling the deletion of another endpoint of the
same network, holds the controller's lock and waits for the network's. From then on dockerd
answers no call that needs either lock (starts, removals, soon ``docker ps``) until it is
restarted. The service records are copied with both locks held, so the window grows with the
containers on the network: it struck at most 1,000-sandbox teardowns on one bridge.

``docker rm -f`` of a running container leaves its networks when dockerd handles the container's
exit, so removals in parallel leave in parallel. :func:`leave_networks` kills the container first
and waits until dockerd has handled its exit (the networks released), one container at a time in
this process; the removal that follows (in parallel, as before) has no network left to leave.

Why a kill and not ``docker network disconnect``: disconnecting a running container (its
interface taken out of a live namespace) holds dockerd's network code two to five times longer
than the same leave at the container's exit, and a container started meanwhile waited for it
(this host: a start beside a removal 330-400 ms with a disconnect, 280 ms with a kill, 270 ms
with neither). The sandbox's own processes were ended before its removal was queued
(``end_processes``), so the kill only ends its idle rocklet.

It is best effort: a container that is gone or already stopped is removed as before.
"""

from __future__ import annotations

import threading

import docker
import docker.errors
import requests.exceptions

__all__ = ["LEAVE_LOCK", "leave_networks"]

#: One container's exit (and so its network leave) at a time in this process (every runtime of
#: it, and the reaper).
LEAVE_LOCK = threading.Lock()


def leave_networks(api: docker.APIClient, unit_id: str) -> bool:
    """Kill container ``unit_id`` and wait until dockerd released its networks, while holding
    :data:`LEAVE_LOCK`; whether it was found (blocking; any refusal is left to the removal that
    follows).

    ``docker stop`` returns once the container is marked stopped, while dockerd still holds the
    container releasing its networks; the inspection after it waits for that hold to end.

    A call that times out raises (``requests``' timeout): dockerd did not answer, which the
    removal would meet too.
    """
    with LEAVE_LOCK:
        try:
            api.stop(unit_id, timeout=0)
            api.inspect_container(unit_id)
        except (docker.errors.APIError, requests.exceptions.HTTPError):
            return False  # gone, or being removed already
    return True
