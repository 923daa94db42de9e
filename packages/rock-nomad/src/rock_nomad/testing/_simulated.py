"""The stand-in's client nodes when tasks run nothing (``simulate_tasks``): for control-plane
benches at a scale this machine could not run as containers.

A simulated task does what a Nomad client reports, without Docker: it is received, its task
directory "built", then it starts after a uniformly random ``lo..hi`` seconds (a container's
start, waited without a process), reports ``Started`` and runs until the server stops its
allocation (``Killing``, ``Terminated`` with exit code 0, ``Killed``). It downloads no
artifact, renders no template and pulls no image.

Each of its allocation's ports is a real listening socket on its node's address and dynamic
port, as Docker's port publishing would make it; every connection accepted there is served by
one real rocklet in this process (no secret asked, so the sandbox's own, which a real task
reads from its template, is not needed): the engine's readiness probes are answered in this
process's event loop, any other connection in a thread of its own. So a client of
the allocation (rock's engine) connects, probes and calls the rocklet where Nomad said it is.
Commands run, but share that rocklet and its work counts in this process. The same mirror of a
container as rock's scripted runtime (:mod:`rock_core.testing.scripted_runtime`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import resource
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rock_core.testing.loop_rocklet import LoopFirstRocklet
from rock_nomad.testing._alloc_tasks import AllocTask, AllocTasks
from rock_nomad.testing._model import SECOND
from rock_nomad.testing._state import NodeSpec, rfc3339

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster

log = logging.getLogger("rock_nomad.testing")

__all__ = ["KillRequest", "SharedRocklet", "SimulatedClient", "SimulatedTask"]


class SharedRocklet(LoopFirstRocklet):
    """One real rocklet serving connections accepted elsewhere (every simulated task's ports):
    readiness probes answered in the stand-in's event loop, any other connection in a thread of
    its own (:class:`rock_core.testing.loop_rocklet.LoopFirstRocklet`)."""


def _time_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class KillRequest(asyncio.Event):
    """A task's kill request (an :class:`asyncio.Event`) that can also be waited for at most
    some seconds with one future and one timer (:meth:`within`): ``asyncio.wait_for`` makes a
    task per wait, each simulated start's wait for its start time."""

    def __init__(self) -> None:
        super().__init__()
        self._within: list[asyncio.Future[bool]] = []

    def set(self) -> None:
        super().set()
        waiters, self._within = self._within, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    async def within(self, seconds: float) -> bool:
        """Wait until the kill is requested, at most ``seconds``: whether it was."""
        if self.is_set():
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._within.append(waiter)
        timer = loop.call_later(seconds, _time_up, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            if waiter in self._within:
                self._within.remove(waiter)


class SimulatedTask(AllocTask["SimulatedClient"]):
    """One simulated task of one allocation (see the module docstring)."""

    def __init__(
        self,
        sim: SimulatedClient,
        alloc: dict[str, Any],
        task: dict[str, Any],
        node: dict[str, Any],
    ) -> None:
        super().__init__(sim, alloc, task, node)
        self.kill_requested: KillRequest = KillRequest()
        self.listeners: list[socket.socket] = []
        self.exit_with: int | None = None

    async def run(self) -> None:
        try:
            delay = self.sim.faults_delay() + random.uniform(*self.sim.start_seconds)
            self.report("Task Setup", "Building Task Directory", Message="Building Task Directory")
            if await self._killed_within(delay):
                return self.report_killed()
            try:
                self._listen()
            except OSError as exc:
                text = f"failed to publish the task's ports: {exc}"
                self.report(
                    "Driver Failure",
                    text,
                    DriverError=text,
                    FailsTask=True,
                    state={"State": "dead", "Failed": True, "FinishedAt": rfc3339()},
                )
                return
            self.report(
                "Started",
                "Task started by client",
                state={"State": "running", "StartedAt": rfc3339()},
            )
            await self.kill_requested.wait()
            self._close()
            if self.exit_with is not None:  # an injected exit or OOM kill: the task failed
                oom = self.exit_with == 137
                self.report(
                    "Terminated",
                    f"Exit Code: {self.exit_with}"
                    + (', Exit Message: "OOM Killed"' if oom else ""),
                    ExitCode=self.exit_with,
                    details={
                        "exit_code": str(self.exit_with),
                        **({"oom_killed": "true"} if oom else {}),
                    },
                    Message="OOM Killed" if oom else "",
                )
                why = "Policy allows no restarts"
                self.report(
                    "Not Restarting",
                    why,
                    FailsTask=True,
                    RestartReason=why,
                    state={"State": "dead", "Failed": True, "FinishedAt": rfc3339()},
                )
                return
            timeout = int(self.task.get("KillTimeout") or 5 * SECOND)
            self.report(
                "Killing",
                f"Sent interrupt. Waiting {timeout / SECOND:g}s before force killing",
                KillTimeout=timeout,
            )
            self.report("Terminated", "Exit Code: 0", ExitCode=0, details={"exit_code": "0"})
            self.report_killed()
        finally:
            self._close()

    async def _killed_within(self, seconds: float) -> bool:
        return await self.kill_requested.within(seconds)

    def _listen(self) -> None:
        """A listening socket on each of the allocation's ports (its node's address)."""
        loop = asyncio.get_running_loop()
        shared = (self.alloc.get("AllocatedResources") or {}).get("Shared") or {}
        for port in shared.get("Ports") or []:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((port["HostIP"], int(port["Value"])))
            sock.listen(64)
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        try:
            conn, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("simulated task %s: accept: %s", self.alloc_id, exc)
            return
        self.sim.rocklet.serve(conn)

    def _close(self) -> None:
        listeners, self.listeners = self.listeners, []
        loop = asyncio.get_running_loop()
        for sock in listeners:
            try:
                loop.remove_reader(sock.fileno())
            except (ValueError, OSError):
                pass
            sock.close()

    async def live_logs(self, kind: str) -> bytes:
        return b""


class SimulatedClient(AllocTasks[SimulatedTask]):
    """The client half of every simulated node when tasks run nothing (see the module docstring).

    :param start_seconds: ``(lo, hi)``: each task starts after a uniformly random time between.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        work_dir: Path,
        start_seconds: tuple[float, float],
        faults: Any,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.start_seconds = start_seconds
        self.faults = faults
        self.rocklet = SharedRocklet(work_dir)
        # Two sockets a task at most (its ports) and a connection or two each: lift the soft
        # limit of open files to the hard one, as a node's Docker daemon is not limited by ours.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    def faults_delay(self) -> float:
        return float(self.faults.start_delay)

    def run(self, alloc: dict[str, Any], node: dict[str, Any], spec: NodeSpec) -> None:
        group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
        runners = [SimulatedTask(self, alloc, task, node) for task in group["Tasks"]]
        self._start(alloc["ID"], runners, "simulated task")

    async def _run_task(self, alloc_id: str, runner: SimulatedTask) -> None:
        try:
            await runner.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show in the task's events
            log.exception("simulated task %s/%s failed", alloc_id, runner.name)
            text = f"stand-in client error: {exc}"
            runner.report(
                "Driver Failure",
                text,
                DriverError=text,
                FailsTask=True,
                state={"State": "dead", "Failed": True, "FinishedAt": rfc3339()},
            )
        finally:
            self.tasks.pop(alloc_id, None)
            self.runners.pop(alloc_id, None)

    def forget(self, alloc_id: str) -> None:
        """The alloc's node is lost: its tasks end with no events (nobody is left to report)."""
        for task in self.tasks.pop(alloc_id, []):
            task.cancel()
        self.runners.pop(alloc_id, None)

    def inject(self, alloc_id: str, kind: str, code: int, task: str | None = None) -> None:
        for runner in self.runners.get(alloc_id, []):
            if (task is None or runner.name == task) and runner.listeners:
                runner.exit_with = code
                runner.kill_requested.set()
                return
        raise KeyError(
            f"allocation {alloc_id} has no running task{'' if task is None else ' ' + task}"
        )

    def on_docker_event(self, event: dict[str, Any]) -> None:
        """No containers: Docker's events are none of a simulated node's business."""

    async def close(self) -> None:
        await self._end_tasks()
        self.rocklet.close()
