"""The creation of a sandbox's container (``create``, and ``restore``'s container): its
image had as the pull policy says (the ``image_pull`` phase), its network chosen and made,
the rocklet built, a socket folder made, and the container created from
:func:`~rock_docker._container.container_config` with what the engine can enforce."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import docker
import docker.errors

from rock_core.errors import ImagePullFailed, InvalidParameter, RockError
from rock_core.models import PHASE_IMAGE_PULL, Phase, PhaseStatus, PullPolicy, SandboxSpec
from rock_core.ports import listen_port
from rock_core.rocklet_delivery import RockletDelivery, prepare_rocklet
from rock_core.runtime import PhaseCallback, UnitHandle
from rock_docker._container import (
    LABEL_GROUP_NETWORK,
    LABEL_NETWORK_GROUP,
    container_config,
    network_for,
)
from rock_docker._engine_probe import EngineProbe
from rock_docker._errors import explain
from rock_docker._images import image_present, pull_image
from rock_docker._networks import Networks
from rock_docker._options import DockerOptions
from rock_docker._raw_api import create_container as create_lean
from rock_docker._rocklet_sockets import RockletSockets

__all__ = ["ContainerMaker", "RunInThread"]

T = TypeVar("T")

#: The runtime's name, in every handle it makes.
RUNTIME = "docker"


class RunInThread(Protocol):
    """The runtime's way to run a blocking Docker call: in a worker thread under its limiter,
    Docker's exceptions turned into rock's (``DockerRuntime._run``)."""

    async def __call__(
        self,
        func: Callable[[], T],
        *,
        attempted: str,
        sandbox_id: str | None = None,
        abandon_on_cancel: bool = False,
    ) -> T: ...


def _now() -> datetime:
    return datetime.now(UTC)


class ContainerMaker:
    """Makes the containers of one runtime.

    :param options: the runtime's settings.
    :param rocklet_dir: where the rocklet is built when the engine delivers none (or
        ``rocklet_dir`` names another folder than the engine's).
    :param run: how a blocking call runs; ``client``: the runtime's Docker client.
    :param delivery: the engine's rocklet delivery, if it made one.
    """

    def __init__(
        self,
        *,
        options: DockerOptions,
        rocklet_dir: Path,
        sockets: RockletSockets,
        networks: Networks,
        engine: EngineProbe,
        run: RunInThread,
        client: Callable[[], docker.DockerClient],
        delivery: Callable[[], RockletDelivery | None],
    ) -> None:
        self._options = options
        self.rocklet_dir = rocklet_dir
        self.sockets = sockets
        self.networks = networks
        self.engine = engine
        self._run = run
        self._client = client
        self._delivery = delivery
        # Held while the rocklet is built (the client stays usable meanwhile).
        self._rocklet_lock = threading.Lock()
        self._rocklet_source: Path | None = None
        #: Images seen on the engine: a start with ``pull`` missing or never does not ask again
        #: (one API call less per start); a create that meets one gone asks and creates again.
        self._present: set[str] = set()

    async def create(
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
        options = self._options
        network = network_for(spec, options.network)
        group = spec.runtime_options.get("network_group")
        if group is not None:
            labels = {**labels, LABEL_NETWORK_GROUP: str(group), LABEL_GROUP_NETWORK: network}
        remembered = await self.ensure_image(spec, on_phase)

        socket_dir = (
            self.sockets.new_dir()
            if network == "none" or (network != "host" and not options.publish_ports)
            else None
        )

        def create_container(retry: bool = True) -> tuple[str, tuple[str, ...], dict[str, Any]]:
            api = self._client().api
            host_cpus, disk_unsupported = self.engine.probe(self._client())
            isolated = self.networks.choose_isolated(api)
            target = isolated if network == "bridge" else network
            if target not in ("host", "none", "bridge"):
                self.networks.ensure(api, target, group=None if group is None else str(group))
            config = container_config(
                spec,
                labels=labels,
                rocklet_dir=str(self._prepare_rocklet()),
                publish_host=options.publish_host,
                network=target,
                disk_unsupported=disk_unsupported,
                host_cpus=host_cpus,
                host_rocklet_port=listen_port(options.publish_host) if network == "host" else None,
                socket_dir=str(socket_dir) if socket_dir is not None else None,
                publish_ports=options.publish_ports,
                stop_timeout=options.stop_timeout,
                init=options.init,
                rocklet_token=rocklet_token,
                isolated_network=isolated,
                nofile_limit=options.nofile_limit,
                prelude=prelude,
            )
            try:
                host = dict(config.host)
                if options.egress_dns and network not in ("host", "none"):
                    host["dns"] = [options.egress_dns.split(":")[0]]  # egress domains' resolver
                container = create_lean(
                    api, host_config=api.create_host_config(**host), **config.create
                )
            except docker.errors.ImageNotFound:
                if not remembered:
                    raise
                raise _ImageGone from None
            except docker.errors.APIError as exc:
                if retry and exc.status_code == 404 and "network" in explain(exc).lower():
                    # A group's network removed with its last member just now: make it again.
                    self.networks.forget(target)
                    return create_container(retry=False)
                if "storage_opt" not in config.host or not _is_storage_opt_refusal(exc):
                    raise
                # The driver looked able to limit disk but is not (overlay2 on XFS without pquota):
                # remember that, and create without the limit, with a note saying so.
                self.engine.disk_refused(f"the storage driver refused it ({explain(exc)})")
                return create_container(retry)
            return container["Id"], (*self.engine.notes, *config.notes), config.security

        try:
            try:
                unit_id, notes, security = await self._run(
                    create_container, attempted=attempted, sandbox_id=sandbox_id
                )
            except _ImageGone:  # removed since it was seen: as its pull policy says, then again
                self._present.discard(spec.image)
                remembered = await self.ensure_image(spec, on_phase)
                unit_id, notes, security = await self._run(
                    create_container, attempted=attempted, sandbox_id=sandbox_id
                )
        except BaseException:
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)
            raise
        self.sockets.created(unit_id, socket_dir, network=network)
        if group is not None:
            self.networks.joined(unit_id, network)
        return UnitHandle(
            runtime=RUNTIME,
            unit_id=unit_id,
            sandbox_id=sandbox_id,
            notes=notes,
            security=security,
        )

    async def ensure_image(self, spec: SandboxSpec, on_phase: PhaseCallback | None) -> bool:
        """The ``image_pull`` phase: make sure the image is on the engine, per the pull policy;
        whether it was taken as there without asking (seen before: see ``create``)."""
        image, sandbox_id = spec.image, spec.sandbox_id
        started = _now()

        def report(status: PhaseStatus, message: str) -> None:
            if on_phase is not None:
                done = None if status is PhaseStatus.RUNNING else _now()
                on_phase(
                    PHASE_IMAGE_PULL, Phase(status, message, started_at=started, completed_at=done)
                )

        if spec.pull is not PullPolicy.ALWAYS and image in self._present:
            report(
                PhaseStatus.SUCCESS,
                "skip image pull"
                if spec.pull is PullPolicy.NEVER
                else "use cached image, skip image pull",
            )
            return True
        report(PhaseStatus.RUNNING, f"looking for image {image}")
        try:
            present = await self._run(
                lambda: image_present(self._client().api, image, sandbox_id),
                attempted="image_pull",
                sandbox_id=sandbox_id,
            )
            if spec.pull is PullPolicy.NEVER:
                if not present:
                    raise ImagePullFailed(
                        f"Failed to pull image {image}: it is not on the Docker engine and the pull policy is 'never'",
                        attempted="image_pull",
                        sandbox_id=sandbox_id,
                    )
                self._present.add(image)
                report(PhaseStatus.SUCCESS, "skip image pull")
                return False
            if present and spec.pull is PullPolicy.MISSING:
                self._present.add(image)
                report(PhaseStatus.SUCCESS, "use cached image, skip image pull")
                return False
            report(PhaseStatus.RUNNING, f"pulling image {image}")
            auth = None
            if spec.registry_username:
                auth = {
                    "username": spec.registry_username,
                    "password": spec.registry_password or "",
                }
            # A pull may outlast a cancelled start; the engine finishes it on its own.
            await self._run(
                lambda: pull_image(self._client().api, image, auth, sandbox_id),
                abandon_on_cancel=True,
                attempted="image_pull",
                sandbox_id=sandbox_id,
            )
        except RockError as exc:
            report(PhaseStatus.FAILED, exc.message)
            raise
        self._present.add(image)
        report(PhaseStatus.SUCCESS, "image pulled")
        return False

    def _prepare_rocklet(self) -> Path:
        """The directory holding this rock's ``rocklet.pyz``, built on first use (blocking).

        The engine's delivery is used as it is, unless ``rocklet_dir`` names another folder.
        """
        with self._rocklet_lock:
            if self._rocklet_source is None:
                delivery = self._delivery()
                if delivery is None or (
                    self._options.rocklet_dir is not None
                    and delivery.path.parent.parent != self.rocklet_dir
                ):
                    delivery = prepare_rocklet(self.rocklet_dir)
                self._rocklet_source = delivery.path.parent
            return self._rocklet_source


class _ImageGone(Exception):
    """A create met no image where one was remembered (removed since it was seen)."""


def _is_storage_opt_refusal(exc: docker.errors.APIError) -> bool:
    text = explain(exc).lower()
    return "storage-opt" in text or "storage opt" in text or "quota" in text
