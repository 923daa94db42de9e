""":class:`StandInNomad`: a stand-in Nomad server for tests and benches, on real Docker.

It serves Nomad's HTTP API on ``127.0.0.1:<free port>`` from a thread of its own (its own
event loop, uvicorn), simulates several client nodes with limited CPU and memory, each on its
own loopback address (``127.0.0.2``, ``127.0.0.3``, …), and runs every task as a real container
on the local Docker engine with its ports published on its node's address. Test hooks inject
faults (image pull failure, task exit, OOM kill, node lost) and add nodes or ACL tokens.

Its nodes are prepared as ``deploy/nomad/`` prepares a real client for rock (unless told
otherwise): a Docker network ``rock-sandboxes`` without inter-container traffic, and the node
``meta`` ``rock_sandbox_network`` naming it. With ``tls`` it serves its API over HTTPS, and
asks for a client certificate when given a CA for them, as a Nomad agent with
``verify_https_client`` does.

Every container it makes carries ``nomad-stand-in.server=<this server's id>`` and
``nomad-stand-in.owner=<host>:<pid>:<process start>``; :meth:`StandInNomad.close` removes its
own, and :meth:`StandInNomad.start` removes those whose owning process is gone (a stand-in
that crashed). Nothing it makes carries rock's ``rock.*`` labels.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors

from rock_nomad._job import NETWORK_META, SANDBOX_NETWORK
from rock_nomad.testing._client import (
    LABEL_SERVER,
    DockerClientSim,
    Faults,
    remove_dir,
)
from rock_nomad.testing._cluster import Cluster, NodeSpec
from rock_nomad.testing._leftovers import (
    WORK_DIR_PREFIX,
    owner_tag,
    remove_leftovers,
    remove_network,
)
from rock_nomad.testing._simulated import SimulatedClient

__all__ = ["StandInNomad", "owner_tag", "remove_leftovers"]

log = logging.getLogger("rock_nomad.testing")

T = TypeVar("T")
#: The Docker networks of a node prepared for rock (deploy/nomad/client-setup.sh makes it).
ROCK_NODE_NETWORKS = {SANDBOX_NETWORK: {"com.docker.network.bridge.enable_icc": "false"}}
#: The node meta of a node prepared for rock: the sandboxes' jobs are constrained to it.
ROCK_NODE_META = {NETWORK_META: SANDBOX_NETWORK}


class StandInNomad:
    """A stand-in Nomad server (see the module docstring). Use it as a context manager::

        with StandInNomad(nodes=3) as nomad:
            httpx.get(f"{nomad.address}/v1/nodes")

    :param nodes: how many client nodes to simulate at start (more with :meth:`add_node`).
    :param node_cpu: each node's CPU in MHz (Nomad's ``cpu.totalcompute``).
    :param node_cores: each node's core count.
    :param node_memory: each node's memory in MB.
    :param node_disk: each node's disk in MB (groups ask ``EphemeralDisk.SizeMB``, 300 by default).
    :param first_address: the first node's loopback address; the next nodes count up from it.
    :param host: the address the API listens on; ``port`` 0 picks a free port.
    :param acl: require ACL tokens; :attr:`management_token` is a token allowed everything.
    :param management_token: the secret of that token (a random UUID by default).
    :param algorithm: ``"binpack"`` (Nomad's default: fill the fullest node that fits) or
        ``"spread"`` (the emptiest node), as Nomad's scheduler configuration allows.
    :param scheduler_delay: seconds the scheduler waits before each evaluation (load).
    :param start_delay: seconds each client waits before it sets up a new allocation.
    :param node_networks: each node's Docker networks besides ``bridge`` (name → driver
        options); default :data:`ROCK_NODE_NETWORKS`, ``{}`` for a node nobody prepared.
    :param node_meta: each node's ``meta``; default :data:`ROCK_NODE_META`.
    :param tls: ``(certificate, key)`` files: serve the API over HTTPS (:attr:`address` says
        ``https://``).
    :param tls_client_ca: a CA file: require a client certificate it signed (mutual TLS).
    :param simulate_tasks: ``(lo, hi)`` seconds: tasks run nothing, without Docker; each starts
        after a random ``lo..hi`` seconds and its ports are served by one real rocklet in this
        process (:mod:`~rock_nomad.testing._simulated`), for control-plane benches.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        node_cpu: int = 4000,
        node_cores: int = 4,
        node_memory: int = 4096,
        node_disk: int = 100_000,
        datacenter: str = "dc1",
        first_address: str = "127.0.0.2",
        host: str = "127.0.0.1",
        port: int = 0,
        acl: bool = False,
        management_token: str | None = None,
        region: str = "global",
        namespaces: Iterable[str] = ("default",),
        algorithm: str = "binpack",
        scheduler_delay: float = 0.0,
        start_delay: float = 0.0,
        docker_client: docker.DockerClient | None = None,
        seed: int | None = None,
        node_networks: dict[str, dict[str, str]] | None = None,
        node_meta: dict[str, str] | None = None,
        tls: tuple[str, str] | None = None,
        tls_client_ca: str | None = None,
        simulate_tasks: tuple[float, float] | None = None,
    ) -> None:
        if algorithm not in ("binpack", "spread"):
            raise ValueError(f"algorithm must be 'binpack' or 'spread', not {algorithm!r}")
        self.host = host
        self.port = port
        self.acl = acl
        self.region = region
        self.server_id = uuid.uuid4().hex[:12]
        self.owner = owner_tag()
        self.management_token = management_token or str(uuid.uuid4())
        self.tokens: dict[str, dict[str, Any]] = {}
        self.faults = Faults(start_delay=start_delay)
        self._initial_nodes = nodes
        self._node_defaults = {
            "cpu_mhz": node_cpu,
            "cores": node_cores,
            "memory_mb": node_memory,
            "disk_mb": node_disk,
            "datacenter": datacenter,
            "docker_networks": ROCK_NODE_NETWORKS if node_networks is None else node_networks,
            "meta": ROCK_NODE_META if node_meta is None else node_meta,
        }
        if tls_client_ca is not None and tls is None:
            raise ValueError(
                "tls_client_ca needs tls: a client certificate is asked for in a TLS handshake"
            )
        self.tls = tls
        self.tls_client_ca = tls_client_ca
        self.simulate_tasks = simulate_tasks
        self._next_address = [int(p) for p in first_address.split(".")]
        self._cluster_args: dict[str, Any] = {
            "region": region,
            "namespaces": tuple(namespaces),
            "algorithm": algorithm,
            "scheduler_delay": scheduler_delay,
            "seed": seed,
        }
        self._docker = docker_client
        self._own_docker = docker_client is None
        self.cluster: Cluster | None = None
        self.client: DockerClientSim | SimulatedClient | None = None
        self.work_dir: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._events_thread: threading.Thread | None = None
        self._events: Any = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._node_count = 0
        self._add_token(
            self.management_token,
            "management",
            name="stand-in management token",
            rights=("read", "write"),
        )

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The API's base URL, e.g. ``http://127.0.0.1:41234`` (what ``NOMAD_ADDR`` holds)."""
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def docker(self) -> docker.DockerClient:
        if self._docker is None:
            # A pool as large as the client's worker threads (16) plus the events stream.
            self._docker = docker.from_env(timeout=120, max_pool_size=32)
        return self._docker

    def start(self) -> StandInNomad:
        """Remove a crashed stand-in's leftovers, then serve; returns ``self``."""
        if self._thread is not None:
            return self
        if self.simulate_tasks is None:
            self.docker.ping()
            remove_leftovers(self.docker)
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"{WORK_DIR_PREFIX}{os.getpid()}-"))
        (self.work_dir / "owner").write_text(self.owner + "\n")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        if self.simulate_tasks is None:
            self._events = self.docker.events(
                decode=True,
                filters={
                    "type": "container",
                    "label": f"{LABEL_SERVER}={self.server_id}",
                    "event": ["die", "oom"],
                },
            )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(sock,), name="stand-in nomad", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self.close()
            raise RuntimeError(
                f"the stand-in Nomad server did not start: {self._failure}"
            ) from self._failure
        if self._events is not None:
            self._events_thread = threading.Thread(
                target=self._pump_events, name="stand-in docker events", daemon=True
            )
            self._events_thread.start()
        atexit.register(self.close)  # a process that forgets close() still removes its containers
        return self

    def __enter__(self) -> StandInNomad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self, sock: socket.socket) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(sock))
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged
            if not self._ready.is_set():
                self._failure = exc
            else:
                log.exception("the stand-in Nomad server stopped on an error")
        finally:
            self._ready.set()
            self._loop.close()

    async def _main(self, sock: socket.socket) -> None:
        import uvicorn

        from rock_nomad.testing._http import Api
        from rock_nomad.testing._http_writes import coalescing_http_protocol

        assert self.work_dir is not None
        self._stop = asyncio.Event()
        self.cluster = Cluster(**self._cluster_args)
        if self.simulate_tasks is not None:
            self.client = SimulatedClient(
                self.cluster,
                work_dir=self.work_dir,
                start_seconds=self.simulate_tasks,
                faults=self.faults,
            )
        else:
            self.client = DockerClientSim(
                self.cluster,
                self.docker,
                server_id=self.server_id,
                owner=self.owner,
                work_dir=self.work_dir,
                faults=self.faults,
            )
        self.cluster.client = self.client
        self.cluster.start()
        for _ in range(self._initial_nodes):
            self._add_node_now()
        tls: dict[str, Any] = {}
        if self.tls is not None:
            import ssl

            tls = {"ssl_certfile": self.tls[0], "ssl_keyfile": self.tls[1]}
            if self.tls_client_ca is not None:
                tls.update(ssl_ca_certs=self.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
        config = uvicorn.Config(
            Api(self).app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            interface="asgi3",
            http=coalescing_http_protocol(),  # an answer in one write (_http_writes)
            proxy_headers=False,  # no proxy before it: nothing to read from X-Forwarded-*
            timeout_graceful_shutdown=1,
            server_header=False,
            date_header=True,
            **tls,
        )
        server = uvicorn.Server(config)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.005)
        if serving.done():
            serving.result()
            raise RuntimeError("uvicorn stopped at start")
        self._ready.set()
        await self._stop.wait()
        await self.cluster.close()
        server.should_exit = True
        await self.client.close()
        try:
            await serving
        finally:
            sock.close()
            if isinstance(self.client, DockerClientSim):
                self.client.pool.shutdown(wait=False)

    def _pump_events(self) -> None:
        try:
            for event in self._events:
                loop = self._loop
                if loop is None or loop.is_closed() or self.client is None:
                    return
                try:
                    loop.call_soon_threadsafe(self.client.on_docker_event, event)
                except RuntimeError:
                    return
        except Exception:  # noqa: BLE001 - the stream closes at close()
            return

    def close(self) -> None:
        """Stop serving, end every task and remove every container this stand-in made."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if (
            self._loop is not None
            and self._thread is not None
            and self._thread.is_alive()
            and self._stop is not None
        ):
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)
        if self._events is not None:
            try:
                self._events.close()
            except Exception:  # noqa: BLE001
                pass
        try:
            if self.simulate_tasks is None:  # a simulated node makes nothing on Docker
                self._remove_containers()
                self._remove_networks()
        finally:
            if self.work_dir is not None:
                remove_dir(self.work_dir)
            if self._own_docker and self._docker is not None:
                self._docker.close()

    def _remove_containers(self) -> None:
        """Remove every container of this stand-in; one whose removal dockerd already has in
        progress (the loop's last removals) is waited for, within a minute."""
        deadline = time.monotonic() + 60
        while True:
            busy = False
            for container in self.containers():
                try:
                    container.remove(force=True, v=True)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    busy = True
                    log.debug("stand-in: removing %s at close: %s", container.id, exc)
            if not busy or time.monotonic() > deadline:
                if busy:
                    log.warning(
                        "stand-in: some containers of server %s could not be removed",
                        self.server_id,
                    )
                return
            time.sleep(0.2)

    def _remove_networks(self) -> None:
        """Remove the nodes' Docker networks this stand-in made (its containers are gone)."""
        for network in self.docker.api.networks(
            filters={"label": f"{LABEL_SERVER}={self.server_id}"}
        ):
            if not remove_network(self.docker, network["Id"]):
                log.warning(
                    "stand-in: network %s of server %s could not be removed",
                    network.get("Name"),
                    self.server_id,
                )

    def networks(self) -> list[dict[str, Any]]:
        """The Docker networks this stand-in made for its nodes (as Docker lists them)."""
        return list(self.docker.api.networks(filters={"label": f"{LABEL_SERVER}={self.server_id}"}))

    # -- running on the server's loop ------------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the server's event loop (where the state lives) and return its result."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("the stand-in Nomad server is not running")
        if threading.current_thread() is self._thread:
            return fn()

        async def run() -> T:
            return fn()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(30)

    # -- nodes -----------------------------------------------------------------------------------

    def _add_node_now(self, **overrides: Any) -> str:
        cluster = self.cluster
        assert cluster is not None
        self._node_count += 1
        address = ".".join(str(p) for p in self._next_address)
        self._next_address[3] += 1
        if self._next_address[3] > 254:
            self._next_address[2] += 1
            self._next_address[3] = 1
        spec = {**self._node_defaults, **overrides}
        spec["docker_networks"] = {k: dict(v) for k, v in spec["docker_networks"].items()}
        spec["meta"] = dict(spec["meta"])
        spec.setdefault("name", f"stand-in-{self._node_count}")
        node = cluster.add_node(NodeSpec(address=address, **spec))
        answer: str = node["ID"]
        return answer

    def add_node(self, **spec: Any) -> str:
        """Add a ready node (``name``, ``cpu_mhz``, ``cores``, ``memory_mb``, ``disk_mb``,
        ``datacenter``, ``meta``, ``node_class``, ``docker_networks``); return its ID. Blocked
        evaluations retry."""
        return self.call(lambda: self._add_node_now(**spec))

    def nodes(self) -> list[dict[str, Any]]:
        """Each node's ``ID``, ``Name``, ``Address`` and ``Status``."""
        cluster = self.cluster
        assert cluster is not None
        return self.call(
            lambda: [
                {k: n[k] for k in ("ID", "Name", "Address", "Status")}
                for n in cluster.nodes.values()
            ]
        )

    def lose_node(self, node: str) -> list[str]:
        """The node (name, ID or address) goes ``down``: its allocations turn ``lost`` with
        ``alloc is lost since its node is down``, its containers are removed. Returns the lost
        allocations' IDs. Nomad replaces lost allocations (ignoring the reschedule policy)
        unless the group sets ``PreventRescheduleOnLost``."""
        cluster = self.cluster
        assert cluster is not None
        return self.call(lambda: cluster.set_node_down(cluster.find_node(node)["ID"]))

    def restore_node(self, node: str) -> None:
        """The node is ``ready`` again (empty); blocked evaluations retry."""
        cluster = self.cluster
        assert cluster is not None
        self.call(lambda: cluster.set_node_ready(cluster.find_node(node)["ID"]))

    def set_eligibility(self, node: str, eligible: bool) -> None:
        """Mark the node (name, ID or address) eligible or not for new placements, as
        ``POST /v1/node/:id/eligibility`` does; its running allocations stay."""
        cluster = self.cluster
        assert cluster is not None
        self.call(
            lambda: cluster.set_node_eligibility(
                cluster.find_node(node)["ID"], "eligible" if eligible else "ineligible"
            )
        )

    # -- faults ----------------------------------------------------------------------------------

    def fail_image_pull(
        self, image: str, reason: str = "manifest unknown: injected by the stand-in"
    ) -> None:
        """Pulling images matching ``image`` (fnmatch pattern) fails from now on, even present ones."""
        self.faults.image_pull_failures[image] = reason

    def clear_faults(self) -> None:
        self.faults.image_pull_failures.clear()
        self.faults.start_delay = 0.0

    def set_start_delay(self, seconds: float) -> None:
        """Clients wait ``seconds`` before setting up each new allocation (a slow node)."""
        self.faults.start_delay = seconds

    def exit_task(self, alloc_id: str, exit_code: int = 1, task: str | None = None) -> None:
        """The allocation's (running) task exits with ``exit_code``: its container is killed and
        the task reports that code; the restart policy then applies."""
        client = self.client
        assert client is not None
        self.call(lambda: client.inject(alloc_id, "exit", exit_code, task))

    def oom_kill(self, alloc_id: str, task: str | None = None) -> None:
        """The allocation's (running) task is killed as out of memory (exit code 137, OOM Killed)."""
        client = self.client
        assert client is not None
        self.call(lambda: client.inject(alloc_id, "oom", 137, task))

    # -- ACL -----------------------------------------------------------------------------------

    def _add_token(
        self,
        secret: str,
        kind: str,
        *,
        name: str,
        rights: tuple[str, ...],
        variables: tuple[str, ...] = (),
    ) -> None:
        self.tokens[secret] = {
            "AccessorID": str(uuid.uuid4()),
            "SecretID": secret,
            "Name": name,
            "Type": kind,
            "Policies": None
            if kind == "management"
            else [f"stand-in-{'-'.join(rights) or 'none'}"],
            "Roles": None,
            "Global": False,
            "CreateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "ExpirationTime": None,
            "CreateIndex": 1,
            "ModifyIndex": 1,
            "_rights": rights,
            "_variables": variables,
        }

    def add_token(
        self,
        *,
        write: bool = True,
        variables: tuple[str, ...] | None = None,
        name: str = "stand-in client token",
    ) -> str:
        """A client token (its secret) that may read, and write unless ``write`` is false.

        :param variables: its capabilities on Nomad Variables (``read``, ``list``, ``write``,
            ``destroy``); by default what Nomad's coarse namespace policy gives: all four with
            ``write``, ``read`` and ``list`` without.
        """
        if variables is None:
            variables = ("read", "list", "write", "destroy") if write else ("read", "list")
        secret = str(uuid.uuid4())
        self._add_token(
            secret,
            "client",
            name=name,
            rights=("read", "write") if write else ("read",),
            variables=tuple(variables),
        )
        return secret

    def variable(self, path: str, namespace: str = "default") -> dict[str, Any] | None:
        """The Nomad Variable at ``path`` (with its ``Items``), or ``None``."""
        cluster = self.cluster
        assert cluster is not None
        return self.call(lambda: cluster.variables.get(namespace, path))

    # -- inspection ----------------------------------------------------------------------------

    def containers(self) -> list[Any]:
        """The Docker containers this stand-in made that still exist."""
        found: list[Any] = self.docker.containers.list(
            all=True, filters={"label": f"{LABEL_SERVER}={self.server_id}"}, ignore_removed=True
        )
        return found

    def container_of(self, alloc_id: str, task: str) -> Any | None:
        """The Docker container of an allocation's task, if it exists."""
        try:
            return self.docker.containers.get(f"{task}-{alloc_id}")
        except docker.errors.NotFound:
            return None
