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

import inspect
import logging
import re
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
from rock_nomad._api import NomadApi, decode_json
from rock_nomad._connection import Connection
from rock_nomad._events import EventFeed
from rock_nomad._job import (
    job_for,
    job_path,
    latest_alloc,
    secret_path,
    status_of,
)
from rock_nomad._observation import FirstListing, listed_state, task_logs
from rock_nomad._options import NomadOptions
from rock_nomad._placement import BLOCK, follow, heard, placed, start_failure
from rock_nomad._secrets import forget_secret, put_secret
from rock_nomad._unit_watch import KnownJobs, watch_units

__all__ = ["NomadRuntime"]

log = logging.getLogger("rock.nomad")

# Nomad job ids: no spaces or NUL; rock narrows them to what a Nomad Variable's path holds, since
# each sandbox's secret is the Variable nomad/jobs/<job id> (at most 128 characters in all).
_MAX_JOB_ID = 128 - len(secret_path(""))
_VARIABLE_PATH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class NomadRuntime(Runtime):
    """Sandboxes as Nomad jobs (see the module docstring and the README's settings table).

    Built with the keyword arguments :class:`~rock_nomad._options.NomadOptions` describes, read
    by rock-core's converters (a bad one named ``plugins.nomad.<key>``) and kept as
    :attr:`options`; :attr:`connection` is where and how Nomad is reached, ``NOMAD_*``
    variables filling what the settings leave unset.
    """

    name: ClassVar[str] = "nomad"
    keeps_files_across_stop: ClassVar[bool] = False
    network_modes: ClassVar[tuple[str, ...]] = ("bridge",)
    #: A network group's sandboxes would need a network of their own on one node, which Nomad's
    #: docker driver cannot make; the engine refuses ``network_group``, naming this runtime.
    network_groups: ClassVar[bool] = False
    #: The constructor takes :class:`NomadOptions`' fields, so an engine names an unknown one.
    __signature__: ClassVar[inspect.Signature] = inspect.signature(NomadOptions)

    def __init__(self, **settings: Any) -> None:
        self.options = NomadOptions.from_table(settings)
        self.connection = Connection.from_options(self.options)
        self._api: NomadApi | None = None
        self._feed: EventFeed | None = None
        self._closed = False
        #: Units created but not started yet: job id -> (job, notes).
        self._created: dict[str, dict[str, Any]] = {}
        #: A running allocation's ports (they never change): alloc id -> Shared.Ports.
        self._ports: dict[str, list[dict[str, Any]]] = {}
        self._listing = FirstListing()  # the first listing reads every sandbox allocation
        #: Jobs this runtime deregistered (stop): their allocations end without an error.
        self._stopped: set[str] = set()
        #: Each known job's sandbox id and labels (``Name``, ``Meta``), for :meth:`watch`.
        self._known: KnownJobs = {}

    @property
    def address(self) -> str:
        """Nomad's HTTP API (``address``, else ``NOMAD_ADDR``, else ``http://127.0.0.1:4646``)."""
        return self.connection.address

    @property
    def namespace(self) -> str:
        """The sandboxes' namespace (``namespace``, else ``NOMAD_NAMESPACE``, else ``default``)."""
        return self.connection.namespace

    def __repr__(self) -> str:
        return f"NomadRuntime(address={self.address!r}, namespace={self.namespace!r})"

    def sandbox_id_problem(self, sandbox_id: str) -> str | None:
        """A sandbox id becomes its job's ID after ``job_prefix``, and its secret's Nomad
        Variable ``nomad/jobs/<job id>``: rock's default rule without ``.`` (a Variable's path
        has none), short enough for the prefix and the path."""
        prefix = self.options.job_prefix
        room = _MAX_JOB_ID - len(prefix)
        if super().sandbox_id_problem(sandbox_id) is not None or not _VARIABLE_PATH_ID.fullmatch(
            sandbox_id
        ):
            return (
                f"letters, digits, '_', '-'; starting with a letter or digit; at most {room} characters "
                f"(it names a Nomad job and the path of the job's Nomad Variable)"
            )
        if len(sandbox_id) > room:
            return f"at most {room} characters (it names a Nomad job after {prefix!r} and its Variable)"
        return None

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def api(self) -> NomadApi:
        """The client of Nomad's API, made on first use.

        :raises RuntimeFailure: the runtime is closed, or a TLS file cannot be read.
        """
        if self._closed:
            raise RuntimeFailure("the nomad runtime is closed", attempted="nomad call")
        if self._api is None:
            self._api = self.connection.open_api(
                timeout=self.options.api_timeout, max_connections=self.options.max_connections
            )
        return self._api

    @property
    def feed(self) -> EventFeed:
        """The event stream that wakes starts in progress (made on first use)."""
        if self._feed is None:
            self._feed = EventFeed(self.api)
        return self._feed

    def _job_id(self, sandbox_id: str) -> str:
        return f"{self.options.job_prefix}{sandbox_id}"

    async def _purge(self, job_id: str, sandbox_id: str | None) -> None:
        """Purge a job whose start failed, and its secret; a failure is logged, not raised."""
        if self._feed is not None:
            self._feed.untrack(job_id)
        with anyio.CancelScope(shield=True):
            try:
                await self.api.request(
                    "DELETE",
                    job_path(job_id),
                    params={"purge": True},
                    attempted="remove",
                    sandbox_id=sandbox_id,
                )
            except RuntimeFailure as exc:
                log.warning("could not purge Nomad job %s: %s", job_id, exc)
            await forget_secret(self.api, job_id, sandbox_id)

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
        url = self.options.rocklet_url or delivery.url
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
            datacenters=self.options.datacenters,
            node_pool=self.options.node_pool or None,
            priority=self.options.priority,
            mhz_per_cpu=self.options.mhz_per_cpu,
            kill_timeout=self.options.kill_timeout,
            ephemeral_disk_mb=self.options.ephemeral_disk_mb,
            nofile_limit=self.options.nofile_limit,
            sandbox_network=self.options.sandbox_network,
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
                job_path(job_id),
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
        streaming = self.options.event_stream and await self.feed.ready()
        if streaming:
            self.feed.track(job_id)
        with self.feed.watch(job_id) as watch:
            try:
                # The secret first: the job's template reads it when the task starts.
                await put_secret(self.api, self.namespace, job_id, made["token"], sandbox_id)
                answer = decode_json(
                    await self.api.request(
                        "POST",
                        "jobs",
                        json={"Job": made["job"], "EnforceIndex": True, "JobModifyIndex": 0},
                        attempted="start",
                        sandbox_id=sandbox_id,
                    )
                )
            except BaseException:
                # Not registered: the job is not ours to purge (it may exist already), its secret is.
                self.feed.untrack(job_id)
                await forget_secret(self.api, job_id, sandbox_id)
                raise
            self._created.pop(job_id, None)
            try:
                poll = self.options.poll_after if streaming else 0.0
                alloc = await placed(self.api, watch, answer.get("EvalID") or "", sandbox_id, poll)
                phase(
                    PhaseStatus.RUNNING,
                    f"placed on Nomad node {alloc.get('NodeName')}; it gets the image {made['image']}",
                )
                alloc = await follow(self.api, watch, alloc, sandbox_id, poll)
                if alloc.get("ClientStatus") != "running":
                    raise start_failure(alloc, made["image"], sandbox_id)
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
        poll = self.options.poll_after if streaming else 0.0
        with self.feed.watch(job_id) as watch:
            await self.api.request(
                "DELETE", job_path(job_id), attempted="stop", sandbox_id=handle.sandbox_id
            )
            allocs = await self.api.get_json(
                f"{job_path(job_id)}/allocations", attempted="stop", sandbox_id=handle.sandbox_id
            )
            alloc = latest_alloc(allocs)
            if alloc is None:
                return
            alloc_id = alloc["ID"]

            def ended() -> bool:  # the news the wait is for: no other wakes it
                told = watch.allocs.get(alloc_id)
                return told is not None and told.get("ClientStatus") not in ("pending", "running")

            with anyio.move_on_after(max(timeout, 0) + self.options.kill_timeout + 10):
                index = 1
                while True:
                    current = watch.allocs.get(alloc_id) or alloc
                    if current.get("ClientStatus") not in ("pending", "running"):
                        return
                    if not await heard(watch, poll, ended):
                        read, index = await self.api.blocking(
                            f"allocation/{alloc['ID']}",
                            index if poll == 0 else 0,
                            BLOCK,
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
            job_path(job_id),
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
                f"{job_path(job_id)}/allocations", attempted=attempted, sandbox_id=sandbox_id
            )
        )

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """The job's newest allocation as a unit status; ``missing`` when the job is gone."""
        job_id, sandbox_id = handle.unit_id, handle.sandbox_id
        if job_id in self._created:
            return RuntimeStatus(state=UnitState.CREATED)
        heard = self._listing.take(job_id) or (
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
                    job_path(job_id), attempted="inspect", sandbox_id=sandbox_id, not_found="gone"
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
        """Every sandbox job (by ``job_prefix``) whose ``Meta`` has all of ``labels``: one call."""
        jobs = await self.api.get_json(
            "jobs", params={"prefix": self.options.job_prefix, "meta": True}, attempted="list"
        )
        if not self._listing.done:  # a restarted admin's recovery inspects each one next
            await self._listing.read(self.api, self.options.job_prefix, self._ports)
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
                    state=listed_state(stub),
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
                job_path(job_id),
                attempted="logs",
                sandbox_id=sandbox_id,
                not_found=f"sandbox {sandbox_id} has no Nomad job {job_id}",
            )
            return ""
        return await task_logs(self.api, alloc["ID"], sandbox_id, tail)

    # -- watch ----------------------------------------------------------------------------------

    def watch(self, labels: Mapping[str, str]) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
        """Units carrying ``labels`` that stop (their allocation fails, is lost, OOM-killed or
        ends) or vanish (their job purged), as Nomad's event stream tells it: ``exited`` with
        the allocation's reason, or ``missing``. Close it with ``aclose()``.

        :raises NotSupported: ``event_stream = false`` (the engine's reconcile then polls).
        """
        if not self.options.event_stream:
            raise NotSupported(
                "runtime 'nomad' watches its units through Nomad's event stream, which "
                "plugins.nomad.event_stream turns off",
                attempted="watch",
            )
        return watch_units(
            self.feed,
            self.api,
            dict(labels),
            runtime=self.name,
            job_prefix=self.options.job_prefix,
            known=self._known,
            stopped=self._stopped,
        )

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client; the runtime refuses calls afterwards. Idempotent."""
        api, self._api, self._closed = self._api, None, True
        feed, self._feed = self._feed, None
        if feed is not None:
            await feed.aclose()
        if api is not None:
            await api.aclose()
