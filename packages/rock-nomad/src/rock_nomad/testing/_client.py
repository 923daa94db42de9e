"""The stand-in's client nodes: each allocation's tasks run as real containers on local Docker.

What a Nomad client does for a ``docker`` task, done for real on the local engine: build the
task directory (``/alloc``, ``/local``, ``/secrets`` bind-mounted into the container), download
the task's artifacts over HTTP and check their checksums, find or pull the image, create and
start the container with the task's resources and its ports published on its node's loopback
address, watch it exit (Docker's ``die`` and ``oom`` events), apply the restart policy, and
kill it when the server stops the allocation. Each step reports Nomad's task events.

Each node has Docker networks of its own, as each real node has its own Docker engine: its
``bridge`` (what a task without ``network_mode`` joins; Docker's defaults, so containers on it
may connect to each other, as on a stock Docker engine) and those its operator made
(:attr:`NodeSpec.docker_networks`, created with their driver options, e.g.
``enable_icc=false``). They are real Docker bridge networks, one per node and name, made when a
task first needs them (``nomad-stand-in-<server>-<node>-<name>``): containers of different nodes
never share one. A ``network_mode`` the node lacks fails the task as Docker's 404 does.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
import httpx

from rock_nomad.testing._alloc_tasks import AllocTasks
from rock_nomad.testing._model import SECOND
from rock_nomad.testing._state import NodeSpec, now_ns, rfc3339, task_event
from rock_nomad.testing._task import (
    LABEL_OWNER,
    LABEL_SERVER,
    Faults,
    TaskFailed,
    remove_dir,
)
from rock_nomad.testing._task_container import TaskContainer
from rock_nomad.testing._task_setup import TaskSetup

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster

log = logging.getLogger("rock_nomad.testing")

__all__ = ["LABEL_OWNER", "LABEL_SERVER", "DockerClientSim", "Faults", "TaskRunner", "remove_dir"]


class TaskRunner(TaskSetup, TaskContainer):
    """One task's life on its node: set up, run, restarted as its policy says, killed when the
    server stops its allocation (the parts: :mod:`~rock_nomad.testing._task_setup`,
    :mod:`~rock_nomad.testing._task_container`)."""

    # -- the task's life -----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except TaskFailed as failure:
            self.fail(failure.event)
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show in the task's events
            log.exception("stand-in task runner for %s/%s failed", self.alloc_id, self.name)
            self.fail(
                task_event(
                    "Driver Failure",
                    f"stand-in client error: {exc}",
                    DriverError=str(exc),
                    FailsTask=True,
                )
            )
        finally:
            await self._remove_container()

    async def _run(self) -> None:
        if self.sim.faults.start_delay > 0:
            await self._sleep_or_kill(self.sim.faults.start_delay)
        if self.kill_requested.is_set():
            return self.report_killed()
        self.report("Task Setup", "Building Task Directory", Message="Building Task Directory")
        dirs = self._make_dirs()
        env = self._environment(dirs)
        if self.task.get("Artifacts"):
            self.report("Downloading Artifacts", "Client is downloading artifacts")
            for artifact in self.task["Artifacts"]:
                await self._download(artifact, dirs["task"], env)
        for template in self.task.get("Templates") or []:
            await self._render(template, dirs["task"], env)
        if self.kill_requested.is_set():
            return self.report_killed()
        config = self._config(env)
        image = config["image"]
        await self._ensure_image(image, config)
        if self.kill_requested.is_set():
            return self.report_killed()
        await self._create(config, env, dirs)
        attempts: list[int] = []
        while True:
            await self._start()
            outcome = await self._wait()
            if outcome is None:  # killed by the server
                return
            exit_code, oom = outcome
            await self._capture_logs()
            display = f"Exit Code: {exit_code}" + (', Exit Message: "OOM Killed"' if oom else "")
            details = {"exit_code": str(exit_code)}
            if oom:
                details["oom_killed"] = "true"
            self.report(
                "Terminated",
                display,
                ExitCode=exit_code,
                Signal=0,
                details=details,
                Message="OOM Killed" if oom else "",
            )
            if self.job_type == "batch" and exit_code == 0 and not oom:
                self.sim.cluster.client_update(
                    self.alloc_id, task=self.name, State="dead", Failed=False, FinishedAt=rfc3339()
                )
                return
            delay = self._restart_delay(attempts)
            if delay is None:
                policy = self.group["RestartPolicy"]
                if int(policy["Attempts"]) == 0:
                    why = "Policy allows no restarts"
                else:
                    why = (
                        f"Exceeded allowed attempts {policy['Attempts']} in interval "
                        f'{int(policy["Interval"]) // SECOND}s and mode is "fail"'
                    )
                self.fail(task_event("Not Restarting", why, FailsTask=True, RestartReason=why))
                return
            self.report(
                "Restarting",
                f"Task restarting in {delay / SECOND:g}s",
                StartDelay=delay,
                RestartReason="Restart within policy",
                state={"State": "pending"},
            )
            await self._sleep_or_kill(delay / SECOND)
            if self.kill_requested.is_set():
                return self.report_killed()
            attempts.append(now_ns())
            state = self.sim.cluster.allocs[self.alloc_id]["TaskStates"][self.name]
            state["Restarts"] = state.get("Restarts", 0) + 1
            state["LastRestart"] = rfc3339()

    def _restart_delay(self, attempts: list[int]) -> int | None:
        policy = self.group["RestartPolicy"]
        limit, interval, delay = (
            int(policy["Attempts"]),
            int(policy["Interval"]),
            int(policy["Delay"]),
        )
        now = now_ns()
        recent = [t for t in attempts if now - t <= interval]
        if len(recent) < limit:
            return delay
        if policy["Mode"] == "delay" and recent:
            attempts.clear()
            return max(delay, recent[0] + interval - now)
        return None

    async def _sleep_or_kill(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.kill_requested.wait(), seconds)
        except TimeoutError:
            pass


class DockerClientSim(AllocTasks[TaskRunner]):
    """The client half of every simulated node: runs allocations' tasks on the local Docker."""

    def __init__(
        self,
        cluster: Cluster,
        docker_client: docker.DockerClient,
        *,
        server_id: str,
        owner: str,
        work_dir: Path,
        faults: Faults,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.docker = docker_client
        self.server_id = server_id
        self.owner = owner
        self.work_dir = work_dir
        self.faults = faults
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="stand-in-docker")
        self._http: httpx.AsyncClient | None = None
        self.containers: dict[str, TaskContainer] = {}  # by container id
        #: (node name, network name) → the real Docker network made for it.
        self.networks: dict[tuple[str, str], str] = {}
        self._network_locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def http(self) -> httpx.AsyncClient:
        """The nodes' one HTTP client for artifacts (made on first use). One client, not one per
        download: making an httpx client builds a TLS context, some 20 ms of CPU here, which
        was a quarter of the stand-in's CPU when 100 tasks started at once."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=30,
                follow_redirects=True,
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
            )
        return self._http

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    async def node_network(self, node: str, name: str, options: dict[str, str]) -> str:
        """The real Docker network that stands for network ``name`` of node ``node``, made on
        first use with ``options`` (Docker's defaults for the node's ``bridge``)."""
        key = (node, name)
        lock = self._network_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self.networks:
                real = f"nomad-stand-in-{self.server_id}-{node}-{name}"
                labels = {
                    LABEL_SERVER: self.server_id,
                    LABEL_OWNER: self.owner,
                    "nomad-stand-in.node": node,
                    "nomad-stand-in.network": name,
                }
                # The bridge's interface name is the host's to choose (two nodes would clash).
                driver_options = {
                    k: v for k, v in options.items() if k != "com.docker.network.bridge.name"
                }
                await self.call(
                    self.docker.api.create_network,
                    real,
                    driver="bridge",
                    options=driver_options,
                    labels=labels,
                    check_duplicate=True,
                )
                self.networks[key] = real
            return self.networks[key]

    def run(self, alloc: dict[str, Any], node: dict[str, Any], spec: NodeSpec) -> None:
        group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
        runners = [TaskRunner(self, alloc, task, node, spec) for task in group["Tasks"]]
        self._start(alloc["ID"], runners, "task")

    async def _run_task(self, alloc_id: str, runner: TaskRunner) -> None:
        await runner.run()
        alloc = self.cluster.allocs.get(alloc_id)
        if alloc is None:
            return
        state = alloc["TaskStates"][runner.name]
        if state["State"] == "dead" and state["Failed"]:
            for sibling in self.runners.get(alloc_id, []):
                if sibling is not runner and not sibling.kill_requested.is_set():
                    sibling.kill_requested.set()

    def forget(self, alloc_id: str) -> None:
        """The alloc's node is lost: its containers go, with no events (nobody is left to report)."""
        for task in self.tasks.pop(alloc_id, []):
            task.cancel()
        for runner in self.runners.pop(alloc_id, []):
            if runner.container_id is not None:
                container_id, runner.container_id = runner.container_id, None
                self.containers.pop(container_id, None)
                asyncio.get_running_loop().create_task(self._force_remove(container_id))

    async def _force_remove(self, container_id: str) -> None:
        try:
            await self.call(self.docker.api.remove_container, container_id, force=True, v=True)
        except docker.errors.DockerException:
            pass

    def inject(self, alloc_id: str, kind: str, code: int, task: str | None = None) -> None:
        runners = [r for r in self.runners.get(alloc_id, []) if task is None or r.name == task]
        for runner in runners:
            if runner.inject(kind, code):
                asyncio.get_running_loop().create_task(
                    self.call(self.docker.api.kill, runner.container_id, signal="SIGKILL")
                )
                return
        raise KeyError(
            f"allocation {alloc_id} has no running task{'' if task is None else ' ' + task}"
        )

    def on_docker_event(self, event: dict[str, Any]) -> None:
        actor = event.get("Actor") or {}
        runner = self.containers.get(actor.get("ID") or event.get("id") or "")
        if runner is not None:
            runner.on_event(
                event.get("Action") or event.get("status") or "", actor.get("Attributes") or {}
            )

    async def close(self) -> None:
        await self._end_tasks()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
