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

import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
import attrs
import docker
import docker.errors
from docker.utils import parse_repository_tag

from rock_core.errors import (
    ImagePullFailed,
    InvalidParameter,
    RockError,
    RuntimeFailure,
)
from rock_core.models import (
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    Phase,
    PhaseStatus,
    Port,
    PullPolicy,
    RuntimeStatus,
    SandboxSpec,
    UnitState,
    UnitStats,
)
from rock_core.private_paths import private_dir
from rock_core.rocklet_delivery import default_rocklet_dir, prepare_rocklet
from rock_core.rocklet_handoff import HandoffDesk
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle
from rock_docker._container import (
    APP_PORT,
    HANDOFF_DIR,
    HANDOFF_NAME,
    INIT_EXEC_FAILED,
    LABEL_GROUP_NETWORK,
    LABEL_NETWORK,
    LABEL_NETWORK_GROUP,
    NETWORKS,
    NO_PYTHON_EXIT_CODE,
    NO_PYTHON_LOG_LINE,
    ROCKLET_SOCKET_LABEL,
    SOCKET_NAME,
    container_config,
    explain_start_failure,
    group_network_name,
    network_for,
    no_python_error,
    status_from_inspect,
)
from rock_docker._errors import DOCKER_ERRORS, explain, translate
from rock_docker._events import EventWatch
from rock_docker._options import DockerOptions
from rock_docker._snapshot import (
    APPLY_DELETIONS,
    SnapshotReader,
    ThreadedIterator,
    plan_snapshot,
    snapshot_frames,
)
from rock_docker._stats import CgroupFinder, read_stats, stats_from_api

log = logging.getLogger("rock.docker")

__all__ = ["DockerRuntime", "default_rocklet_dir"]

T = TypeVar("T")

# Docker's rule for container names (rock names each container after its sandbox).
_CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
# Storage drivers that can enforce ``--storage-opt size=`` (overlay2 only on XFS with pquota).
_QUOTA_DRIVERS = ("devicemapper", "btrfs", "zfs", "windowsfilter")
# ``docker info`` flags of the limits rock sets, and what goes unenforced without them.
_ENGINE_LIMITS = (
    ("MemoryLimit", "memory limit"),
    ("SwapLimit", "no-swap limit (the sandbox may swap beyond its memory limit)"),
    ("CpuCfsQuota", "CPU limit"),
    ("CPUShares", "CPU shares"),
)


def _now() -> datetime:
    return datetime.now(UTC)


class DockerRuntime(Runtime):
    """Sandboxes as containers on a Docker engine (the one at ``base_url``, or ``DOCKER_HOST``).

    :param base_url: the engine's address (``unix:///var/run/docker.sock``, ``tcp://...``);
        ``None`` reads ``DOCKER_HOST`` and friends like the docker CLI does. The engine must see
        this machine's files: the rocklet is bind-mounted from ``rocklet_dir``.
    :param rocklet_dir: where ``rocklet.pyz`` is built and kept, one sub-directory per content
        hash (default :func:`default_rocklet_dir`).
    :param publish_host: the host address container ports are published on.
    :param network: the network mode of containers whose spec names none (``bridge``, ``host``,
        ``none`` or the name of a Docker network); a spec may choose with the runtime option
        ``network`` (``bridge``, ``host`` or ``none``).
    :param stop_timeout: seconds Docker itself waits before killing a container it stops on its
        own (engine shutdown); :meth:`stop` takes its own timeout.
    :param max_concurrency: Docker calls in flight at once (worker threads and pooled
        connections); more wait their turn.
    :param api_timeout: seconds to wait for the engine's answer to one call.
    :param init: run Docker's init as the container's first process, so that the orphans a
        sandbox's commands leave behind are reaped.
    :param socket_dir: where the rocklets' unix sockets live on this host, one sub-directory per
        container (default ``$TMPDIR/rock-<uid>``; keep it short: a socket path has at most 107
        bytes). Made mode 0700; an existing one must be a folder (not a link) of this user that
        no one else may write, or every create is refused naming it.
    :param isolated_network: the Docker network that ``network: bridge`` means, one where
        inter-container communication is disabled, so sandboxes reach the outside but not each
        other. ``None`` (the default): Docker's default bridge when the engine runs with
        ``--icc=false`` (``"icc": false`` in daemon.json; the fastest starts), else
        ``rock-sandboxes``, a bridge network rock creates on first use with inter-container
        communication disabled (its embedded DNS costs each start some 50 ms). A name: that
        network, created so if missing.
    :param publish_ports: publish each sandbox's ports 22555 and 8080 through Docker (one
        ``docker-proxy`` process and packet-filter rules each) and reach the rocklet there. By
        default the rocklet listens on a unix socket in ``socket_dir`` instead, and the engine
        serves ``port_mapping``'s host ports itself, through the rocklet: faster starts, some
        3 MB less per sandbox, and any port of the sandbox reachable the same way.
    :param nofile_limit: the open-files limit (soft and hard) of every process in a sandbox;
        ``None`` keeps Docker's (the engine's own, often a million). It must not exceed the
        Docker engine's own hard limit.
    """

    name: ClassVar[str] = "docker"
    keeps_files_across_stop: ClassVar[bool] = True
    network_modes: ClassVar[tuple[str, ...]] = NETWORKS

    def __init__(
        self,
        *,
        base_url: str | None = None,
        rocklet_dir: str | os.PathLike[str] | None = None,
        publish_host: str = "127.0.0.1",
        network: str = "bridge",
        stop_timeout: float = 10.0,
        max_concurrency: int = 32,
        api_timeout: float = 120.0,
        init: bool = True,
        socket_dir: str | os.PathLike[str] | None = None,
        isolated_network: str | None = None,
        nofile_limit: int | None = 16384,
        publish_ports: bool = False,
    ) -> None:
        options = DockerOptions(
            base_url=base_url,
            rocklet_dir=rocklet_dir,
            publish_host=publish_host,
            network=network,
            stop_timeout=stop_timeout,
            max_concurrency=max_concurrency,
            api_timeout=api_timeout,
            init=init,
            socket_dir=socket_dir,
            isolated_network=isolated_network,
            nofile_limit=nofile_limit,
            publish_ports=publish_ports,
        )  # every setting read and checked by rock-core's converters, named when bad
        self.base_url = options.base_url
        self.rocklet_dir = (
            Path(options.rocklet_dir) if options.rocklet_dir is not None else default_rocklet_dir()
        )
        self._own_rocklet_dir = (
            options.rocklet_dir is not None
        )  # else the engine's delivery is used as it is
        self.publish_host = options.publish_host
        self.network = options.network
        self.stop_timeout = options.stop_timeout
        self.max_concurrency = options.max_concurrency
        self.api_timeout = options.api_timeout
        self.init = options.init
        self._isolated_network = options.isolated_network
        self.nofile_limit = options.nofile_limit
        self.publish_ports = options.publish_ports
        self._chosen_network: str | None = None  # the isolated network found on first use
        self._networks: set[str] = set()  # networks known to exist (made or found)
        self._network_lock = threading.Lock()  # one thread makes a missing network
        self._unit_groups: dict[str, str] = {}  # unit id -> its group's network, for removal
        self.socket_dir = (
            Path(options.socket_dir)
            if options.socket_dir is not None
            else Path(tempfile.gettempdir()) / f"rock-{os.getuid()}"
        )
        self._socket_dirs: dict[
            str, Path | None
        ] = {}  # unit id -> its folder (None: reached over TCP)
        self._handoffs = HandoffDesk()  # each start's listening socket, until its rocklet takes it
        self._known_status: dict[str, RuntimeStatus] = {}  # unit id -> its status once started
        self._limiter = anyio.CapacityLimiter(options.max_concurrency)
        self._lock = threading.Lock()  # guards the lazily made client and the disk probe
        self._rocklet_lock = (
            threading.Lock()
        )  # held while the rocklet is built (the client stays usable)
        self._cgroups = CgroupFinder()  # where containers' cgroup files are (stats)
        self._client: docker.DockerClient | None = None
        self._closed = False
        self._rocklet_source: Path | None = None
        self._engine_probed = False
        self._host_cpus: int | None = None
        self._disk_unsupported: str | None = None
        self._engine_notes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"DockerRuntime(base_url={self.base_url!r}, network={self.network!r})"

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
                    "timeout": self.api_timeout,
                    "max_pool_size": self.max_concurrency,
                }
                if self.base_url:
                    self._client = docker.DockerClient(base_url=self.base_url, **kwargs)
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
        return await self._create_unit(
            spec, labels=labels, rocklet_token=rocklet_token, on_phase=on_phase
        )

    async def _create_unit(
        self,
        spec: SandboxSpec,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
        prelude: str = "",
        attempted: str = "create",
    ) -> UnitHandle:
        """``create``, and ``restore``'s container: ``prelude`` is shell its command runs first."""
        if not rocklet_token:
            raise InvalidParameter(
                "rocklet_token: the engine must give every sandbox a secret",
                field="rocklet_token",
                attempted=attempted,
            )
        sandbox_id = spec.sandbox_id
        if sandbox_id is None:
            raise InvalidParameter(
                f"sandbox_id: the engine must choose one before {attempted}",
                field="sandbox_id",
                attempted=attempted,
            )
        network = network_for(spec, self.network)
        group = spec.runtime_options.get("network_group")
        if group is not None:
            labels = {**labels, LABEL_NETWORK_GROUP: str(group), LABEL_GROUP_NETWORK: network}
        await self._ensure_image(spec, on_phase)

        socket_dir = (
            self._new_socket_dir()
            if network == "none" or (network != "host" and not self.publish_ports)
            else None
        )

        def create_container(retry: bool = True) -> tuple[str, tuple[str, ...], dict[str, Any]]:
            host_cpus, disk_unsupported = self._probe_engine()
            isolated = self._isolated()
            target = isolated if network == "bridge" else network
            if target not in ("host", "none", "bridge"):
                self._ensure_network(target, group=None if group is None else str(group))
            config = container_config(
                spec,
                labels=labels,
                rocklet_dir=str(self._prepare_rocklet()),
                publish_host=self.publish_host,
                network=target,
                disk_unsupported=disk_unsupported,
                host_cpus=host_cpus,
                host_rocklet_port=_free_port(self.publish_host) if network == "host" else None,
                socket_dir=str(socket_dir) if socket_dir is not None else None,
                publish_ports=self.publish_ports,
                stop_timeout=self.stop_timeout,
                init=self.init,
                rocklet_token=rocklet_token,
                isolated_network=isolated,
                nofile_limit=self.nofile_limit,
                prelude=prelude,
            )
            api = self._docker().api
            try:
                container = api.create_container(
                    host_config=api.create_host_config(**config.host), **config.create
                )
            except docker.errors.APIError as exc:
                if retry and exc.status_code == 404 and "network" in explain(exc).lower():
                    # A group's network removed with its last member just now: make it again.
                    with self._network_lock:
                        self._networks.discard(target)
                    return create_container(retry=False)
                if "storage_opt" not in config.host or not _is_storage_opt_refusal(exc):
                    raise
                # The driver looked able to limit disk but is not (overlay2 on XFS without pquota):
                # remember that, and create without the limit, with a note saying so.
                with self._lock:
                    self._disk_unsupported = f"the storage driver refused it ({explain(exc)})"
                return create_container(retry)
            return container["Id"], (*self._engine_notes, *config.notes), config.security

        try:
            unit_id, notes, security = await self._run(
                create_container, attempted=attempted, sandbox_id=sandbox_id
            )
        except BaseException:
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)
            raise
        self._socket_dirs[unit_id] = socket_dir
        if socket_dir is not None:
            if network != "none":  # reached on its socket, its ports forwarded by the engine
                self._known_status[unit_id] = RuntimeStatus(
                    state=UnitState.RUNNING,
                    rocklet_socket=str(socket_dir / SOCKET_NAME),
                    forwarded_ports=(Port(ROCKLET_PORT), Port(APP_PORT)),
                )
        if group is not None:
            self._unit_groups[unit_id] = network
        return UnitHandle(
            runtime=self.name,
            unit_id=unit_id,
            sandbox_id=sandbox_id,
            notes=notes,
            security=security,
        )

    @property
    def isolated_network(self) -> str | None:
        """The network ``network: bridge`` puts sandboxes on (``None`` until the engine was asked)."""
        return self._chosen_network or self._isolated_network

    def _isolated(self) -> str:
        """The isolated network, chosen on first use (blocking): see ``isolated_network``."""
        if self._chosen_network is None:
            options = self._docker().api.inspect_network("bridge").get("Options") or {}
            icc = options.get("com.docker.network.bridge.enable_icc", "true") != "false"
            if self._isolated_network == "bridge" and icc:
                raise InvalidParameter(
                    "isolated_network: Docker's default bridge lets containers connect to each other "
                    "(its engine runs without --icc=false); leave isolated_network unset for rock's own network",
                    field="isolated_network",
                    value="bridge",
                    attempted="create",
                )
            self._chosen_network = self._isolated_network or ("rock-sandboxes" if icc else "bridge")
        return self._chosen_network

    def _ensure_network(self, name: str, *, group: str | None) -> None:
        """Make sure Docker network ``name`` exists (blocking): rock's isolated network, with
        inter-container communication disabled, or a group's network, where it is allowed."""
        api = self._docker().api
        with self._network_lock:
            if name in self._networks:
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
            self._networks.add(name)

    def _new_socket_dir(self) -> Path:
        """A fresh folder (0700) for one container: its rocklet socket, and the ``handoff``
        folder it mounts read-only at /rock-run. ``socket_dir`` is checked first (a folder of
        this user alone, see :func:`~rock_core.private_paths.private_dir`)."""
        private_dir(self.socket_dir, setting="socket_dir")
        path = Path(tempfile.mkdtemp(prefix="", dir=self.socket_dir))
        _make_handoff_dir(path)
        return path

    def _offer_listener(self, handle: UnitHandle) -> None:
        """Before a start (blocking): make the rocklet's listening socket and offer it on the
        handoff socket, for a unit reached on a unix socket; nothing for the others."""
        if handle.unit_id in self._socket_dirs:
            unit_dir = self._socket_dirs[handle.unit_id]
        else:  # made by an earlier process: its label says
            labels = (self._docker().api.inspect_container(handle.unit_id).get("Config") or {}).get(
                "Labels"
            ) or {}
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
            self._socket_dirs[handle.unit_id] = unit_dir
        if unit_dir is None:
            return
        private_dir(self.socket_dir, setting="socket_dir")
        unit_dir.mkdir(mode=0o700, exist_ok=True)  # gone if the host's tmp was cleaned meanwhile
        _make_handoff_dir(unit_dir)
        self._handoffs.offer(
            handle.unit_id, unit_dir / SOCKET_NAME, unit_dir / HANDOFF_DIR / HANDOFF_NAME
        )

    async def prepare(self, spec: SandboxSpec, on_phase: PhaseCallback | None = None) -> None:
        """Pull ``spec.image`` as ``spec.pull`` says (what ``create`` would do first)."""
        await self._ensure_image(spec, on_phase)

    async def _ensure_image(self, spec: SandboxSpec, on_phase: PhaseCallback | None) -> None:
        """The ``image_pull`` phase: make sure the image is on the engine, per the pull policy."""
        image = spec.image
        started = _now()

        def report(status: PhaseStatus, message: str) -> None:
            if on_phase is not None:
                done = None if status is PhaseStatus.RUNNING else _now()
                on_phase(
                    PHASE_IMAGE_PULL, Phase(status, message, started_at=started, completed_at=done)
                )

        kw: dict[str, Any] = {"attempted": "image_pull", "sandbox_id": spec.sandbox_id}
        report(PhaseStatus.RUNNING, f"looking for image {image}")
        try:
            present = await self._run(lambda: self._image_present(image, spec.sandbox_id), **kw)
            if spec.pull is PullPolicy.NEVER:
                if not present:
                    raise ImagePullFailed(
                        f"Failed to pull image {image}: it is not on the Docker engine and the pull policy is 'never'",
                        **kw,
                    )
                report(PhaseStatus.SUCCESS, "skip image pull")
                return
            if present and spec.pull is PullPolicy.MISSING:
                report(PhaseStatus.SUCCESS, "use cached image, skip image pull")
                return
            report(PhaseStatus.RUNNING, f"pulling image {image}")
            auth = None
            if spec.registry_username:
                auth = {
                    "username": spec.registry_username,
                    "password": spec.registry_password or "",
                }
            # A pull may outlast a cancelled start; the engine finishes it on its own.
            await self._run(
                lambda: self._pull(image, auth, spec.sandbox_id), abandon_on_cancel=True, **kw
            )
        except RockError as exc:
            report(PhaseStatus.FAILED, exc.message)
            raise
        report(PhaseStatus.SUCCESS, "image pulled")

    def _image_present(self, image: str, sandbox_id: str | None) -> bool:
        """Whether the engine has ``image``; a name Docker cannot parse fails like a pull would."""
        try:
            self._docker().api.inspect_image(image)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code != 400:
                raise
            reason = explain(exc).removeprefix(f"no such image: {image}: ")
            raise ImagePullFailed(
                f"Failed to pull image {image}: {reason}",
                sandbox_id=sandbox_id,
                attempted="image_pull",
            ) from exc
        return True

    def _pull(self, image: str, auth: dict[str, str] | None, sandbox_id: str | None) -> None:
        """Pull ``image`` (blocking); any failure is :class:`ImagePullFailed` with Docker's reason."""
        repository, tag = parse_repository_tag(image)
        try:
            # Without a tag the engine would pull every tag of the repository.
            for chunk in self._docker().api.pull(
                repository, tag=tag or "latest", stream=True, decode=True, auth_config=auth
            ):
                if isinstance(chunk, dict) and chunk.get("error"):
                    detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                    raise ImagePullFailed(
                        f"Failed to pull image {image}: {detail}",
                        sandbox_id=sandbox_id,
                        attempted="image_pull",
                    )
        except DOCKER_ERRORS as exc:
            raise ImagePullFailed(
                f"Failed to pull image {image}: {explain(exc)}",
                sandbox_id=sandbox_id,
                attempted="image_pull",
            ) from exc

    def _prepare_rocklet(self) -> Path:
        """The directory holding this rock's ``rocklet.pyz``, built on first use (blocking)."""
        with self._rocklet_lock:
            if self._rocklet_source is None:
                delivery = self.rocklet_delivery
                if delivery is None or (
                    self._own_rocklet_dir and delivery.path.parent.parent != self.rocklet_dir
                ):
                    delivery = prepare_rocklet(self.rocklet_dir)
                self._rocklet_source = delivery.path.parent
            return self._rocklet_source

    def _probe_engine(self) -> tuple[int | None, str | None]:
        """What the engine allows, asked once: ``(its CPU count, why it cannot limit disk or None)``."""
        with self._lock:
            if self._engine_probed:
                return self._host_cpus, self._disk_unsupported
        info = self._docker().info()
        # Limits the kernel cannot enforce are said once per sandbox, not silently dropped.
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
            if not self._engine_probed:
                self._engine_probed = True
                self._host_cpus = info.get("NCPU") or None
                self._disk_unsupported = reason
                self._engine_notes = tuple(
                    f"{what} not enforced: the Docker host does not support it (docker info: {key} false)"
                    for key, what in missing
                )
            return self._host_cpus, self._disk_unsupported

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
            self._offer_listener(handle)
            try:
                api.start(handle.unit_id)
            except docker.errors.NotFound:
                self._handoffs.cancel(handle.unit_id)
                raise
            except docker.errors.APIError as exc:
                self._handoffs.cancel(handle.unit_id)
                message = explain_start_failure(_image_of(api, handle.unit_id), explain(exc))
                if message is None:
                    raise
                raise RuntimeFailure(
                    message, sandbox_id=handle.sandbox_id, attempted="start"
                ) from exc
            except BaseException:
                self._handoffs.cancel(handle.unit_id)
                raise

        await self._run(start, attempted="start", sandbox_id=handle.sandbox_id)
        return self._known_status.get(handle.unit_id)

    async def assign(self, handle: UnitHandle, sandbox_id: str) -> UnitHandle:
        """``docker rename``: a warm-pool container takes the sandbox's id as its name.

        Its ports, labels and running rocklet are untouched; from now on :meth:`list` and the
        event stream report it under ``sandbox_id``.
        """

        def rename() -> None:
            self._docker().api.rename(handle.unit_id, sandbox_id)

        await self._run(rename, attempted="assign", sandbox_id=sandbox_id)
        return attrs.evolve(handle, sandbox_id=sandbox_id, labels={})

    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """``docker stop``: SIGTERM, then SIGKILL after ``timeout`` seconds; a missing container is fine."""
        seconds = max(0, math.ceil(timeout))

        def stop() -> None:
            try:
                self._docker().api.stop(handle.unit_id, timeout=seconds)
            except docker.errors.NotFound:
                pass

        await self._run(stop, attempted="stop", sandbox_id=handle.sandbox_id)
        self._handoffs.cancel(handle.unit_id)  # a rocklet that never took its socket

    async def remove(self, handle: UnitHandle) -> None:
        """``docker rm -f -v``: the container and its anonymous volumes; a missing container is fine."""

        def remove() -> None:
            try:
                self._docker().api.remove_container(handle.unit_id, v=True, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409 or "already in progress" not in explain(exc):
                    raise

        # Cancelled (an engine closing), the call is abandoned, not awaited: dockerd finishes it
        # or the reaper redoes it; a close must not wait for a dockerd that is busy with exits.
        await self._run(
            remove, attempted="remove", sandbox_id=handle.sandbox_id, abandon_on_cancel=True
        )
        group = handle.labels.get(LABEL_NETWORK_GROUP)
        network = self._unit_groups.pop(handle.unit_id, None) or handle.labels.get(
            LABEL_GROUP_NETWORK
        )
        if network is None and group:
            network = group_network_name(group)  # a container made before groups had tenants
        if network is not None:
            await self._run(
                lambda: self._remove_network_if_unused(network),
                attempted="remove",
                sandbox_id=handle.sandbox_id,
            )
        self._remove_socket_dir(handle)

    def _remove_socket_dir(self, handle: UnitHandle) -> None:
        """Remove the unit's rocklet socket directory, if it has one."""
        self._known_status.pop(handle.unit_id, None)
        self._handoffs.cancel(handle.unit_id)
        socket_path = self._socket_dirs.pop(handle.unit_id, None) or handle.labels.get(
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

    async def discard(self, handles: Sequence[UnitHandle]) -> None:
        """Hand the removal of ``handles`` to a reaper process and return at once.

        The reaper (:mod:`rock_docker.reaper`, in a session of its own, so it outlives this
        process) removes them a few at a time and retries what dockerd refuses for now. Sending
        dockerd a thousand removals at once instead left it crawling on a 2-core host, with some
        containers stuck in "Removal In Progress". Socket directories go at once; group networks
        are left for a later removal of a member of their group."""
        if not handles:
            return
        command = [sys.executable, "-m", "rock_docker.reaper"]
        if self.base_url:
            command += ["--base-url", self.base_url]
        ids = "".join(f"{handle.unit_id}\n" for handle in handles).encode("ascii")

        def spawn() -> None:
            reaper = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            assert reaper.stdin is not None
            reaper.stdin.write(ids)
            reaper.stdin.close()

        try:
            await anyio.to_thread.run_sync(spawn)
        except OSError as exc:
            log.warning(
                "could not start the reaper (%s); removing %d container(s) here", exc, len(handles)
            )
            await super().discard(handles)
        for handle in handles:
            self._unit_groups.pop(handle.unit_id, None)
            self._remove_socket_dir(handle)

    def _remove_network_if_unused(self, name: str) -> None:
        """Remove a group's network once no container is attached to it (blocking)."""
        api = self._docker().api
        try:
            if api.inspect_network(name).get("Containers"):
                return
            with self._network_lock:
                self._networks.discard(name)
            api.remove_network(name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code not in (403, 409):  # a member joined meanwhile: it stays
                raise

    # -- observation ----------------------------------------------------------------------------

    async def stats(self, labels: Mapping[str, str]) -> Mapping[str, UnitStats]:
        """A sample of every running container carrying ``labels``: one ``docker ps`` call, then
        each container's cgroup files read on this host (``_stats``); a container whose cgroup is
        not here (a remote daemon) is asked through the API (``stats``, one-shot)."""
        filters = {
            "label": [f"{key}={value}" for key, value in labels.items()],
            "status": ["running"],
        }

        def sample() -> dict[str, UnitStats]:
            api = self._docker().api
            rows = api.containers(all=False, filters=filters)
            found: dict[str, UnitStats] = {}
            for row in rows:
                measured = read_stats(self._cgroups, row["Id"])
                if measured is None:
                    try:
                        measured = stats_from_api(api.stats(row["Id"], stream=False, one_shot=True))
                    except docker.errors.APIError:
                        measured = None  # gone meanwhile
                if measured is not None:
                    found[row["Id"]] = measured
            self._cgroups.forget({row["Id"] for row in rows})
            return found

        return await self._run(sample, attempted="stats")

    async def disk_usage(self, labels: Mapping[str, str]) -> Mapping[str, int]:
        """Bytes in the writable layer of each running container carrying ``labels``, in one
        ``docker ps --size`` call (its only mount from the host, ``/rock-run``, is read-only).

        Empty when the storage driver enforces disk limits itself.
        """
        filters = {
            "label": [f"{key}={value}" for key, value in labels.items()],
            "status": ["running"],
        }

        def usage() -> dict[str, int]:
            self._probe_engine()
            if self._disk_unsupported is None:
                return {}
            rows = self._docker().api.containers(all=False, size=True, filters=filters)
            return {row["Id"]: int(row.get("SizeRw") or 0) for row in rows}

        return await self._run(usage, attempted="disk_usage")

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """The container's state, exit code, OOM kill, times and published ports (``missing`` if gone)."""

        def inspect() -> RuntimeStatus:
            api = self._docker().api
            try:
                doc = api.inspect_container(handle.unit_id)
            except docker.errors.NotFound:
                return RuntimeStatus(
                    state=UnitState.MISSING, error=f"container {handle.unit_id[:12]} does not exist"
                )
            status = status_from_inspect(doc, publish_host=self.publish_host)
            image = (doc.get("Config") or {}).get("Image") or "?"
            if status.error:
                better = explain_start_failure(image, status.error)
                if better is not None:
                    status = attrs.evolve(status, error=better)
            if status.state is UnitState.EXITED and status.exit_code == NO_PYTHON_EXIT_CODE:
                # 127: the launch command found no python3, or (under Docker's init, which
                # execs the command itself) there was no /bin/sh to run it with.
                tail = api.logs(handle.unit_id, stdout=True, stderr=True, tail=20).decode(
                    "utf-8", "replace"
                )
                if NO_PYTHON_LOG_LINE in tail:
                    status = attrs.evolve(status, error=no_python_error(image))
                else:
                    lines = [line for line in tail.splitlines() if INIT_EXEC_FAILED in line]
                    better = explain_start_failure(image, lines[-1]) if lines else None
                    if better is not None:
                        status = attrs.evolve(status, error=better)
            return status

        return await self._run(
            inspect, attempted="inspect", sandbox_id=handle.sandbox_id, abandon_on_cancel=True
        )

    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """Every container, running or not, carrying all of ``labels``."""
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}

        def list_units() -> list[UnitHandle]:
            rows = self._docker().api.containers(all=True, filters=filters)
            return [_handle_of(self.name, row) for row in rows]

        return await self._run(list_units, attempted="list")

    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """The container's stdout and stderr: the last ``tail`` lines, or everything."""

        def logs() -> bytes:
            return self._docker().api.logs(
                handle.unit_id,
                stdout=True,
                stderr=True,
                tail="all" if tail is None else max(0, tail),
            )

        data = await self._run(logs, attempted="logs", sandbox_id=handle.sandbox_id)
        return data.decode("utf-8", "replace")

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

        def plan() -> Iterator[bytes]:
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
            _batched(chunks),
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
            handle = await self._create_unit(
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
        """Stream the snapshot's tar into the created container (Docker's ``PUT .../archive``).

        The upload runs in a worker thread and pulls each frame from the event loop (from the
        reader) as Docker takes the previous one: one frame in memory at a time. A frame that
        fails its check ends the upload, and the caller removes the container.
        """
        stop = threading.Event()

        def body() -> Iterator[bytes]:
            while not stop.is_set():
                frame = anyio.from_thread.run(reader.next_frame)
                if frame is None:
                    return
                yield frame
            raise RuntimeFailure(
                "the restore was abandoned", sandbox_id=handle.sandbox_id, attempted="restore"
            )

        def put() -> None:
            self._docker().api.put_archive(handle.unit_id, "/", body())

        try:
            # A snapshot failing its check ends the upload with SnapshotCorrupt, raised as it is.
            await self._run(
                put, attempted="restore", sandbox_id=handle.sandbox_id, abandon_on_cancel=True
            )
        finally:
            stop.set()

    def watch(self, labels: Mapping[str, str]) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        """Docker's ``die``, ``oom`` and ``destroy`` events of containers carrying ``labels``.

        Yields ``(handle, status)``: the container's status after a ``die`` (``exited``, with
        its exit code), after an ``oom`` (``oom_killed`` set, even while it still runs: the
        kernel killed a process inside it) and ``missing`` after a ``destroy``. Events from
        the moment of this call on are delivered, even if iteration starts later. Close the
        iterator with ``aclose()`` (or cancel the task reading it) to end the subscription.
        """
        return EventWatch(self, labels)

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the Docker client and end the handoffs no rocklet took; the runtime refuses
        calls afterwards. Idempotent."""
        with self._lock:
            client, self._client, self._closed = self._client, None, True
        self._handoffs.close()
        if client is not None:
            await anyio.to_thread.run_sync(client.close)


# `docker ps`'s State column, as a unit state (the rest, e.g. "removing", read as exited).
_STATES = {
    "created": UnitState.CREATED,
    "running": UnitState.RUNNING,
    "paused": UnitState.RUNNING,
    "restarting": UnitState.RUNNING,
    "exited": UnitState.EXITED,
    "dead": UnitState.EXITED,
    "removing": UnitState.EXITED,
}


def _handle_of(runtime: str, row: Mapping[str, Any]) -> UnitHandle:
    """The handle of a container as ``docker ps`` lists it, with its labels."""
    names = row.get("Names") or []
    # The container is named after its sandbox (Docker lists names with a leading slash).
    sandbox_id = names[0].lstrip("/") if names else row["Id"]
    state = _STATES.get(str(row.get("State") or "").lower())
    return UnitHandle(
        runtime=runtime,
        unit_id=row["Id"],
        sandbox_id=sandbox_id,
        labels=dict(row.get("Labels") or {}),
        state=state,
    )


def _batched(chunks: Iterator[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """``chunks`` (a log line each) joined into pieces of about ``size`` bytes."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        if len(pending) >= size:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


def _image_of(api: docker.APIClient, unit_id: str) -> str:
    try:
        return str(api.inspect_container(unit_id)["Config"]["Image"])
    except (docker.errors.DockerException, KeyError, TypeError):
        return "?"


def _is_storage_opt_refusal(exc: docker.errors.APIError) -> bool:
    text = explain(exc).lower()
    return "storage-opt" in text or "storage opt" in text or "quota" in text


def _make_handoff_dir(unit_dir: Path) -> None:
    """The ``handoff`` folder of a unit folder, which its container mounts read-only: mode 0755,
    so the rocklet reaches the handoff socket as whatever user the image runs it (the unit
    folder, 0700, and ``socket_dir`` keep everyone else on the host out)."""
    handoff = unit_dir / HANDOFF_DIR
    handoff.mkdir(exist_ok=True)
    handoff.chmod(0o755)


def _free_port(host: str) -> int:
    """A TCP port free on ``host`` right now (for the rocklet of a container on the host network)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
