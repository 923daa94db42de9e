"""The contract a runtime plugin implements: :class:`Runtime`.

A runtime holds each sandbox in one *unit* (a Docker container, a Nomad job) with the rocklet
listening inside it. It creates, starts, stops, removes, inspects, lists and optionally snapshots
units; it never runs commands or moves files (the engine talks to the rocklet for that). Plugins
register runtime classes with the ``rock_register_runtimes`` hook; the engine instantiates the one
its configuration names and drives it from async code.

Blocking client libraries must be called through :func:`anyio.to_thread.run_sync`, never on the
event loop.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import attrs

from rock_core.errors import NotSupported
from rock_core.snapshot_image import SnapshotImage

if TYPE_CHECKING:
    from typing import Self

    from rock_core.egress import EgressPolicy
    from rock_core.models import Phase, RuntimeStatus, SandboxSpec, UnitState, UnitStats
    from rock_core.rocklet_delivery import RockletDelivery

    # ``converter=tuple`` with its element type told to mypy (see rock_core.models).
    def _strings(items: Iterable[str], /) -> tuple[str, ...]: ...

else:
    _strings = tuple

#: Called by a runtime as a phase of a sandbox's start advances: ``on_phase("image_pull", Phase(...))``.
PhaseCallback = Callable[[str, "Phase"], None]

__all__ = [
    "NotSupported",
    "PhaseCallback",
    "Runtime",
    "RuntimeCapabilities",
    "SnapshotImage",
    "UnitHandle",
]


@attrs.frozen
class RuntimeCapabilities:
    """What a runtime can do, as it declares it (:attr:`Runtime.capabilities`).

    The engine refuses a request the runtime cannot serve, naming the runtime and the
    capability, and rock-core's conformance suite runs the checks each capability calls for.

    :param assign: it can name a started warm-pool unit after the sandbox that claims it
        (:meth:`Runtime.assign`; Docker renames the container). Warm pools work without it: the
        engine records which unit serves which sandbox.
    :param snapshot: it can snapshot and restore units (:meth:`Runtime.snapshot`): archiving.
    :param keeps_files_across_stop: a stopped unit keeps its files, and starts again with them:
        ``restart()`` of a stopped sandbox.
    :param watch: it reports units that stop or vanish as it happens (:meth:`Runtime.watch`).
    :param disk_usage: it measures its units' writable layers (:meth:`Runtime.disk_usage`).
    :param network_modes: the ``network`` values a sandbox may ask for (the first is the default).
    :param stats: it samples its units' resource use (:meth:`Runtime.stats`): monitoring.
    :param network_groups: sandboxes may join a ``network_group`` (a network of their own,
        shared by the group's sandboxes only); the engine refuses one otherwise.
    :param snapshot_image: it can keep a unit's files as an image on its node and start units
        from it (:meth:`Runtime.snapshot_image`): a sandbox's ``snapshot()`` and ``fork()``.
    :param pause: it can freeze a running unit's processes, memory kept, and thaw them
        (:meth:`Runtime.pause`, :meth:`Runtime.resume`): ``pause()`` of a sandbox.
    :param egress: it enforces a sandbox's egress policy on the host (:meth:`Runtime.set_egress`);
        the engine refuses a policy otherwise.
    :param snapshot_reuse: it tells whether a unit's files are still those of a snapshot made of
        it (:meth:`Runtime.snapshot_unchanged`): a fork of an unchanged sandbox starts from that
        snapshot, with no new copy.
    """

    assign: bool
    snapshot: bool
    keeps_files_across_stop: bool
    watch: bool
    disk_usage: bool
    network_modes: tuple[str, ...]
    snapshot_image: bool = False
    stats: bool = False
    network_groups: bool = True
    pause: bool = False
    egress: bool = False
    snapshot_reuse: bool = False

    def missing(self, capability: str, runtime: str) -> str:
        """Words for a refusal: ``"runtime 'nomad' cannot keep a sandbox's files across a stop"``."""
        return f"runtime {runtime!r} cannot {_CAN[capability]} (capability {capability})"


_SANDBOX_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")

_CAN = {
    "assign": "name a claimed warm-pool unit after its sandbox",
    "snapshot": "snapshot sandboxes, so it cannot archive them",
    "keeps_files_across_stop": "keep a sandbox's files across a stop, so a stopped sandbox cannot be restarted",
    "snapshot_image": "keep snapshots of sandboxes' files as images (snapshot, fork)",
    "watch": "report units that stop as it happens",
    "disk_usage": "measure its units' disk use",
    "network_modes": "give sandboxes that network",
    "stats": "measure its units' resource use",
    "network_groups": "put sandboxes in a network group",
    "pause": "pause sandboxes (freeze their processes, memory kept)",
    "egress": "enforce an egress policy (where a sandbox may connect)",
    "snapshot_reuse": "tell whether a sandbox's files changed since a snapshot of it",
}


@attrs.frozen
class UnitHandle:
    """An opaque reference to the unit that holds one sandbox.

    Only the runtime named by :attr:`runtime` interprets :attr:`unit_id`; everyone else stores
    the handle and passes it back.

    :param runtime: the registered name of the runtime that made the unit.
    :param unit_id: the runtime's id for the unit (a container id, a Nomad job id, ...).
    :param sandbox_id: the sandbox the unit holds.
    """

    runtime: str
    unit_id: str
    sandbox_id: str
    #: What the runtime could not honour of the spec, in words for the user
    #: (``"disk limit 50.00g not enforced: ..."``); the engine shows them in the status.
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: The unit's labels, as :meth:`Runtime.list` found them (empty on a handle from ``create``).
    labels: Mapping[str, str] = attrs.field(factory=dict, eq=False, hash=False)
    #: The unit's state as :meth:`Runtime.list` found it (``None``: the runtime did not say).
    state: UnitState | None = attrs.field(default=None, eq=False, hash=False)
    #: The hardening the runtime applied, for the sandbox's status: ``{"pids_limit": 4096,
    #: "no_new_privileges": True, "capabilities": [...], "nofile_limit": ..., "network": ...}``.
    security: Mapping[str, Any] = attrs.field(factory=dict, eq=False, hash=False)


class Runtime(abc.ABC):
    """Abstract base of every runtime; subclasses implement the async methods below.

    The engine builds a runtime with keyword arguments taken from the runtime's configuration
    section (``cls(**settings)``), uses it as an async context manager (or calls :meth:`aclose`),
    and may call its methods concurrently for different sandboxes.

    A unit that no longer exists is not an error for :meth:`inspect` (it reports
    ``UnitState.MISSING``), :meth:`stop` or :meth:`remove` (nothing to do); the other methods
    raise :class:`~rock_core.errors.SandboxNotFound`. A backend failure raises
    :class:`~rock_core.errors.RuntimeFailure` (or :class:`~rock_core.errors.ImagePullFailed`),
    ``from`` the backend's exception.
    """

    #: The name the runtime is registered and configured under (``"docker"``, ``"nomad"``).
    name: ClassVar[str]
    #: Whether a stopped unit keeps its files and can be started again with them (declared).
    keeps_files_across_stop: ClassVar[bool] = False
    #: The ``network`` modes a sandbox may ask for; the first is what a spec without one gets.
    network_modes: ClassVar[tuple[str, ...]] = ("bridge",)
    #: Whether sandboxes may join a ``network_group`` (``runtime_options["network_group"]``):
    #: a runtime that cannot give a group a network of its own, apart from every other
    #: sandbox, declares ``False`` and the engine refuses the field, naming the runtime.
    network_groups: ClassVar[bool] = True

    def sandbox_id_problem(self, sandbox_id: str) -> str | None:
        """Why ``sandbox_id`` cannot name a sandbox on this runtime, in words; ``None`` if it can.

        The default is what any runtime can carry and any URL path holds as one segment: 1 to
        128 letters, digits, ``_``, ``.`` and ``-``, starting with a letter or digit. A runtime
        with stricter names (a Nomad job id, a Kubernetes pod name) narrows it.
        """
        if _SANDBOX_ID.match(sandbox_id):
            return None
        return "letters, digits, '_', '.', '-'; starting with a letter or digit; at most 128 characters"

    @property
    def capabilities(self) -> RuntimeCapabilities:
        """What this runtime can do: the optional methods it implements, and what it declares."""
        return RuntimeCapabilities(
            assign=self.can_assign,
            snapshot=self.can_snapshot,
            keeps_files_across_stop=self.keeps_files_across_stop,
            snapshot_image=type(self).snapshot_image is not Runtime.snapshot_image,
            watch=type(self).watch is not Runtime.watch,
            disk_usage=type(self).disk_usage is not Runtime.disk_usage,
            network_modes=tuple(self.network_modes),
            stats=self.can_measure,
            network_groups=self.network_groups,
            pause=self.can_pause,
            egress=type(self).set_egress is not Runtime.set_egress,
            snapshot_reuse=type(self).snapshot_unchanged is not Runtime.snapshot_unchanged,
        )

    @abc.abstractmethod
    async def create(
        self,
        spec: SandboxSpec,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
    ) -> UnitHandle:
        """Create the unit for ``spec`` without starting it and return its handle.

        ``spec.sandbox_id`` is set (the engine chooses an id before calling). ``labels`` go on
        the unit as given (the engine passes ``rock.sandbox_id``, ``rock.engine`` and
        ``rock.owner``), so that :meth:`list` finds the unit again after a restart.
        The runtime puts the rocklet into the unit and makes it the unit's command, with
        ``rocklet_token`` (the sandbox's own random secret) in its environment variable
        ``ROCK_ROCKLET_TOKEN`` (:data:`rock_core.rocklet.server.TOKEN_ENV`): the rocklet then
        refuses every call that does not carry it. Never log it or put it in a label.

        The unit is hardened as far as the runtime can: at most ``spec.pids_limit`` processes,
        no privilege gain (``no-new-privileges``), only the capabilities a sandbox needs plus
        ``spec.cap_add``, no path to other sandboxes' units; what it applied goes into the
        handle's ``security``, and what it could not into its ``notes``.

        ``on_phase`` is told of the ``image_pull`` phase as it advances (``running``, then
        ``success`` with e.g. "use cached image" or ``failed`` with "Failed to pull image ...").
        Whatever the runtime cannot honour of ``spec`` (a disk limit the storage driver cannot
        enforce) goes into the handle's ``notes``, never silently dropped.
        """

    @abc.abstractmethod
    async def start(
        self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None
    ) -> RuntimeStatus | None:
        """Start the unit; return once the runtime has started it (not when the rocklet answers).

        A runtime that knows the started unit's status without asking (its rocklet's address
        was fixed at create) may return it, and saves the engine an :meth:`inspect` per start;
        ``None`` makes the engine inspect.

        A runtime that places units on other hosts may get the image only now (a cluster node
        pulls it when the unit is placed there): it then tells ``on_phase`` of ``image_pull`` as
        :meth:`create` would, and raises :class:`~rock_core.errors.ImagePullFailed` when the
        image cannot be had. A unit that cannot be placed at all raises
        :class:`~rock_core.errors.RuntimeFailure` with the runtime's own reason.
        """

    @abc.abstractmethod
    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """Stop the unit: ask it to end, and kill it after ``timeout`` seconds.

        Stopping a unit that is already stopped does nothing.
        """

    @abc.abstractmethod
    async def remove(self, handle: UnitHandle) -> None:
        """Remove the unit and the resources it holds; a unit that is already gone is not an error."""

    async def discard(self, handles: Sequence[UnitHandle]) -> None:
        """Have ``handles`` removed without waiting for it: the engine is exiting (its process
        may end right after) and their sandboxes are already ended.

        A runtime whose own service can finish the removals after the engine is gone hands the
        requests over and returns (Docker: dockerd completes a removal whose caller left).
        The default removes them all, concurrently, and returns when they are gone.
        """

        async def remove(handle: UnitHandle) -> None:
            try:
                await self.remove(handle)
            except Exception:  # noqa: BLE001 - one unit's failure must not keep the others
                pass

        async with anyio.create_task_group() as tg:
            for handle in handles:
                tg.start_soon(remove, handle)

    @abc.abstractmethod
    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """Report what the runtime knows of the unit: its state, exit code, OOM kill, rocklet address.

        A unit that is gone is reported with state ``UnitState.MISSING``, so that the engine's
        reconciler can mark its sandbox stopped with a reason.
        """

    @abc.abstractmethod
    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """Return the handles of all units (running or not) whose labels include every item of ``labels``.

        The engine calls this after a restart to find the units its store knows about, to find
        units whose owning process died, and once per reconcile interval to see which units
        still run. Each handle carries the unit's ``labels`` and, where the listing says it
        (cheaply), its ``state``; the engine inspects only units that are not running.
        """

    @abc.abstractmethod
    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """Return the unit's output (the rocklet's stdout and stderr): the last ``tail`` lines, or all."""

    def watch(self, labels: Mapping[str, str]) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        """Yield ``(handle, status)`` each time a unit carrying ``labels`` stops or disappears.

        Lets the engine see a container that exits, is OOM-killed or is removed behind its back
        within moments instead of at its next reconcile. Optional: the default raises
        :class:`NotSupported`, and the engine then polls :meth:`inspect`.
        """
        raise NotSupported(f"runtime {self.name!r} cannot watch its units", attempted="watch")

    async def prepare(self, spec: SandboxSpec, on_phase: PhaseCallback | None = None) -> None:
        """Get ready to create units of ``spec`` soon: pull its image as its pull policy says.

        ROCK's warm-up calls it ahead of the starts that need the image. Optional: the default
        does nothing (a runtime that has nothing to prepare).

        :raises ImagePullFailed: the image cannot be had.
        """

    async def assign(self, handle: UnitHandle, sandbox_id: str) -> UnitHandle:
        """Give a started unit made for a warm pool to the sandbox ``sandbox_id``; return its new handle.

        The unit was created (with a placeholder id as its ``spec.sandbox_id``), started and is
        running; after this call the runtime knows it by ``sandbox_id`` exactly as if it had been
        created for that sandbox (the Docker runtime renames the container). Its labels stay as
        they were. Optional: the default raises :class:`NotSupported`, and a claimed unit then
        keeps its pool name (the engine records which unit serves which sandbox either way).

        :raises SandboxAlreadyExists: another unit already goes by ``sandbox_id``.
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot assign pooled units",
            sandbox_id=sandbox_id,
            attempted="assign",
        )

    @property
    def can_assign(self) -> bool:
        """Whether this runtime implements :meth:`assign` (names claimed pool units after their sandbox)."""
        return type(self).assign is not Runtime.assign

    async def stats(self, labels: Mapping[str, str]) -> Mapping[str, UnitStats]:
        """A sample of the resource use of every running unit carrying ``labels``: ``{unit_id:
        UnitStats}``, measured by the runtime (cgroups, its engine's statistics), never by
        waking the units' rocklets.

        One call covers every unit, and its cost must stay small: the engine calls it every
        ``stats_interval`` seconds. Optional: the default raises :class:`NotSupported`, and
        sandboxes then show no usage.
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot measure its units' resource use", attempted="stats"
        )

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        """The labels of ``image`` as the node has it (``None``: not there, or cannot tell)."""
        return None

    async def unit_image_labels(self, handle: UnitHandle) -> Mapping[str, str] | None:
        """The labels of the image ``handle``'s unit was made from, found by what the unit holds
        (Docker: the image id), not by a name that may name another image since (``None``:
        cannot tell). The engine asks it of a tenant's new unit before starting it."""
        return None

    @property
    def can_measure(self) -> bool:
        """Whether this runtime implements :meth:`stats`."""
        return type(self).stats is not Runtime.stats

    async def disk_usage(self, labels: Mapping[str, str]) -> Mapping[str, int]:
        """Bytes written so far by each running unit carrying ``labels`` whose disk limit the
        runtime cannot enforce itself: ``{unit_id: bytes}`` (its writable layer).

        One call covers every unit, so its cost does not grow with the engine's polling. The
        engine polls it and stops a sandbox that passed its ``disk`` limit. Units whose limit
        the runtime enforces (a storage quota) may be left out. Optional: the default raises
        :class:`NotSupported`, and such limits then stay unenforced (the handle's notes say so).
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot measure its units' disk use", attempted="disk_usage"
        )

    async def pause(self, handle: UnitHandle) -> None:
        """Freeze every process of the running unit (no CPU used; memory and processes kept)
        until :meth:`resume`. Optional: the default raises :class:`NotSupported`, and the
        engine refuses ``pause()`` naming the capability ``pause``."""
        raise NotSupported(
            f"runtime {self.name!r} cannot pause sandboxes",
            sandbox_id=handle.sandbox_id,
            attempted="pause",
        )

    async def resume(self, handle: UnitHandle) -> None:
        """Thaw a unit :meth:`pause` froze; its processes go on where they were. A unit that
        is not paused is not an error. Optional, with :meth:`pause`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot pause sandboxes",
            sandbox_id=handle.sandbox_id,
            attempted="resume",
        )

    async def set_egress(self, handle: UnitHandle, policy: EgressPolicy | None) -> None:
        """Enforce ``policy`` on the running unit now, replacing what it had (``None``: no
        policy, every rule of the unit removed), on the host, out of the unit's reach, before
        this returns. The unit's rules go with it when it stops or is removed. Optional
        (capability ``egress``): the default raises :class:`NotSupported`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot {_CAN['egress']} (capability egress)",
            sandbox_id=handle.sandbox_id,
            attempted="egress",
        )

    async def sync_egress(self, wanted: Mapping[str, tuple[UnitHandle, EgressPolicy]]) -> None:
        """Make the host's rules match ``wanted`` (``{unit_id: (handle, policy)}``, this engine's
        running units with a policy): put back what is missing (a firewall flushed, a unit whose
        address changed) and remove the rules of units that are gone. Rules of other engines'
        units that still run are left alone. Called every reconcile interval (capability
        ``egress``); the default does nothing."""

    @property
    def can_pause(self) -> bool:
        """Whether this runtime implements :meth:`pause` and :meth:`resume`."""
        return type(self).pause is not Runtime.pause and type(self).resume is not Runtime.resume

    async def snapshot_image(
        self,
        handle: UnitHandle,
        *,
        labels: Mapping[str, str],
        strip_env: Sequence[str],
        changes: bool = False,
        over: SnapshotImage | None = None,
    ) -> SnapshotImage:
        """Keep the unit's files (running or stopped) as an image on its node, labelled with
        ``labels``, whose configuration holds none of the variables ``strip_env`` names (the
        rocklet's secret): its processes are not kept. A running unit may be frozen for the
        copy only. With ``changes``, the answer carries what :meth:`export_snapshot_image`
        needs. ``over``: the sandbox's latest snapshot, which the runtime may build on (copying
        only what changed since, when it was made of this very unit) or ignore. Optional
        (capability ``snapshot_image``): the default raises :class:`NotSupported`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot {_CAN['snapshot_image']} (capability snapshot_image)",
            sandbox_id=handle.sandbox_id,
            attempted="snapshot",
        )

    async def export_snapshot_image(
        self, image: SnapshotImage, *, unit_labels: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """The files of ``image`` (a :meth:`snapshot_image` answer made with ``changes``) over
        its base image, with its configuration, as a stream of bytes for the archive store
        (the base image itself is not in it). A unit the runtime makes for a while to read it
        carries ``unit_labels`` (so that the engine's sweep finds one a dead process left).
        Optional (with ``snapshot_image``): the default raises :class:`NotSupported`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot keep snapshots in the archive store",
            attempted="snapshot",
        )

    async def import_snapshot_image(
        self,
        data: AsyncIterable[bytes],
        *,
        labels: Mapping[str, str],
        unit_labels: Mapping[str, str] | None = None,
    ) -> SnapshotImage:
        """Make a snapshot image on this node again from a stream :meth:`export_snapshot_image`
        made (its base image had as a start has it), labelled with ``labels`` over those it
        was made with; a unit made for a while to build it carries ``unit_labels``. Optional (with ``snapshot_image``): the default raises
        :class:`NotSupported`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot start from snapshots in the archive store",
            attempted="start",
        )

    async def snapshot_unchanged(self, handle: UnitHandle, image: SnapshotImage) -> bool:
        """Whether the unit's files are still those ``image`` (a :meth:`snapshot_image` of this
        very unit, as :meth:`snapshot_images` lists it) kept; ``False`` when it cannot tell.
        Optional (capability ``snapshot_reuse``): the default raises :class:`NotSupported`."""
        raise NotSupported(self.capabilities.missing("snapshot_reuse", self.name), attempted="fork")

    async def snapshot_images(self, labels: Mapping[str, str]) -> Sequence[SnapshotImage]:
        """The snapshots :meth:`snapshot_image` made whose labels include every item of ``labels``."""
        return []

    async def delete_snapshot_image(self, image_id: str) -> None:
        """Delete a snapshot; one already gone is not an error.

        :raises BadRequestRockError: sandboxes still use it.
        """

    async def tag_image(
        self,
        image_id: str,
        reference: str,
        *,
        untag: str | None = None,
        replaceable: Mapping[str, str] | None = None,
    ) -> None:
        """Give the image ``image_id`` (one :meth:`snapshot_image` made) the name ``reference``
        (``repository:tag``) on its node, and take the name ``untag`` off it: ROCK's commit.
        An image already of that name is renamed only if its labels hold all of
        ``replaceable`` (:class:`BadRequestRockError` otherwise). Optional (with
        ``snapshot_image``): the default raises :class:`NotSupported`."""
        raise NotSupported(
            f"runtime {self.name!r} cannot tag images (ROCK's commit)", attempted="commit"
        )

    async def push_image(self, reference: str, *, username: str, password: str) -> None:
        """Push the image ``reference`` to the registry it names, logged in with ``username``
        and ``password`` when given (never kept). Optional: the default raises
        :class:`NotSupported`.

        :raises RockError: the login or the push failed (the registry's words).
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot push images to a registry", attempted="commit"
        )

    @property
    def can_snapshot(self) -> bool:
        """Whether this runtime implements :meth:`snapshot` and :meth:`restore` (so archiving works)."""
        return (
            type(self).snapshot is not Runtime.snapshot
            and type(self).restore is not Runtime.restore
        )

    async def snapshot(self, handle: UnitHandle) -> AsyncIterator[bytes]:
        """Snapshot the stopped unit's filesystem and return it as a stream of bytes.

        The bytes are opaque to everyone but :meth:`restore` of the same runtime. Optional: the
        default raises :class:`NotSupported`, and archiving is then unavailable.
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot snapshot sandboxes, so it cannot archive them",
            sandbox_id=handle.sandbox_id,
            attempted="snapshot",
        )

    async def snapshot_logs(self, handle: UnitHandle) -> AsyncIterator[bytes]:
        """The stopped unit's whole output (what :meth:`logs` returns) as a stream of bytes: the
        ``logs`` part of its archive, kept beside :meth:`snapshot`'s ``rootfs`` part.

        The default reads :meth:`logs` at once and yields it encoded; a runtime whose units
        write much should stream it.
        """
        text = await self.logs(handle)

        async def chunks() -> AsyncIterator[bytes]:
            yield text.encode("utf-8")

        return chunks()

    async def restore(
        self,
        spec: SandboxSpec,
        snapshot: AsyncIterable[bytes],
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
    ) -> UnitHandle:
        """Create a new unit for ``spec`` from a stream :meth:`snapshot` produced; return its handle.

        Like :meth:`create`: labelled with ``labels``, its rocklet given ``rocklet_token``, not started. Optional: the default raises
        :class:`NotSupported`.
        """
        raise NotSupported(
            f"runtime {self.name!r} cannot restore sandboxes from snapshots",
            sandbox_id=spec.sandbox_id,
            attempted="restore",
        )

    #: The rocklet this runtime brings into its units, as the engine prepared it
    #: (:meth:`use_rocklet`); ``None`` until then (a runtime used alone prepares its own).
    rocklet_delivery: RockletDelivery | None = None

    def use_rocklet(self, delivery: RockletDelivery) -> None:
        """Take the engine's rocklet: the file to mount (``delivery.path``) or the URL and
        checksum units on other hosts fetch it by. Called by the engine when it opens, before
        any unit is made. The default keeps it in :attr:`rocklet_delivery`."""
        self.rocklet_delivery = delivery

    async def aclose(self) -> None:
        """Release the runtime's clients and connections. Idempotent; the default holds nothing."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
