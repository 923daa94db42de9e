"""What the embedded engine's thread keeps per sandbox, and drops at each of its transitions.

Both are registered as plugins of the engine's ``SandboxManager``
(:class:`~rock.sdk._drivers.embedded.EmbeddedDriver`): :class:`AddressBook` (rocklet addresses for
calls straight from callers' loops) and :class:`LocalPorts` (host ports of ``port_url``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from rock_core import hookimpl
from rock_core.engine.forwarding import PortForwards
from rock_core.models import Port
from rock_core.rocklet_client import RockletClient

__all__ = ["AddressBook", "LocalPorts", "TouchingClient"]


class AddressBook:
    """Rocklet addresses of running sandboxes, for calls straight from callers' loops.

    Registered as a plugin of the engine's manager: every lifecycle transition of a sandbox
    (stop, restart, ...) drops its entry at once, in the engine's thread, before the engine acts
    on the unit; the next call asks the engine again.
    """

    def __init__(self) -> None:
        self._addresses: dict[str, tuple[str, int, str | None]] = {}

    def get(self, sandbox_id: str) -> tuple[str, int, str | None] | None:
        """``(host, port, secret)`` of ``sandbox_id``'s rocklet, when known and still valid."""
        return self._addresses.get(sandbox_id)

    def put(self, sandbox_id: str, address: tuple[str, int, str | None]) -> None:
        """Remember an address the engine just handed out (engine thread only)."""
        self._addresses[sandbox_id] = address

    def forget(self, sandbox_id: str) -> None:
        """Drop the sandbox's address (a pause: its next call asks the engine, which refuses)."""
        self._addresses.pop(sandbox_id, None)

    @hookimpl
    def rock_sandbox_transition(self, record: Any, event: Any, old: Any, new: Any) -> None:
        """Forget the sandbox's address: whatever state it is in now, ask the engine again."""
        self._addresses.pop(record.sandbox_id, None)


class LocalPorts:
    """Host ports on 127.0.0.1 for :meth:`EmbeddedDriver.port_url`, one per sandbox port asked
    for, each carried through the sandbox's rocklet (rock-core's :class:`PortForwards`).

    Registered as a plugin like :class:`AddressBook`: a sandbox's transition (stop, restart)
    closes its ports; the next ``get_url`` opens a new one. Driver thread only.
    """

    def __init__(self) -> None:
        self._forwards: PortForwards | None = None
        self._keys: dict[str, set[str]] = {}

    async def open(
        self,
        task_group: anyio.abc.TaskGroup,
        client: RockletClient,
        sandbox_id: str,
        port: int,
        touch: Callable[[], None],
    ) -> int:
        """The host port that reaches ``port`` of ``sandbox_id`` (opened on first use); each
        connection to it calls ``touch`` (activity for the idle timer)."""
        if self._forwards is None:
            self._forwards = PortForwards(task_group)
        key = f"{sandbox_id}\0{port}"
        mapping = self._forwards.mapping(key) or await self._forwards.open(
            key,
            TouchingClient(client, touch),  # type: ignore[arg-type]  # the tunnel half of a client
            [port],
        )
        self._keys.setdefault(sandbox_id, set()).add(key)
        return int(mapping[Port(port)])

    @hookimpl
    def rock_sandbox_transition(self, record: Any, event: Any, old: Any, new: Any) -> None:
        """Close the sandbox's local ports: its rocklet changes or goes away."""
        for key in self._keys.pop(record.sandbox_id, ()):
            if self._forwards is not None:
                self._forwards.close(key)


class TouchingClient:
    """A rocklet client whose every new connection counts as the sandbox's activity."""

    def __init__(self, client: RockletClient, touch: Callable[[], None]) -> None:
        self._client = client
        self._touch = touch
        self.sandbox_id = client.sandbox_id

    async def open_tunnel(self, port: int) -> anyio.abc.ByteStream:
        self._touch()
        return await self._client.open_tunnel(port)

    async def connect(self) -> anyio.abc.ByteStream:
        self._touch()
        return await self._client.connect()
