"""rock's runtime on a local Docker engine: one container per sandbox.

Each sandbox is a container named after its sandbox id, labelled as the engine asks, whose
command starts the rocklet (``rocklet.pyz``, bind-mounted read-only at ``/rock``) with the image's
own ``python3`` and the sandbox's secret. The rocklet serves on a unix socket this runtime
makes before each start, in a folder of ``socket_dir`` that no container mounts, and hands in
over a one-shot socket in a folder mounted read-only at ``/rock-run``
(:mod:`rock_core.rocklet_handoff`): the sandbox can neither swap what the engine connects to nor
write anything on the host. Ports 22555 (rocklet) and 8080 are not published by Docker but listed
for the engine to forward (``RuntimeStatus.forwarded_ports``), unless ``publish_ports`` asks for
Docker's publishing on 127.0.0.1. Memory is a hard limit without swap; CPUs are a quota (or
shares plus a quota with ``limit_cpus``); disk is limited with ``--storage-opt size=`` where the
storage driver can, and otherwise the handle says so in a note and :meth:`DockerRuntime.disk_usage`
lets the engine watch it.

Containers are hardened (docs/security.md): a pids limit, ``no-new-privileges``, a reduced
capability set, an open-files limit, and rock's own bridge network with inter-container traffic
disabled, so no sandbox can open a connection to another; sandboxes of one network group share a
network of their own instead, one per tenant and group name (``rock-group-<id>``, the id from
:func:`rock_core.tenancy.group_network_id`).

The docker SDK blocks, so every call runs in a worker thread (:func:`anyio.to_thread.run_sync`)
under the runtime's own :class:`anyio.CapacityLimiter`, and one :class:`docker.DockerClient`
with a connection pool as large as that limiter serves them all.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import tempfile
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.to_thread
import attrs
import docker
import docker.errors

from rock_core.errors import ImagePullFailed, InvalidParameter, RuntimeFailure
from rock_core.models import (
    RuntimeStatus,
    SandboxSpec,
    UnitStats,
)
from rock_core.rocklet_delivery import default_rocklet_dir
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle
from rock_docker._commit import SnapshotImages
from rock_docker._container import (
    NETWORKS,
    explain_start_failure,
)
from rock_docker._creation import ContainerMaker
from rock_docker._egress import EgressRules
from rock_docker._engine_probe import EngineProbe
from rock_docker._errors import DOCKER_ERRORS, explain, translate
from rock_docker._events import EventWatch
from rock_docker._images import UnitImages
from rock_docker._network_leave import leave_networks
from rock_docker._networks import Networks
from rock_docker._observation import handle_of, image_of, inspect_unit
from rock_docker._options import DockerOptions
from rock_docker._raw_api import close_client, start_container
from rock_docker._rocklet_sockets import RockletSockets
from rock_docker._snapshot import (
    APPLY_DELETIONS,
    SnapshotReader,
    ThreadedIterator,
    batched,
    plan_snapshot,
    snapshot_frames,
    upload_snapshot,
)
from rock_docker._stats import CgroupFinder, sample_stats
from rock_docker.reaper import spawn_reaper

log = logging.getLogger("rock.docker")

__all__ = ["DockerRuntime", "default_rocklet_dir"]

T = TypeVar("T")

# Docker's rule for container names (rock names each container after its sandbox).
_CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")


def _label_filter(labels: Mapping[str, str]) -> dict[str, list[str]]:
    return {"label": [f"{key}={value}" for key, value in labels.items()]}


class DockerRuntime(SnapshotImages, EgressRules, UnitImages, Runtime):
    """Sandboxes as containers on a Docker engine (the one at ``base_url``, or ``DOCKER_HOST``).

    Built with the keyword arguments :class:`~rock_docker._options.DockerOptions` describes,
    each read and checked by rock-core's converters (a bad one named with its value), and kept
    as :attr:`options`.
    """

    name: ClassVar[str] = "docker"
    keeps_files_across_stop: ClassVar[bool] = True
    network_modes: ClassVar[tuple[str, ...]] = NETWORKS
    #: The constructor takes :class:`DockerOptions`' fields, so an engine names an unknown one.
    __signature__: ClassVar[inspect.Signature] = inspect.signature(DockerOptions)

    def __init__(self, **settings: Any) -> None:
        self.options = DockerOptions(**settings)
        #: The folder of ``rocklet.pyz`` builds (``rocklet_dir``, else the engine's default).
        self.rocklet_dir = (
            Path(self.options.rocklet_dir)
            if self.options.rocklet_dir is not None
            else default_rocklet_dir()
        )
        socket_dir = self.options.socket_dir
        self._sockets = RockletSockets(
            Path(socket_dir)
            if socket_dir is not None
            else Path(tempfile.gettempdir()) / f"rock-{os.getuid()}"
        )
        self._networks = Networks(self.options.isolated_network)
        self._engine = EngineProbe()
        self._limiter = anyio.CapacityLimiter(self.options.max_concurrency)
        self._lock = threading.Lock()  # guards the lazily made client
        self._cgroups = CgroupFinder()  # where containers' cgroup files are (stats)
        self._client: docker.DockerClient | None = None
        self._closed = False
        self._maker = ContainerMaker(
            options=self.options,
            rocklet_dir=self.rocklet_dir,
            sockets=self._sockets,
            networks=self._networks,
            engine=self._engine,
            run=self._run,
            client=self._docker,
            delivery=lambda: self.rocklet_delivery,
        )

    def __repr__(self) -> str:
        return (
            f"DockerRuntime(base_url={self.options.base_url!r}, network={self.options.network!r})"
        )

    @property
    def socket_dir(self) -> Path:
        """The folder of the rocklets' unix sockets (``socket_dir``, else ``$TMPDIR/rock-<uid>``)."""
        return self._sockets.socket_dir

    @property
    def isolated_network(self) -> str | None:
        """The network ``network: bridge`` puts sandboxes on (``None`` until the engine was asked)."""
        return self._networks.isolated

    def sandbox_id_problem(self, sandbox_id: str) -> str | None:
        """A sandbox id is its container's name: Docker's rule for names (which is rock-core's
        default rule: ``[a-zA-Z0-9][a-zA-Z0-9_.-]``, here at most 128 characters)."""
        if _CONTAINER_NAME.match(sandbox_id):
            return None
        return "it names the Docker container: letters, digits, '_', '.', '-'; starting with a letter or digit; at most 128 characters"

    # -- plumbing -------------------------------------------------------------------------------

    def _docker(self) -> docker.DockerClient:
        """The shared client, made on first use (in a worker thread: it asks the engine its version)."""
        with self._lock:
            if self._closed:
                raise RuntimeFailure("the docker runtime is closed", attempted="docker call")
            if self._client is None:
                kwargs: dict[str, Any] = {
                    "timeout": self.options.api_timeout,
                    "max_pool_size": self.options.max_concurrency,
                }
                if self.options.base_url:
                    self._client = docker.DockerClient(base_url=self.options.base_url, **kwargs)
                else:
                    self._client = docker.from_env(**kwargs)
            return self._client

    async def _run(
        self,
        func: Callable[[], T],
        *,
        attempted: str,
        sandbox_id: str | None = None,
        abandon_on_cancel: bool = False,
    ) -> T:
        """Run blocking ``func`` in a worker thread; docker's exceptions become rock's."""
        if self._closed:
            raise RuntimeFailure(
                "the docker runtime is closed", sandbox_id=sandbox_id, attempted=attempted
            )
        try:
            return await anyio.to_thread.run_sync(
                func, limiter=self._limiter, abandon_on_cancel=abandon_on_cancel
            )
        except DOCKER_ERRORS as exc:
            raise translate(exc, sandbox_id=sandbox_id, attempted=attempted) from exc

    # -- create ---------------------------------------------------------------------------------

    async def create(
        self,
        spec: SandboxSpec,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
    ) -> UnitHandle:
        """Pull the image as ``spec.pull`` says, then create the sandbox's container (not started)."""
        return await self._maker.create(
            spec, labels=labels, rocklet_token=rocklet_token, on_phase=on_phase
        )

    async def prepare(self, spec: SandboxSpec, on_phase: PhaseCallback | None = None) -> None:
        """Pull ``spec.image`` as ``spec.pull`` says (what ``create`` would do first)."""
        await self._maker.ensure_image(spec, on_phase)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(
        self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None
    ) -> RuntimeStatus | None:
        """Start the container; return its status when it is known without an inspect (a
        container this runtime created to be reached on a unix socket: the socket's path and
        the ports to forward were fixed at create). The image was had at :meth:`create`, so
        ``on_phase`` hears nothing here.

        A container reached on a unix socket gets a fresh listening socket first, which its
        rocklet takes when it starts; connections made before then wait in its backlog.

        An image without ``/bin/sh`` fails here with the fix when Docker runs the command itself
        (``init=False``); under Docker's init the container starts and exits at once with 127, and
        :meth:`inspect` gives the same fix as its ``error``.
        """

        def start() -> None:
            api = self._docker().api
            self._sockets.offer_listener(api, handle)
            try:
                start_container(api, handle.unit_id)
            except docker.errors.NotFound:
                self._sockets.cancel(handle.unit_id)
                raise
            except docker.errors.APIError as exc:
                self._sockets.cancel(handle.unit_id)
                message = explain_start_failure(image_of(api, handle.unit_id), explain(exc))
                if message is None:
                    raise
                raise RuntimeFailure(
                    message, sandbox_id=handle.sandbox_id, attempted="start"
                ) from exc
            except BaseException:
                self._sockets.cancel(handle.unit_id)
                raise

        await self._run(start, attempted="start", sandbox_id=handle.sandbox_id)
        await self._drop_stale_egress(handle)
        return self._sockets.known_status(handle.unit_id)

    async def assign(self, handle: UnitHandle, sandbox_id: str) -> UnitHandle:
        """``docker rename``: a warm-pool container takes the sandbox's id as its name.

        Its ports, labels and running rocklet are untouched; from now on :meth:`list` and the
        event stream report it under ``sandbox_id``.
        """

        def rename() -> None:
            self._docker().api.rename(handle.unit_id, sandbox_id)

        await self._run(rename, attempted="assign", sandbox_id=sandbox_id)
        return attrs.evolve(handle, sandbox_id=sandbox_id, labels={})

    async def pause(self, handle: UnitHandle) -> None:
        """``docker pause``: the cgroup freezer stops every process of the container (memory
        kept); a container already paused is fine."""

        def pause() -> None:
            try:
                self._docker().api.pause(handle.unit_id)
            except docker.errors.APIError as exc:
                if "already paused" not in str(exc):
                    raise

        await self._run(pause, attempted="pause", sandbox_id=handle.sandbox_id)

    async def resume(self, handle: UnitHandle) -> None:
        """``docker unpause``; a container that is not paused is fine."""

        def unpause() -> None:
            try:
                self._docker().api.unpause(handle.unit_id)
            except docker.errors.APIError as exc:
                if "not paused" not in str(exc):
                    raise

        await self._run(unpause, attempted="resume", sandbox_id=handle.sandbox_id)

    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """``docker stop``: SIGTERM, then SIGKILL after ``timeout`` seconds; a missing container is fine."""
        seconds = max(0, math.ceil(timeout))

        def stop() -> None:
            try:
                self._docker().api.stop(handle.unit_id, timeout=seconds)
            except docker.errors.NotFound:
                pass

        await self._run(stop, attempted="stop", sandbox_id=handle.sandbox_id)
        self._sockets.cancel(handle.unit_id)  # a rocklet that never took its socket
        await self._forget_egress(handle)

    async def remove(self, handle: UnitHandle) -> None:
        """``docker rm -f -v``: the container and its anonymous volumes; a missing container is
        fine. A group's network goes with its last member. The container is stopped first, one
        at a time, so it leaves its networks alone (:mod:`rock_docker._network_leave`: Docker
        20.10's deadlock)."""
        network = self._networks.network_of(handle)

        def remove() -> None:
            api = self._docker().api
            leave_networks(api, handle.unit_id)
            try:
                api.remove_container(handle.unit_id, v=True, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or "already in progress" not in explain(exc):
                    raise

        # Its rules go before its address is free to be handed to another container.
        await self._forget_egress(handle)
        # Cancelled (an engine closing), the call is abandoned, not awaited: dockerd finishes it
        # or the reaper redoes it; a close must not wait for a dockerd that is busy with exits.
        await self._run(
            remove, attempted="remove", sandbox_id=handle.sandbox_id, abandon_on_cancel=True
        )
        if network is not None:
            unused = network
            await self._run(
                lambda: self._networks.remove_if_unused(self._docker().api, unused),
                attempted="remove",
                sandbox_id=handle.sandbox_id,
            )
        self._sockets.forget(handle)

    async def discard(self, handles: Sequence[UnitHandle]) -> None:
        """Hand the removal of ``handles`` to a reaper process and return at once.

        The reaper (:mod:`rock_docker.reaper`, in a session of its own, so it outlives this
        process) removes them a few at a time and retries what dockerd refuses for now. Sending
        dockerd a thousand removals at once instead left it crawling on a 2-core host, with some
        containers stuck in "Removal In Progress". Socket directories go at once; the networks
        of their network groups go with the reaper once no container uses them (else a trainer
        that exits with a group running leaves its network behind, and Docker runs out of
        address pools for new ones)."""
        if not handles:
            return
        ids = [handle.unit_id for handle in handles]
        networks = {n for n in map(self._networks.network_of, handles) if n is not None}
        await self._forget_egress_of(handles)  # before their addresses are free
        try:
            await anyio.to_thread.run_sync(
                lambda: spawn_reaper(ids, base_url=self.options.base_url, networks=networks)
            )
        except OSError as exc:
            log.warning(
                "could not start the reaper (%s); removing %d container(s) here", exc, len(handles)
            )
            await super().discard(handles)
        for handle in handles:
            self._sockets.forget(handle)

    # -- observation ----------------------------------------------------------------------------

    async def stats(self, labels: Mapping[str, str]) -> Mapping[str, UnitStats]:
        """A sample of every running container carrying ``labels``: one ``docker ps`` call, then
        each container's cgroup files read on this host (``_stats``); a container whose cgroup is
        not here (a remote daemon) is asked through the API (``stats``, one-shot)."""
        return await self._run(
            lambda: self._with_refusals(
                sample_stats(self._docker().api, self._cgroups, _label_filter(labels))
            ),
            attempted="stats",
        )

    async def disk_usage(self, labels: Mapping[str, str]) -> Mapping[str, int]:
        """Bytes in the writable layer of each running container carrying ``labels``, in one
        ``docker ps --size`` call (its only mount from the host, ``/rock-run``, is read-only).

        Empty when the storage driver enforces disk limits itself.
        """
        filters = {**_label_filter(labels), "status": ["running"]}

        def usage() -> dict[str, int]:
            if self._engine.probe(self._docker())[1] is None:
                return {}
            rows = self._docker().api.containers(all=False, size=True, filters=filters)
            return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}

        return await self._run(usage, attempted="disk_usage")

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """The container's state, exit code, OOM kill, times and published ports (``missing`` if gone)."""
        return await self._run(
            lambda: inspect_unit(
                self._docker().api, handle.unit_id, publish_host=self.options.publish_host
            ),
            attempted="inspect",
            sandbox_id=handle.sandbox_id,
            abandon_on_cancel=True,
        )

    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """Every container, running or not, carrying all of ``labels``."""

        def list_units() -> list[UnitHandle]:
            rows = self._docker().api.containers(all=True, filters=_label_filter(labels))
            return [handle_of(self.name, row) for row in rows]

        return await self._run(list_units, attempted="list")

    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """The container's stdout and stderr: the last ``tail`` lines, or everything."""

        def logs() -> bytes:
            data: bytes = self._docker().api.logs(
                handle.unit_id,
                stdout=True,
                stderr=True,
                tail="all" if tail is None else max(0, tail),
            )
            return data

        data = await self._run(logs, attempted="logs", sandbox_id=handle.sandbox_id)
        return data.decode("utf-8", "replace")

    def watch(self, labels: Mapping[str, str]) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        """Docker's ``die``, ``oom`` and ``destroy`` events of containers carrying ``labels``.

        Yields ``(handle, status)``: the container's status after a ``die`` (``exited``, with
        its exit code), after an ``oom`` (``oom_killed`` set, even while it still runs: the
        kernel killed a process inside it) and ``missing`` after a ``destroy``. Events from
        the moment of this call on are delivered, even if iteration starts later. Close the
        iterator with ``aclose()`` (or cancel the task reading it) to end the subscription.
        """
        return EventWatch(self, labels)

    # -- archiving ------------------------------------------------------------------------------

    async def snapshot(self, handle: UnitHandle) -> AsyncIterator[bytes]:
        """What the stopped sandbox changed on top of its image, as a stream (see ``_snapshot``).

        Files it added or changed (with owners, modes, times, extended attributes; symlinks as
        links) and the paths it deleted, never the image itself: the stream is the written
        bytes plus some 1 KiB a path. Two Docker calls before this returns (inspect, the list of
        changes); then one archive read per added tree or changed path, as the stream is read,
        each in a worker thread, a frame (about 1 MiB) at a time. Close the stream
        (``aclose()``) to stop early.

        :raises RuntimeFailure: the container is running (stop it first), or Docker failed.
        :raises SandboxNotFound: the container is gone.
        """

        def plan() -> Generator[bytes, None, None]:
            api = self._docker().api
            return snapshot_frames(
                api,
                handle.unit_id,
                plan_snapshot(api, handle.unit_id, sandbox_id=handle.sandbox_id),
            )

        frames = await self._run(plan, attempted="snapshot", sandbox_id=handle.sandbox_id)
        return ThreadedIterator(
            frames, lambda step: self._run(step, attempted="snapshot", sandbox_id=handle.sandbox_id)
        )

    async def snapshot_logs(self, handle: UnitHandle) -> AsyncIterator[bytes]:
        """The container's whole output (stdout and stderr, in order), streamed from Docker."""

        def open_logs() -> Iterator[bytes]:
            return iter(
                self._docker().api.logs(
                    handle.unit_id, stdout=True, stderr=True, stream=True, follow=False
                )
            )

        chunks = await self._run(open_logs, attempted="snapshot_logs", sandbox_id=handle.sandbox_id)
        return ThreadedIterator(
            batched(chunks),
            lambda step: self._run(step, attempted="snapshot_logs", sandbox_id=handle.sandbox_id),
        )

    async def restore(
        self,
        spec: SandboxSpec,
        snapshot: AsyncIterable[bytes],
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
    ) -> UnitHandle:
        """A container for ``spec`` made as :meth:`create` makes one (the same labels, limits,
        hardening and secret; fresh ports and socket), with the snapshot's changes put back:
        its files in place before this returns, its deletions done by the container when it
        starts, before its rocklet listens. Not started.

        The image is had by ``spec.pull`` like a start's. A snapshot taken on another image id
        than the one the engine has now (a tag moved) is restored on the new one, with a note.

        :raises ImagePullFailed: the image is gone and the pull policy cannot bring it back; the
            message names the image.
        :raises SnapshotCorrupt: the bytes are not a whole snapshot of this runtime (cut short,
            corrupted); no container is left.
        """
        sandbox_id = spec.sandbox_id
        reader = SnapshotReader(snapshot, sandbox_id=sandbox_id)
        header = await reader.header()
        if header["image"] != spec.image:
            raise InvalidParameter(
                f"image: sandbox {sandbox_id} was snapshotted on image {header['image']}, not {spec.image}; "
                "its changes only make sense on top of that image",
                field="image",
                value=spec.image,
                sandbox_id=sandbox_id,
                attempted="restore",
            )
        try:
            handle = await self._maker.create(
                spec,
                labels=labels,
                rocklet_token=rocklet_token,
                prelude=APPLY_DELETIONS if header.get("deleted") else "",
                attempted="restore",
            )
        except ImagePullFailed as exc:
            raise ImagePullFailed(
                f"cannot restore sandbox {sandbox_id}: {exc.message}",
                sandbox_id=sandbox_id,
                attempted="restore",
            ) from exc
        try:
            image_id = await self._run(
                lambda: self._docker().api.inspect_image(spec.image).get("Id") or "",
                attempted="restore",
                sandbox_id=sandbox_id,
            )
            notes = list(handle.notes)
            if header.get("image_id") and image_id != header["image_id"]:
                notes.append(
                    f"image {spec.image} is now {image_id[:19]}, not {str(header['image_id'])[:19]} as when the sandbox "
                    "was archived: its changes were put on top of the new image"
                )
            await self._put_changes(handle, reader)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.remove(handle)
            raise
        return attrs.evolve(handle, notes=tuple(notes))

    async def _put_changes(self, handle: UnitHandle, reader: SnapshotReader) -> None:
        """Stream the snapshot's tar into the created container (see
        :func:`~rock_docker._snapshot.upload_snapshot`); the caller removes the container when
        this fails."""
        stop = threading.Event()
        try:
            # A snapshot failing its check ends the upload with SnapshotCorrupt, raised as it is.
            await self._run(
                lambda: upload_snapshot(
                    self._docker().api, handle.unit_id, reader, stop, sandbox_id=handle.sandbox_id
                ),
                attempted="restore",
                sandbox_id=handle.sandbox_id,
                abandon_on_cancel=True,
            )
        finally:
            stop.set()

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the Docker client and end the handoffs no rocklet took; the runtime refuses
        calls afterwards. Idempotent."""
        with self._lock:
            client, self._client, self._closed = self._client, None, True
        self._sockets.close()
        if client is not None:
            await anyio.to_thread.run_sync(close_client, client)
