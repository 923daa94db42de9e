"""The Docker networks sandboxes join: rock's isolated bridge and each network group's own.

``network: bridge`` means a network where inter-container traffic is disabled, so a sandbox
reaches the outside but no other sandbox: Docker's default bridge when its engine runs with
``--icc=false``, else ``rock-sandboxes``, made on first use. The sandboxes of one network group
share a network of their own instead (``rock-group-<id>``), made with the group's first member
and removed with its last. Every method here blocks (the runtime calls them in worker threads).
"""

from __future__ import annotations

import threading

import docker
import docker.errors

from rock_core.errors import InvalidParameter
from rock_core.runtime import UnitHandle
from rock_docker._container import (
    LABEL_GROUP_NETWORK,
    LABEL_NETWORK,
    LABEL_NETWORK_GROUP,
    group_network_name,
)

__all__ = ["Networks"]

#: The network rock makes when Docker's default bridge lets containers reach each other.
ROCK_NETWORK = "rock-sandboxes"


class Networks:
    """The networks one runtime put sandboxes on, and which group's network each unit joined.

    :param isolated: the ``isolated_network`` setting (``None``: chosen on first use).
    """

    def __init__(self, isolated: str | None) -> None:
        self._setting = isolated
        self._chosen: str | None = None  # the isolated network found on first use
        self._known: set[str] = set()  # networks known to exist (made or found)
        self._lock = threading.Lock()  # one thread makes a missing network
        self._unit_groups: dict[str, str] = {}  # unit id -> its group's network, for removal

    @property
    def isolated(self) -> str | None:
        """The network ``network: bridge`` puts sandboxes on (``None`` until the engine was asked)."""
        return self._chosen or self._setting

    def choose_isolated(self, api: docker.APIClient) -> str:
        """The isolated network, chosen on first use by asking Docker's default bridge.

        :raises InvalidParameter: ``isolated_network`` is ``bridge`` but Docker's default bridge
            lets containers connect to each other.
        """
        if self._chosen is None:
            options = api.inspect_network("bridge").get("Options") or {}
            icc = options.get("com.docker.network.bridge.enable_icc", "true") != "false"
            if self._setting == "bridge" and icc:
                raise InvalidParameter(
                    "isolated_network: Docker's default bridge lets containers connect to each other "
                    "(its engine runs without --icc=false); leave isolated_network unset for rock's own network",
                    field="isolated_network",
                    value="bridge",
                    attempted="create",
                )
            self._chosen = self._setting or (ROCK_NETWORK if icc else "bridge")
        return self._chosen

    def ensure(self, api: docker.APIClient, name: str, *, group: str | None) -> None:
        """Make sure Docker network ``name`` exists: rock's isolated network, with
        inter-container communication disabled, or a group's network, where it is allowed."""
        with self._lock:
            if name in self._known:
                return
            if not any(found.get("Name") == name for found in api.networks(names=[name])):
                options = (
                    {} if group is not None else {"com.docker.network.bridge.enable_icc": "false"}
                )
                labels = {LABEL_NETWORK: "group" if group is not None else "isolated"}
                if group is not None:
                    labels[LABEL_NETWORK_GROUP] = group
                try:
                    api.create_network(
                        name, driver="bridge", options=options, labels=labels, check_duplicate=True
                    )
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # made meanwhile by another process: fine
                        raise
            self._known.add(name)

    def forget(self, name: str) -> None:
        """``name`` may be gone (removed with a group's last member): check again before use."""
        with self._lock:
            self._known.discard(name)

    def joined(self, unit_id: str, network: str) -> None:
        """Unit ``unit_id`` joined its group's ``network`` (removed with the group's last unit)."""
        self._unit_groups[unit_id] = network

    def network_of(self, handle: UnitHandle) -> str | None:
        """The network group's network unit ``handle`` joined (``None``: none), forgotten now."""
        network = self._unit_groups.pop(handle.unit_id, None)
        network = network or handle.labels.get(LABEL_GROUP_NETWORK)
        group = handle.labels.get(LABEL_NETWORK_GROUP)
        if network is None and group:
            network = group_network_name(group)  # a container made before groups had tenants
        return network

    def remove_if_unused(self, api: docker.APIClient, name: str) -> None:
        """Remove a group's network once no container is attached to it."""
        try:
            if api.inspect_network(name).get("Containers"):
                return
            self.forget(name)
            api.remove_network(name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code not in (403, 409):  # a member joined meanwhile: it stays
                raise
