"""What a Docker engine can enforce, asked once (``docker info``): its CPU count, whether its
storage driver can limit a container's disk, and the limits its kernel cannot enforce, which
every sandbox's handle then says in a note rather than dropping them silently."""

from __future__ import annotations

import threading

import docker

__all__ = ["EngineProbe"]

# Storage drivers that can enforce ``--storage-opt size=`` (overlay2 only on XFS with pquota).
_QUOTA_DRIVERS = ("devicemapper", "btrfs", "zfs", "windowsfilter")
# ``docker info`` flags of the limits rock sets, and what goes unenforced without them.
_ENGINE_LIMITS = (
    ("MemoryLimit", "memory limit"),
    ("SwapLimit", "no-swap limit (the sandbox may swap beyond its memory limit)"),
    ("CpuCfsQuota", "CPU limit"),
    ("CPUShares", "CPU shares"),
)


class EngineProbe:
    """One engine's answers, asked on first use (blocking) and kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probed = False
        self._host_cpus: int | None = None
        self._disk_unsupported: str | None = None
        #: A note per limit the engine cannot enforce, for every sandbox's handle.
        self.notes: tuple[str, ...] = ()

    def probe(self, client: docker.DockerClient) -> tuple[int | None, str | None]:
        """``(the engine's CPU count, why it cannot limit disk or None)``, asked once."""
        with self._lock:
            if self._probed:
                return self._host_cpus, self._disk_unsupported
        info = client.info()
        missing = [(key, what) for key, what in _ENGINE_LIMITS if info.get(key) is False]
        driver = info.get("Driver") or "unknown"
        backing = (
            dict(info.get("DriverStatus") or []).get("Backing Filesystem")
            or "an unknown filesystem"
        )
        if driver == "overlay2":
            reason = (
                None
                if backing == "xfs"
                else f"storage driver overlay2 on {backing} has no project quota"
            )
        elif driver in _QUOTA_DRIVERS:
            reason = None
        else:
            reason = f"storage driver {driver} cannot limit a container's disk"
        with self._lock:
            if not self._probed:
                self._probed = True
                self._host_cpus = info.get("NCPU") or None
                self._disk_unsupported = reason
                self.notes = tuple(
                    f"{what} not enforced: the Docker host does not support it (docker info: {key} false)"
                    for key, what in missing
                )
            return self._host_cpus, self._disk_unsupported

    def disk_refused(self, reason: str) -> None:
        """The driver looked able to limit disk but refused (overlay2 on XFS without pquota)."""
        with self._lock:
            self._disk_unsupported = reason
