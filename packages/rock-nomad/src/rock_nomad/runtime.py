"""rock's runtime on HashiCorp Nomad: one Nomad job per sandbox (:class:`NomadRuntime`).

- ``create`` builds the sandbox's job (:func:`rock_nomad._job.job_for`) and keeps it until
  ``start``: nothing is registered yet, so a unit that is never started costs Nomad nothing.
- ``start`` writes the sandbox's secret as the job's own Nomad Variable
  (``nomad/jobs/<job id>``, which the job's template reads through the task's workload
  identity: the secret is nowhere in the job), registers the job (create-only:
  ``EnforceIndex``; the Variable is deleted if that fails), follows its evaluation with
  blocking queries until the scheduler has placed it (or failed to: Nomad's reason from
  ``FailedTGAllocs``, at once, and the job is purged), then its allocation until the node has the
  image and the task runs (``image_pull`` is reported meanwhile; a node that cannot pull the
  image raises :class:`~rock_core.errors.ImagePullFailed` and the job is purged). It returns the
  rocklet's address: the node's address and the dynamic port mapped to 22555.
- ``stop`` deregisters the job (Nomad kills the task after ``kill_timeout``) and waits for the
  allocation to end; ``remove`` purges the job and deletes its Variable.
- ``inspect`` reads the job's allocations: ``running``, or ``exited`` with the exit code, an OOM
  kill, ``node lost`` or the driver's error; ``missing`` once the job is gone.
- ``list`` is one ``GET /v1/jobs?prefix=...&meta=true``: the units' labels are their jobs'
  ``Meta``, their state the job summaries, so a restarted admin finds its sandboxes and the
  engine's reconcile costs one call per interval.

All calls are async HTTP on the event loop (:mod:`rock_nomad._api`); nothing blocks it.
A Nomad unit cannot keep its files across a stop (a stopped allocation's container is gone), so
``restart()`` of a stopped sandbox is refused by the engine, naming the runtime; no warm-pool
renaming (``assign``), snapshots or disk measures either. ``network`` is ``bridge`` only:
each node's Docker network ``sandbox_network``, which its operator made with inter-container
traffic disabled (deploy/nomad/client-setup.sh), only the rocklet published on the node and
ports 22555 and 8080 forwarded by the engine through it; no ``network_group`` (the runtime
declares it cannot, and the engine refuses one naming the field). ``watch`` reports units
that stop or vanish as Nomad's event stream tells it (a lost node at once, not at the next
reconcile).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

import anyio

from rock_core.errors import (
    ImagePullFailed,
    InvalidParameter,
    NotSupported,
    RuntimeFailure,
    SandboxNotFound,
)
from rock_core.models import (
    PHASE_IMAGE_PULL,
    Phase,
    PhaseStatus,
    RuntimeStatus,
    SandboxSpec,
    UnitState,
)
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle
from rock_nomad._api import NomadApi, NomadError, Setting
from rock_nomad._events import EventFeed, JobWatch
from rock_nomad._job import (
    SANDBOX_NETWORK,
    SECRET_ITEM,
    describe_placement_failure,
    failure_of,
    job_for,
    latest_alloc,
    secret_path,
    status_of,
)
from rock_nomad._options import PATH, NomadOptions

__all__ = ["NomadRuntime"]

log = logging.getLogger("rock.nomad")

# Nomad job ids: no spaces or NUL; rock narrows them to what a Nomad Variable's path holds, since
# each sandbox's secret is the Variable nomad/jobs/<job id> (at most 128 characters in all).
_MAX_JOB_ID = 128 - len(secret_path(""))
_VARIABLE_PATH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: Seconds one blocking query waits before it is asked again.
_BLOCK = 30.0


def _setting_source(name: str, given: Any, env: str | None) -> Setting:
    if given is not None:
        return Setting(
            name,
            "set in [plugins.nomad], [engine.runtime_options] or ROCK_PLUGIN_NOMAD_" + name.upper(),
        )
    if env and os.environ.get(env):
        return Setting(name, f"taken from {env}")
    return Setting(name, "not set: the default")


class NomadRuntime(Runtime):
    """Sandboxes as Nomad jobs (see the module docstring and the README's settings table).

    :param address: Nomad's HTTP API (``https://nomad.example:4646``); default ``NOMAD_ADDR``,
        else ``http://127.0.0.1:4646``.
    :param token: an ACL token's secret (``submit-job``, ``read-job``, ``read-logs`` in
        ``namespace``, and Variables ``write`` and ``destroy`` on ``nomad/jobs/<job_prefix>*``
        there); default ``NOMAD_TOKEN``; none when the cluster has no ACLs.
    :param namespace: the namespace of the sandboxes' jobs (default ``NOMAD_NAMESPACE`` or ``default``).
    :param region: the region (default ``NOMAD_REGION``, else the agent's own).
    :param datacenters: where sandboxes may be placed (a list, or names separated by commas;
        default ``*``: every datacenter).
    :param node_pool: the node pool of the sandboxes' jobs (default: Nomad's ``default``).
    :param ca_cert: a CA bundle to verify Nomad's TLS certificate with (default ``NOMAD_CACERT``;
        else the system's).
    :param client_cert: / :param client_key: a client certificate for mutual TLS (default
        ``NOMAD_CLIENT_CERT`` / ``NOMAD_CLIENT_KEY``).
    :param tls_skip_verify: do not verify Nomad's certificate (tests only).
    :param sandbox_network: the Docker network, on every client node, that sandboxes join: made
        by the node's operator with inter-container traffic disabled, the node's ``meta``
        ``rock_sandbox_network`` naming it (deploy/nomad/client-setup.sh); sandboxes are placed
        only on such nodes.
    :param job_prefix: the prefix of every sandbox job's ID (``rock-<sandbox id>``); the runtime
        lists jobs by it.
    :param mhz_per_cpu: MHz of Nomad's ``CPU`` per CPU a sandbox asks for.
    :param priority: the jobs' priority (1-100).
    :param kill_timeout: seconds Nomad waits after SIGTERM before it kills a stopped sandbox.
    :param ephemeral_disk_mb: the group's ephemeral disk reservation.
    :param nofile_limit: the open-files limit of the sandbox's processes (docker driver ``ulimit``).
    :param rocklet_url: where Nomad's nodes download the rocklet; default the engine's
        (``[engine] rocklet_url``, which the admin sets to its own ``/rocklet.pyz``). Set it when
        the nodes reach the admin by another address than the one it knows itself by.
    :param api_timeout: seconds to wait for Nomad's answer to one (non-blocking) call.
    :param max_connections: HTTP connections to Nomad at once.
    :param event_stream: follow starts through one event stream (``/v1/event/stream``) instead of
        a blocking query per start; a start hears of its job from it.
    :param poll_after: seconds a start waits for news from the stream before it reads Nomad itself.
    """

    name: ClassVar[str] = "nomad"
    keeps_files_across_stop: ClassVar[bool] = False
    network_modes: ClassVar[tuple[str, ...]] = ("bridge",)
    #: A network group's sandboxes would need a network of their own on one node, which Nomad's
    #: docker driver cannot make; the engine refuses ``network_group``, naming this runtime.
    network_groups: ClassVar[bool] = False

    def __init__(
        self,
        *,
        address: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
        region: str | None = None,
        datacenters: Any = ("*",),
        node_pool: str | None = None,
        ca_cert: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
        tls_skip_verify: Any = False,
        sandbox_network: str = SANDBOX_NETWORK,
        job_prefix: str = "rock-",
        mhz_per_cpu: Any = 1000,
        priority: Any = 50,
        kill_timeout: Any = 5.0,
        ephemeral_disk_mb: Any = 300,
        nofile_limit: Any = 16384,
        rocklet_url: str | None = None,
        api_timeout: Any = 30.0,
        max_connections: Any = 512,
        event_stream: Any = True,
        poll_after: Any = 5.0,
    ) -> None:
        self.settings = {
            "address": _setting_source("address", address, "NOMAD_ADDR"),
            "token": _setting_source("token", token, "NOMAD_TOKEN"),
            "namespace": _setting_source("namespace", namespace, "NOMAD_NAMESPACE"),
            "region": _setting_source("region", region, "NOMAD_REGION"),
            "ca_cert": _setting_source("ca_cert", ca_cert, "NOMAD_CACERT"),
            "client_cert": _setting_source("client_cert", client_cert, "NOMAD_CLIENT_CERT"),
        }
        options = NomadOptions.from_table(
            {
                "address": address,
                "token": token,
                "namespace": namespace,
                "region": region,
                "datacenters": datacenters,
                "node_pool": node_pool,
                "ca_cert": ca_cert,
                "client_cert": client_cert,
                "client_key": client_key,
                "tls_skip_verify": tls_skip_verify,
                "sandbox_network": sandbox_network,
                "job_prefix": job_prefix,
                "mhz_per_cpu": mhz_per_cpu,
                "priority": priority,
                "kill_timeout": kill_timeout,
                "ephemeral_disk_mb": ephemeral_disk_mb,
                "nofile_limit": nofile_limit,
                "rocklet_url": rocklet_url,
                "api_timeout": api_timeout,
                "max_connections": max_connections,
                "event_stream": event_stream,
                "poll_after": poll_after,
            }
        )  # every setting read and checked by rock-core's converters, named plugins.nomad.<key>
        self.options = options
        self.address = (
            options.address or os.environ.get("NOMAD_ADDR") or "http://127.0.0.1:4646"
        ).rstrip("/")
        if not self.address.startswith(("http://", "https://")):
            raise InvalidParameter(
                f"{PATH}.address: expected http://host:port or https://host:port, got {self.address!r}",
                field=f"{PATH}.address",
                value=self.address,
            )
        self._token = (
            options.token if options.token is not None else os.environ.get("NOMAD_TOKEN") or None
        )
        self.namespace = options.namespace or os.environ.get("NOMAD_NAMESPACE") or "default"
        self.region = options.region or os.environ.get("NOMAD_REGION") or None
        self.datacenters = options.datacenters
        self.node_pool = options.node_pool or None
        self.ca_cert = options.ca_cert or os.environ.get("NOMAD_CACERT") or None
        self.client_cert = options.client_cert or os.environ.get("NOMAD_CLIENT_CERT") or None
        self.client_key = options.client_key or os.environ.get("NOMAD_CLIENT_KEY") or None
        self.tls_skip_verify = options.tls_skip_verify
        if bool(self.client_cert) != bool(self.client_key):
            raise InvalidParameter(
                f"{PATH}.client_cert and client_key: set both or neither",
                field=f"{PATH}.client_cert",
            )
        self.sandbox_network = options.sandbox_network
        self.job_prefix = options.job_prefix
        self.mhz_per_cpu = options.mhz_per_cpu
        self.priority = options.priority
        self.kill_timeout = options.kill_timeout
        self.ephemeral_disk_mb = options.ephemeral_disk_mb
        self.nofile_limit = options.nofile_limit
        self.rocklet_url = options.rocklet_url or None
        self.api_timeout = options.api_timeout
        self.max_connections = options.max_connections
        self.use_event_stream = options.event_stream
        self.poll_after = options.poll_after
        self._api: NomadApi | None = None
        self._feed: EventFeed | None = None
        self._closed = False
        #: Units created but not started yet: job id -> (job, notes).
        self._created: dict[str, dict[str, Any]] = {}
        #: A running allocation's ports (they never change): alloc id -> Shared.Ports.
        self._ports: dict[str, list[dict[str, Any]]] = {}
        #: Jobs this runtime deregistered (stop): their allocations end without an error.
        self._stopped: set[str] = set()
        #: Each known job's sandbox id and labels (``Name``, ``Meta``), for :meth:`watch`.
        self._known: dict[str, tuple[str, dict[str, str]]] = {}

    def __repr__(self) -> str:
        return f"NomadRuntime(address={self.address!r}, namespace={self.namespace!r})"

    def sandbox_id_problem(self, sandbox_id: str) -> str | None:
        """A sandbox id becomes its job's ID after :attr:`job_prefix`, and its secret's Nomad
        Variable ``nomad/jobs/<job id>``: rock's default rule without ``.`` (a Variable's path
        has none), short enough for the prefix and the path."""
        room = _MAX_JOB_ID - len(self.job_prefix)
        if super().sandbox_id_problem(sandbox_id) is not None or not _VARIABLE_PATH_ID.fullmatch(
            sandbox_id
        ):
            return (
                f"letters, digits, '_', '-'; starting with a letter or digit; at most {room} characters "
                f"(it names a Nomad job and the path of the job's Nomad Variable)"
            )
        if len(sandbox_id) > room:
            return f"at most {room} characters (it names a Nomad job after {self.job_prefix!r} and its Variable)"
        return None

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def api(self) -> NomadApi:
        if self._closed:
            raise RuntimeFailure("the nomad runtime is closed", attempted="nomad call")
        if self._api is None:
            self._api = NomadApi(
                self.address,
                token=self._token,
                namespace=self.namespace,
                region=self.region,
                verify=self._tls(),
                cert=None,
                timeout=self.api_timeout,
                max_connections=self.max_connections,
                settings=self.settings,
            )
        return self._api

    def _tls(self) -> ssl.SSLContext | bool:
        """The TLS context Nomad's API is called with: its certificate checked against
        ``ca_cert`` (else the system's CAs), and ``client_cert``/``client_key`` shown when
        Nomad asks for one (``verify_https_client``).

        :raises RuntimeFailure: a file that cannot be read, naming its setting.
        """
        if not self.address.startswith("https://"):
            return True
        setting = "ca_cert"
        try:
            if self.tls_skip_verify:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context = ssl.create_default_context(cafile=self.ca_cert)
            if self.client_cert and self.client_key:
                setting = "client_cert"
                context.load_cert_chain(self.client_cert, self.client_key)
        except (OSError, ssl.SSLError) as exc:
            value = (
                self.ca_cert
                if setting == "ca_cert"
                else f"{self.client_cert}, key {self.client_key}"
            )
            raise RuntimeFailure(
                f"cannot use the TLS files of {self.settings[setting]} and client_key ({value}): {exc}",
                attempted="nomad call",
            ) from exc
        return context

    @property
    def feed(self) -> EventFeed:
        """The event stream that wakes starts in progress (made on first use)."""
        if self._feed is None:
            self._feed = EventFeed(self.api)
        return self._feed

    def _job_id(self, sandbox_id: str) -> str:
        return f"{self.job_prefix}{sandbox_id}"

    def _path(self, job_id: str) -> str:
        from urllib.parse import quote

        return f"job/{quote(job_id, safe='')}"

    async def _purge(self, job_id: str, sandbox_id: str | None) -> None:
        """Purge a job whose start failed, and its secret; a failure is logged, not raised."""
        if self._feed is not None:
            self._feed.untrack(job_id)
        with anyio.CancelScope(shield=True):
            try:
                await self.api.request(
                    "DELETE",
                    self._path(job_id),
                    params={"purge": True},
                    attempted="remove",
                    sandbox_id=sandbox_id,
                )
            except RuntimeFailure as exc:
                log.warning("could not purge Nomad job %s: %s", job_id, exc)
            await self._forget_secret(job_id, sandbox_id)

    async def _put_secret(self, job_id: str, token: str, sandbox_id: str) -> None:
        """Write the sandbox's secret as its job's Nomad Variable (the job's template reads it)."""
        path = secret_path(job_id)
        await self.api.request(
            "PUT",
            f"var/{path}",
            json={"Namespace": self.namespace, "Path": path, "Items": {SECRET_ITEM: token}},
            attempted="start",
            sandbox_id=sandbox_id,
        )

    async def _forget_secret(self, job_id: str, sandbox_id: str | None) -> None:
        """Delete the sandbox's secret (gone already is fine); a failure is logged, not raised."""
        with anyio.CancelScope(shield=True):
            try:
                await self.api.request(
                    "DELETE",
                    f"var/{secret_path(job_id)}",
                    attempted="remove",
                    sandbox_id=sandbox_id,
                )
            except RuntimeFailure as exc:
                log.warning("could not delete the Nomad Variable %s: %s", secret_path(job_id), exc)

    # -- create and start -----------------------------------------------------------------------

    async def create(
        self,
        spec: SandboxSpec,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
    ) -> UnitHandle:
        """Build the sandbox's job; it is registered by :meth:`start`, where its node pulls the
        image (``image_pull`` waits until then)."""
        if not rocklet_token:
            raise InvalidParameter(
                "rocklet_token: the engine must give every sandbox a secret",
                field="rocklet_token",
                attempted="create",
            )
        sandbox_id = spec.sandbox_id
        if sandbox_id is None:
            raise InvalidParameter(
                "sandbox_id: the engine must choose one before create",
                field="sandbox_id",
                attempted="create",
            )
        network = spec.runtime_options.get("network")
        if network not in (None, *self.network_modes):
            raise InvalidParameter(
                f"network: runtime 'nomad' cannot give sandboxes network {network!r} (it has: "
                f"{', '.join(self.network_modes)})",
                field="network",
                value=network,
                sandbox_id=sandbox_id,
                attempted="create",
            )
        group = spec.runtime_options.get("network_group")
        if group is not None:
            raise InvalidParameter(
                f"network_group: runtime 'nomad' cannot give sandboxes a network group (got {group!r}): its sandboxes "
                "are on no shared network",
                field="network_group",
                value=group,
                sandbox_id=sandbox_id,
                attempted="create",
            )
        delivery = self.rocklet_delivery
        if delivery is None:
            raise RuntimeFailure(
                "the nomad runtime has no rocklet to deliver: the engine hands it one when it opens "
                "(Runtime.use_rocklet); a runtime used alone needs use_rocklet(prepare_rocklet(url=...))",
                sandbox_id=sandbox_id,
                attempted="create",
            )
        url = self.rocklet_url or delivery.url
        if not url:
            raise RuntimeFailure(
                "Nomad's nodes download the rocklet over HTTP, but nothing serves it: run the engine in the admin "
                "(it serves /rocklet.pyz) or set [engine] rocklet_url or plugins.nomad.rocklet_url",
                sandbox_id=sandbox_id,
                attempted="create",
            )
        job_id = self._job_id(sandbox_id)
        job, notes, security = job_for(
            spec,
            job_id=job_id,
            labels=labels,
            rocklet=delivery,
            rocklet_url=url,
            datacenters=self.datacenters,
            node_pool=self.node_pool,
            priority=self.priority,
            mhz_per_cpu=self.mhz_per_cpu,
            kill_timeout=self.kill_timeout,
            ephemeral_disk_mb=self.ephemeral_disk_mb,
            nofile_limit=self.nofile_limit,
            sandbox_network=self.sandbox_network,
        )
        self._created[job_id] = {"job": job, "image": spec.image, "token": rocklet_token}
        self._known[job_id] = (sandbox_id, dict(labels))
        if on_phase is not None:
            on_phase(
                PHASE_IMAGE_PULL,
                Phase(
                    PhaseStatus.WAITING,
                    "the Nomad node the sandbox is placed on pulls the image at start",
                ),
            )
        return UnitHandle(
            runtime=self.name,
            unit_id=job_id,
            sandbox_id=sandbox_id,
            notes=tuple(notes),
            labels=dict(labels),
            state=UnitState.CREATED,
            security=security,
        )

    async def start(
        self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None
    ) -> RuntimeStatus | None:
        """Register the job, follow its evaluation and allocation to ``running`` (see the module docstring)."""
        job_id, sandbox_id = handle.unit_id, handle.sandbox_id
        made = self._created.get(job_id)
        if made is None:
            # Never created here, or already started: a job that exists cannot be started again.
            jobs = await self.api.get_json(
                self._path(job_id),
                attempted="start",
                sandbox_id=sandbox_id,
                not_found=f"sandbox {sandbox_id} has no Nomad job {job_id}",
            )
            if not jobs.get("Stop"):
                return None  # already started: the engine inspects it
            raise RuntimeFailure(
                f"runtime 'nomad' cannot start sandbox {sandbox_id} again: its job {job_id} was stopped and a Nomad "
                "unit keeps no files across a stop",
                sandbox_id=sandbox_id,
                attempted="start",
            )

        def phase(status: PhaseStatus, message: str) -> None:
            if on_phase is not None:
                on_phase(PHASE_IMAGE_PULL, Phase(status, message))

        phase(PhaseStatus.RUNNING, "registering the sandbox's Nomad job")
        streaming = self.use_event_stream and await self.feed.ready()
        if streaming:
            self.feed.track(job_id)
        with self.feed.watch(job_id) as watch:
            try:
                # The secret first: the job's template reads it when the task starts.
                await self._put_secret(job_id, made["token"], sandbox_id)
                answer = (
                    await self.api.request(
                        "POST",
                        "jobs",
                        json={"Job": made["job"], "EnforceIndex": True, "JobModifyIndex": 0},
                        attempted="start",
                        sandbox_id=sandbox_id,
                    )
                ).json()
            except BaseException:
                # Not registered: the job is not ours to purge (it may exist already), its secret is.
                self.feed.untrack(job_id)
                await self._forget_secret(job_id, sandbox_id)
                raise
            self._created.pop(job_id, None)
            try:
                poll = self.poll_after if streaming else 0.0
                alloc = await self._placed(watch, answer.get("EvalID") or "", sandbox_id, poll)
                phase(
                    PhaseStatus.RUNNING,
                    f"placed on Nomad node {alloc.get('NodeName')}; it gets the image {made['image']}",
                )
                alloc = await self._follow(watch, alloc, sandbox_id, poll)
                if alloc.get("ClientStatus") != "running":
                    raise self._start_failure(alloc, made["image"], sandbox_id)
                phase(
                    PhaseStatus.SUCCESS,
                    f"image {made['image']} ready on Nomad node {alloc.get('NodeName')}",
                )
                ports = list(
                    ((alloc.get("AllocatedResources") or {}).get("Shared") or {}).get("Ports") or []
                )
                if not ports:  # a stub without resources: read the allocation once
                    full = await self.api.get_json(
                        f"allocation/{alloc['ID']}", attempted="start", sandbox_id=sandbox_id
                    )
                    ports = list(
                        ((full.get("AllocatedResources") or {}).get("Shared") or {}).get("Ports")
                        or []
                    )
                self._ports[alloc["ID"]] = ports
                return status_of(alloc, ports=ports, stopped_by_us=False)
            except BaseException as exc:
                # Purged before the failure is told: nothing is left once a caller hears of it.
                await self._purge(job_id, sandbox_id)
                if isinstance(exc, ImagePullFailed):
                    phase(PhaseStatus.FAILED, exc.message)
                raise

    async def _heard(self, watch: JobWatch, poll: float) -> bool:
        """Wait for news of the watched job; ``False`` when none came within ``poll`` seconds
        (then the caller reads Nomad itself). ``poll`` 0: no stream, read at once (blocking)."""
        return poll > 0 and await watch.changed(poll)

    async def _placed(
        self, watch: JobWatch, eval_id: str, sandbox_id: str, poll: float
    ) -> dict[str, Any]:
        """Follow the register evaluation until the scheduler is done; the allocation it placed.

        :raises RuntimeFailure: nothing fits: Nomad's reason (``FailedTGAllocs``).
        """
        index = 1
        while True:
            evaluation = watch.evals.get(eval_id)
            if (
                evaluation is None
                or evaluation.get("Status") in ("pending", "blocked")
                and not evaluation.get("FailedTGAllocs")
            ):
                if not await self._heard(watch, poll):
                    # No stream, or no news for a while: ask Nomad (blocking only without a stream).
                    read, index = await self.api.blocking(
                        f"evaluation/{eval_id}",
                        index if poll == 0 else 0,
                        _BLOCK,
                        attempted="start",
                        sandbox_id=sandbox_id,
                        namespaced=False,
                    )
                    watch.update("Evaluation", read)
                continue
            status = evaluation.get("Status")
            if evaluation.get("FailedTGAllocs"):
                raise RuntimeFailure(
                    describe_placement_failure(evaluation["FailedTGAllocs"]),
                    sandbox_id=sandbox_id,
                    attempted="start",
                )
            if status in ("failed", "canceled"):
                raise RuntimeFailure(
                    f"Nomad's evaluation of job {watch.job_id} {status}: "
                    f"{evaluation.get('StatusDescription') or 'no reason given'}",
                    sandbox_id=sandbox_id,
                    attempted="start",
                )
            break
        alloc = latest_alloc([a for a in watch.allocs.values() if a.get("EvalID") == eval_id])
        if alloc is None:
            allocs = await self.api.get_json(
                f"evaluation/{eval_id}/allocations",
                attempted="start",
                sandbox_id=sandbox_id,
                namespaced=False,
            )
            alloc = latest_alloc([a for a in allocs if a.get("JobID") == watch.job_id])
        if alloc is None:
            raise RuntimeFailure(
                f"Nomad's evaluation of job {watch.job_id} completed without placing it",
                sandbox_id=sandbox_id,
                attempted="start",
            )
        return dict(alloc)

    async def _follow(
        self, watch: JobWatch, alloc: Mapping[str, Any], sandbox_id: str, poll: float
    ) -> dict[str, Any]:
        """Follow an allocation until its client is done pulling and starting: ``running``, or ended."""
        alloc_id = alloc["ID"]
        index = 1
        while True:
            current = watch.allocs.get(alloc_id) or alloc
            if current.get("ClientStatus") != "pending" or current.get("DesiredStatus") != "run":
                return dict(current)
            if not await self._heard(watch, poll):
                read, index = await self.api.blocking(
                    f"allocation/{alloc_id}",
                    index if poll == 0 else 0,
                    _BLOCK,
                    attempted="start",
                    sandbox_id=sandbox_id,
                )
                watch.update("Allocation", read)

    def _start_failure(
        self, alloc: Mapping[str, Any], image: str, sandbox_id: str
    ) -> RuntimeFailure:
        reason, image_failed = failure_of(alloc)
        if image_failed:
            return ImagePullFailed(
                f"Failed to pull image {image} on Nomad node {alloc.get('NodeName')}: {reason}",
                sandbox_id=sandbox_id,
                attempted="start",
            )
        status = status_of(alloc, ports=None, stopped_by_us=False)
        why = status.error or (
            f"exit code {status.exit_code}"
            if status.exit_code is not None
            else alloc.get("ClientStatus")
        )
        return RuntimeFailure(
            f"the sandbox's Nomad task did not start on node {alloc.get('NodeName')}: {why}",
            sandbox_id=sandbox_id,
            attempted="start",
        )

    # -- stop, remove ---------------------------------------------------------------------------

    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """Deregister the job (Nomad sends SIGTERM, then kills after ``kill_timeout``) and wait,
        at most ``timeout`` plus that, for its allocation to end."""
        job_id = handle.unit_id
        if self._created.pop(job_id, None) is not None:
            return
        self._stopped.add(job_id)
        if self._feed is not None:
            self._feed.untrack(job_id)
        # Heard through the event stream when it is up (many stops at once hold no connection
        # each); read from Nomad after poll_after seconds of silence, or at once without it.
        streaming = self._feed is not None and self._feed.connected
        poll = self.poll_after if streaming else 0.0
        with self.feed.watch(job_id) as watch:
            await self.api.request(
                "DELETE", self._path(job_id), attempted="stop", sandbox_id=handle.sandbox_id
            )
            allocs = await self.api.get_json(
                f"{self._path(job_id)}/allocations", attempted="stop", sandbox_id=handle.sandbox_id
            )
            alloc = latest_alloc(allocs)
            if alloc is None:
                return
            with anyio.move_on_after(max(timeout, 0) + self.kill_timeout + 10):
                index = 1
                while True:
                    current = watch.allocs.get(alloc["ID"]) or alloc
                    if current.get("ClientStatus") not in ("pending", "running"):
                        return
                    if not await self._heard(watch, poll):
                        read, index = await self.api.blocking(
                            f"allocation/{alloc['ID']}",
                            index if poll == 0 else 0,
                            _BLOCK,
                            attempted="stop",
                            sandbox_id=handle.sandbox_id,
                            not_found=f"sandbox {handle.sandbox_id}'s allocation is gone",
                        )
                        watch.update("Allocation", read)

    async def remove(self, handle: UnitHandle) -> None:
        """Purge the job (its allocation is stopped if it still runs) and delete its secret's
        Variable; gone already is fine."""
        job_id = handle.unit_id
        if self._created.pop(job_id, None) is not None:
            return
        await self.api.request(
            "DELETE",
            self._path(job_id),
            params={"purge": True},
            attempted="remove",
            sandbox_id=handle.sandbox_id,
        )
        await self.api.request(
            "DELETE", f"var/{secret_path(job_id)}", attempted="remove", sandbox_id=handle.sandbox_id
        )
        self._stopped.discard(job_id)
        if self._feed is not None:
            self._feed.untrack(job_id)

    # -- inspect, list, logs --------------------------------------------------------------------

    async def _allocs(self, job_id: str, sandbox_id: str, attempted: str) -> list[dict[str, Any]]:
        return list(
            await self.api.get_json(
                f"{self._path(job_id)}/allocations", attempted=attempted, sandbox_id=sandbox_id
            )
        )

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """The job's newest allocation as a unit status; ``missing`` when the job is gone."""
        job_id, sandbox_id = handle.unit_id, handle.sandbox_id
        if job_id in self._created:
            return RuntimeStatus(state=UnitState.CREATED)
        heard = (
            self._feed.latest.get(job_id)
            if self._feed is not None and self._feed.connected
            else None
        )
        if (
            heard is not None
            and job_id not in self._stopped
            and heard.get("ClientStatus") == "running"
            and heard.get("DesiredStatus") == "run"
            and heard.get("ID") in self._ports
        ):
            # The event stream is up and its newest word on the job is "running": no need to ask
            # (the engine inspects every half second while it waits for a rocklet). Anything else
            # is read from Nomad.
            return status_of(heard, ports=self._ports[heard["ID"]], stopped_by_us=False)
        alloc = latest_alloc(await self._allocs(job_id, sandbox_id, "inspect"))
        if (
            alloc is None
            or job_id in self._stopped
            and alloc.get("ClientStatus") in ("pending", "running")
        ):
            try:
                job = await self.api.get_json(
                    self._path(job_id), attempted="inspect", sandbox_id=sandbox_id, not_found="gone"
                )
            except SandboxNotFound:
                return RuntimeStatus(state=UnitState.MISSING, error=f"Nomad job {job_id} is gone")
            if alloc is None:
                # Registered, not placed yet (or stopped before it was).
                return RuntimeStatus(
                    state=UnitState.EXITED if job.get("Stop") else UnitState.CREATED
                )
        stopped = job_id in self._stopped
        ports = None
        if (
            alloc.get("ClientStatus") == "running"
            and alloc.get("DesiredStatus") == "run"
            and not stopped
        ):
            ports = self._ports.get(alloc["ID"])
            if ports is None:
                full = await self.api.get_json(
                    f"allocation/{alloc['ID']}", attempted="inspect", sandbox_id=sandbox_id
                )
                ports = list(
                    ((full.get("AllocatedResources") or {}).get("Shared") or {}).get("Ports") or []
                )
                self._ports[alloc["ID"]] = ports
        else:
            self._ports.pop(alloc["ID"], None)
        return status_of(alloc, ports=ports, stopped_by_us=stopped)

    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """Every sandbox job (by :attr:`job_prefix`) whose ``Meta`` has all of ``labels``: one call."""
        jobs = await self.api.get_json(
            "jobs", params={"prefix": self.job_prefix, "meta": True}, attempted="list"
        )
        found: list[UnitHandle] = []
        wanted = dict(labels)
        for stub in jobs:
            meta = stub.get("Meta") or {}
            if any(meta.get(k) != v for k, v in wanted.items()):
                continue
            found.append(
                UnitHandle(
                    runtime=self.name,
                    unit_id=stub["ID"],
                    sandbox_id=stub.get("Name") or stub["ID"],
                    labels=dict(meta),
                    state=_listed_state(stub),
                )
            )
            self._known[stub["ID"]] = (stub.get("Name") or stub["ID"], dict(meta))
        listed = {h.unit_id for h in found}
        for job_id, made in list(self._created.items()):
            meta = made["job"].get("Meta") or {}
            if job_id not in listed and all(meta.get(k) == v for k, v in wanted.items()):
                found.append(
                    UnitHandle(
                        runtime=self.name,
                        unit_id=job_id,
                        sandbox_id=made["job"]["Name"],
                        labels=dict(meta),
                        state=UnitState.CREATED,
                    )
                )
        return found

    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """The task's stdout then stderr (Nomad keeps them apart), the last ``tail`` lines."""
        job_id, sandbox_id = handle.unit_id, handle.sandbox_id
        if job_id in self._created:
            return ""
        alloc = latest_alloc(await self._allocs(job_id, sandbox_id, "logs"))
        if alloc is None:
            # Raises SandboxNotFound when the job is gone; a job not placed yet has no output.
            await self.api.get_json(
                self._path(job_id),
                attempted="logs",
                sandbox_id=sandbox_id,
                not_found=f"sandbox {sandbox_id} has no Nomad job {job_id}",
            )
            return ""
        texts = []
        for kind in ("stdout", "stderr"):
            try:
                response = await self.api.request(
                    "GET",
                    f"client/fs/logs/{alloc['ID']}",
                    params={"task": "rocklet", "type": kind, "plain": True},
                    attempted="logs",
                    sandbox_id=sandbox_id,
                )
            except NomadError as exc:
                if exc.status == 404:
                    continue  # the node is gone, or nothing was written
                raise
            texts.append(response.text)
        text = "".join(t if t.endswith("\n") or not t else t + "\n" for t in texts)
        if tail is None:
            return text
        lines = text.splitlines(keepends=True)
        return "".join(lines[-tail:]) if tail > 0 else ""

    # -- watch ----------------------------------------------------------------------------------

    def watch(self, labels: Mapping[str, str]) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        """Units carrying ``labels`` that stop (their allocation fails, is lost, OOM-killed or
        ends) or vanish (their job purged), as Nomad's event stream tells it: ``exited`` with
        the allocation's reason, or ``missing``. Close it with ``aclose()``.

        :raises NotSupported: ``event_stream = false`` (the engine's reconcile then polls).
        """
        if not self.use_event_stream:
            raise NotSupported(
                "runtime 'nomad' watches its units through Nomad's event stream, which "
                "plugins.nomad.event_stream turns off",
                attempted="watch",
            )
        return self._watch(dict(labels))

    async def _watch(
        self, labels: dict[str, str]
    ) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        feed = self.feed
        queue = feed.subscribe()
        try:
            await feed.ready()
            while True:
                topic, kind, obj = await queue.get()
                job_id = str((obj.get("JobID") if topic == "Allocation" else obj.get("ID")) or "")
                if not job_id.startswith(self.job_prefix):
                    continue
                if topic == "Allocation":
                    if (
                        obj.get("ClientStatus") in ("pending", "running")
                        and obj.get("DesiredStatus") == "run"
                    ):
                        continue
                    known = await self._known_job(job_id)
                    if known is None or any(known[1].get(k) != v for k, v in labels.items()):
                        continue
                    status = status_of(obj, ports=None, stopped_by_us=job_id in self._stopped)
                elif topic == "Job" and kind == "JobDeregistered":
                    known = self._known.get(job_id) or (
                        str(obj.get("Name") or job_id),
                        dict(obj.get("Meta") or {}),
                    )
                    if any(known[1].get(k) != v for k, v in labels.items()):
                        continue
                    try:
                        await self.api.get_json(
                            self._path(job_id), attempted="watch", not_found="gone"
                        )
                        continue  # stopped, not purged: its allocation's end tells the rest
                    except SandboxNotFound:
                        status = RuntimeStatus(
                            state=UnitState.MISSING, error=f"Nomad job {job_id} was purged"
                        )
                    self._known.pop(job_id, None)
                else:
                    continue
                handle = UnitHandle(
                    runtime=self.name, unit_id=job_id, sandbox_id=known[0], labels=known[1]
                )
                yield handle, status
        finally:
            feed.unsubscribe(queue)

    async def _known_job(self, job_id: str) -> tuple[str, dict[str, str]] | None:
        known = self._known.get(job_id)
        if known is None:
            try:
                job = await self.api.get_json(
                    self._path(job_id), attempted="watch", not_found="gone"
                )
            except SandboxNotFound:
                return None
            known = self._known[job_id] = (
                str(job.get("Name") or job_id),
                dict(job.get("Meta") or {}),
            )
        return known

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client; the runtime refuses calls afterwards. Idempotent."""
        api, self._api, self._closed = self._api, None, True
        feed, self._feed = self._feed, None
        if feed is not None:
            await feed.aclose()
        if api is not None:
            await api.aclose()


def _listed_state(stub: Mapping[str, Any]) -> UnitState | None:
    """A job stub's unit state, where the listing says it: ``running``, ``exited`` or unknown."""
    summary = ((stub.get("JobSummary") or {}).get("Summary") or {}).get("sandbox") or {}
    if stub.get("Stop") or stub.get("Status") == "dead":
        return UnitState.EXITED
    if summary.get("Running") and not (
        summary.get("Failed") or summary.get("Lost") or summary.get("Complete")
    ):
        return UnitState.RUNNING
    return None
