"""What the stand-in's two kinds of client share (tasks run as containers, :mod:`._client`, or
simulated, :mod:`._simulated`): a task's place in its allocation and the task events it reports
(Nomad's), and the runners and asyncio tasks a client keeps by allocation."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from rock_nomad.testing._state import rfc3339, task_event

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster

__all__ = ["AllocTask", "AllocTasks"]


class _Client(Protocol):
    @property
    def cluster(self) -> Cluster: ...


ClientT = TypeVar("ClientT", bound=_Client)


class AllocTask(Generic[ClientT]):
    """One task of one allocation on one node, run by the client ``sim``."""

    def __init__(
        self, sim: ClientT, alloc: dict[str, Any], task: dict[str, Any], node: dict[str, Any]
    ) -> None:
        self.sim = sim
        self.alloc_id = alloc["ID"]
        self.alloc = alloc
        self.task = task
        self.node = node
        self.name = task["Name"]
        self.kill_requested = asyncio.Event()

    def report(self, kind: str, message: str, **fields: Any) -> None:
        """A task event (``details``: its Details; ``state``: fields of the task's state)."""
        details = fields.pop("details", {})
        state_fields = fields.pop("state", {})
        self.sim.cluster.client_update(
            self.alloc_id,
            task=self.name,
            event=task_event(kind, message, Details=details, **fields),
            **state_fields,
        )

    def report_killed(self) -> None:
        """``Killed``: the task ended because the server stopped its allocation."""
        self.report(
            "Killed",
            "Task successfully killed",
            state={"State": "dead", "Failed": False, "FinishedAt": rfc3339()},
        )


RunnerT = TypeVar("RunnerT", bound=AllocTask[Any])


class AllocTasks(Generic[RunnerT]):
    """A client's task runners and their asyncio tasks, by allocation id."""

    def __init__(self) -> None:
        self.runners: dict[str, list[RunnerT]] = {}
        self.tasks: dict[str, list[asyncio.Task[None]]] = {}

    def _start(self, alloc_id: str, runners: list[RunnerT], label: str) -> None:
        """Run each of ``runners`` (an allocation's) in an asyncio task named ``label <task>``."""
        self.runners[alloc_id] = runners
        loop = asyncio.get_running_loop()
        self.tasks[alloc_id] = [
            loop.create_task(self._run_task(alloc_id, r), name=f"{label} {r.name}") for r in runners
        ]

    async def _run_task(self, alloc_id: str, runner: RunnerT) -> None:
        raise NotImplementedError

    def kill(self, alloc_id: str) -> None:
        for runner in self.runners.get(alloc_id, []):
            runner.kill_requested.set()

    def runner(self, alloc_id: str, task: str) -> RunnerT | None:
        return next((r for r in self.runners.get(alloc_id, []) if r.name == task), None)

    async def _end_tasks(self) -> None:
        """Cancel every allocation's tasks and wait for them to end."""
        for tasks in self.tasks.values():
            for task in tasks:
                task.cancel()
        for tasks in list(self.tasks.values()):
            for task in tasks:
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
        self.tasks.clear()
