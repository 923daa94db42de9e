"""How the engine reaches each sandbox's rocklet on this host: a unix socket in a folder of
``socket_dir`` that no container mounts, handed in before each start over a one-shot socket in
the folder's ``handoff`` sub-folder, which the container mounts read-only at ``/rock-run``
(:mod:`rock_core.rocklet_handoff`). The sandbox can neither swap what the engine connects to
nor write anything on the host. Every method blocks (the runtime calls them in worker threads,
except where it says).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import docker

from rock_core.errors import RuntimeFailure
from rock_core.models import ROCKLET_PORT, Port, RuntimeStatus, UnitState
from rock_core.private_paths import private_dir
from rock_core.rocklet_handoff import HandoffDesk
from rock_core.runtime import UnitHandle
from rock_docker._container import (
    APP_PORT,
    HANDOFF_DIR,
    HANDOFF_NAME,
    ROCKLET_SOCKET_LABEL,
    SOCKET_NAME,
)

__all__ = ["RockletSockets"]


class RockletSockets:
    """The socket folders of one runtime's units, and the handoffs no rocklet took yet.

    :param socket_dir: the folder that holds one sub-folder per unit (checked before each use:
        a folder of this user alone, see :func:`~rock_core.private_paths.private_dir`).
    """

    def __init__(self, socket_dir: Path) -> None:
        self.socket_dir = socket_dir
        self._dirs: dict[str, Path | None] = {}  # unit id -> its folder (None: reached over TCP)
        #: Each start's listening socket, until its rocklet takes it.
        self.handoffs = HandoffDesk()
        self._known_status: dict[str, RuntimeStatus] = {}  # unit id -> its status once started

    def new_dir(self) -> Path:
        """A fresh folder (0700) for one container: its rocklet socket, and the ``handoff``
        folder it mounts read-only at /rock-run."""
        private_dir(self.socket_dir, setting="socket_dir")
        path = Path(tempfile.mkdtemp(prefix="", dir=self.socket_dir))
        _make_handoff_dir(path)
        return path

    def created(self, unit_id: str, unit_dir: Path | None, *, network: str) -> None:
        """Unit ``unit_id`` was created with ``unit_dir`` (``None``: reached over TCP). One on a
        network is then reached on its socket, its ports forwarded by the engine: its status
        once started is known without asking Docker."""
        self._dirs[unit_id] = unit_dir
        if unit_dir is not None and network != "none":
            self._known_status[unit_id] = RuntimeStatus(
                state=UnitState.RUNNING,
                rocklet_socket=str(unit_dir / SOCKET_NAME),
                forwarded_ports=(Port(ROCKLET_PORT), Port(APP_PORT)),
            )

    def known_status(self, unit_id: str) -> RuntimeStatus | None:
        """The status of a started unit whose address was fixed at create (no call needed)."""
        return self._known_status.get(unit_id)

    def offer_listener(self, api: docker.APIClient, handle: UnitHandle) -> None:
        """Before a start: make the rocklet's listening socket and offer it on the handoff
        socket, for a unit reached on a unix socket; nothing for the others.

        :raises RuntimeFailure: a container made by an earlier process whose label names a
            socket outside ``socket_dir``.
        """
        if handle.unit_id in self._dirs:
            unit_dir = self._dirs[handle.unit_id]
        else:  # made by an earlier process: its label says
            labels = (api.inspect_container(handle.unit_id).get("Config") or {}).get("Labels") or {}
            label = labels.get(ROCKLET_SOCKET_LABEL)
            unit_dir = Path(label).parent if label else None
            if label is not None and (
                Path(label).name != SOCKET_NAME or Path(label).parent.parent != self.socket_dir
            ):
                raise RuntimeFailure(
                    f"container {handle.unit_id[:12]} names a rocklet socket outside socket_dir {self.socket_dir}: {label}",
                    sandbox_id=handle.sandbox_id,
                    attempted="start",
                )
            self._dirs[handle.unit_id] = unit_dir
        if unit_dir is None:
            return
        private_dir(self.socket_dir, setting="socket_dir")
        unit_dir.mkdir(mode=0o700, exist_ok=True)  # gone if the host's tmp was cleaned meanwhile
        _make_handoff_dir(unit_dir)
        self.handoffs.offer(
            handle.unit_id, unit_dir / SOCKET_NAME, unit_dir / HANDOFF_DIR / HANDOFF_NAME
        )

    def cancel(self, unit_id: str) -> None:
        """End the handoff of ``unit_id`` if its rocklet never took its socket (no blocking)."""
        self.handoffs.cancel(unit_id)

    def forget(self, handle: UnitHandle) -> None:
        """Remove the unit's rocklet socket folder, if it has one (only ever one in
        ``socket_dir``, whatever a label names)."""
        self._known_status.pop(handle.unit_id, None)
        self.handoffs.cancel(handle.unit_id)
        socket_path = self._dirs.pop(handle.unit_id, None) or handle.labels.get(
            ROCKLET_SOCKET_LABEL
        )
        if socket_path is not None:
            directory = (
                Path(socket_path)
                if not str(socket_path).endswith(SOCKET_NAME)
                else Path(socket_path).parent
            )
            if directory.parent == self.socket_dir:  # never remove anything else a label names
                shutil.rmtree(directory, ignore_errors=True)

    def close(self) -> None:
        """End the handoffs no rocklet took (no blocking)."""
        self.handoffs.close()


def _make_handoff_dir(unit_dir: Path) -> None:
    """The ``handoff`` folder of a unit folder, which its container mounts read-only: mode 0755,
    so the rocklet reaches the handoff socket as whatever user the image runs it (the unit
    folder, 0700, and ``socket_dir`` keep everyone else on the host out)."""
    handoff = unit_dir / HANDOFF_DIR
    handoff.mkdir(exist_ok=True)
    handoff.chmod(0o755)
