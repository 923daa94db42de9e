"""The stand-in's scheduler: the queue of evaluations it works through (one at a time, like
a Nomad server's worker), what each evaluation places, stops or reschedules, and the client's
updates of its allocations (which may reschedule a failed one)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rock_nomad.testing._placement import Placement, slot_of
from rock_nomad.testing._state import (
    NOT_NEEDED_DESCRIPTION,
    TERMINAL_CLIENT,
    json_copy,
    log,
    now_ns,
    server_terminal,
)

__all__ = ["Scheduler"]


class Scheduler(Placement):
    """The evaluation queue and its worker (:meth:`start`, :meth:`close`)."""

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(
            self._run_scheduler(), name="stand-in scheduler"
        )

    async def close(self) -> None:
        self.closing = True
        for timer in self._timers:
            timer.cancel()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self.bump()  # wakes blocking queries, which end when closing

    async def _run_scheduler(self) -> None:
        while True:
            eval_id = await self._queue.get()
            self._queued.discard(eval_id)
            if self.scheduler_delay > 0:
                await asyncio.sleep(self.scheduler_delay)
            ev = self.evals.get(eval_id)
            if ev is None or ev["Status"] not in ("pending", "blocked"):
                continue
            try:
                self._process(ev)
            except Exception:  # noqa: BLE001 - one bad eval must not stop the scheduler
                log.exception("stand-in scheduler failed on eval %s", eval_id)
                self._update_eval(ev, Status="failed", StatusDescription="stand-in scheduler error")

    def _process(self, ev: dict[str, Any]) -> None:
        ns, job_id = ev["Namespace"], ev["JobID"]
        job = self.jobs.get((ns, job_id))
        live = list(self.job_allocs.get((ns, job_id), ()))
        if job is None or job["Stop"]:
            for alloc in live:
                if not server_terminal(alloc):
                    self._stop(alloc, NOT_NEEDED_DESCRIPTION)
            self._update_eval(ev, Status="complete")
            self._refresh_job_status(ns, job_id)
            self._capacity_changed()
            return
        live = [a for a in live if a["Job"]["CreateIndex"] == job["CreateIndex"]]
        failed_tg: dict[str, Any] = {}
        queued: dict[str, int] = {}
        freed = False
        groups = {g["Name"] for g in job["TaskGroups"]}
        for alloc in live:
            if alloc["TaskGroup"] not in groups and not server_terminal(alloc):
                self._stop(alloc, NOT_NEEDED_DESCRIPTION)  # its group left the job
                freed = True
        now = now_ns()
        for group in job["TaskGroups"]:
            name = group["Name"]
            current: dict[int, dict[str, Any]] = {}
            for alloc in live:
                if alloc["TaskGroup"] != name or alloc["NextAllocation"]:
                    continue
                slot = slot_of(alloc["Name"])
                if slot >= group["Count"]:
                    if not server_terminal(alloc):
                        self._stop(alloc, NOT_NEEDED_DESCRIPTION)
                        freed = True
                    continue
                prev = current.get(slot)
                if prev is None or alloc["CreateIndex"] > prev["CreateIndex"]:
                    current[slot] = alloc
            to_place: list[tuple[int, dict[str, Any] | None]] = []
            for slot in range(group["Count"]):
                kept = current.get(slot)
                if kept is None:
                    to_place.append((slot, None))
                elif kept["ClientStatus"] == "lost":
                    if not group.get("PreventRescheduleOnLost"):
                        to_place.append((slot, kept))
                elif kept["ClientStatus"] == "failed":
                    if kept["DesiredStatus"] == "run" and self._reschedule_due(group, kept, now):
                        to_place.append((slot, kept))
                elif kept["DesiredStatus"] != "run":
                    if kept["DesiredTransition"].get("Reschedule"):  # POST /v1/allocation/:id/stop
                        to_place.append((slot, kept))
                    elif kept["DesiredDescription"] == NOT_NEEDED_DESCRIPTION:
                        to_place.append((slot, None))
                elif kept["ClientStatus"] == "complete":
                    pass
                elif kept["Job"]["Version"] != job["Version"]:
                    if _destructive(kept["Job"], job, name):
                        self._stop(kept, NOT_NEEDED_DESCRIPTION)
                        freed = True
                        to_place.append((slot, None))
                    else:  # an in-place update: the kept carries the new job version
                        self._update_alloc(kept, Job=json_copy(job))
            metrics = None
            placed = 0
            for slot, previous in to_place:
                started = time.perf_counter_ns()
                node, metric = self._select_node(job, group)
                metric["AllocationTime"] = time.perf_counter_ns() - started
                if node is None:
                    if metrics is None:
                        metrics = metric
                    else:
                        metrics["CoalescedFailures"] += 1
                    continue
                self._place(job, group, slot, node, ev, metric, previous)
                placed += 1
            missing = len(to_place) - placed
            queued[name] = missing
            if missing:
                failed_tg[name] = metrics
        if failed_tg:
            blocked = next(
                (e for e in self._evals_of(ns, job_id) if e["Status"] == "blocked"), None
            )
            if blocked is ev:
                self._update_eval(ev, QueuedAllocations=queued, FailedTGAllocs=failed_tg)
            else:
                if blocked is not None:
                    self._update_eval(
                        blocked,
                        Status="canceled",
                        StatusDescription="superseded by a newer evaluation",
                    )
                new = self._create_eval(job, "queued-allocs", status="blocked", previous=ev["ID"])
                new["StatusDescription"] = "created to place remaining allocations"
                new["QueuedAllocations"] = dict(queued)
                new["FailedTGAllocs"] = failed_tg
                self._update_eval(
                    ev,
                    Status="complete",
                    FailedTGAllocs=failed_tg,
                    BlockedEval=new["ID"],
                    QueuedAllocations=queued,
                )
        else:
            self._update_eval(ev, Status="complete", QueuedAllocations=queued)
            for other in self._evals_of(ns, job_id):
                if other["Status"] == "blocked" and other is not ev:
                    self._update_eval(
                        other, Status="canceled", StatusDescription="job's allocations were placed"
                    )
        self._refresh_job_status(ns, job_id)
        if freed:
            self._capacity_changed()

    def _reschedule_due(self, group: dict[str, Any], alloc: dict[str, Any], now: int) -> bool:
        eligible, wait_until = self._reschedule_eligible(group, alloc, now)
        return (
            eligible and wait_until <= now + 100_000_000
        )  # the follow-up eval's timer may fire a hair early

    def _reschedule_eligible(
        self, group: dict[str, Any], alloc: dict[str, Any], now: int
    ) -> tuple[bool, int]:
        policy = group["ReschedulePolicy"]
        events = (alloc.get("RescheduleTracker") or {}).get("Events") or []
        if not policy.get("Unlimited"):
            attempts = int(policy.get("Attempts") or 0)
            interval = int(policy.get("Interval") or 0)
            recent = [e for e in events if now - e["RescheduleTime"] <= interval]
            if len(recent) >= attempts:
                return False, 0
        delay = int(policy.get("Delay") or 0)
        n = len(events)
        if policy.get("DelayFunction") == "exponential":
            delay = delay * (2**n)
        elif policy.get("DelayFunction") == "fibonacci":
            a, b = delay, delay
            for _ in range(n):
                a, b = b, a + b
            delay = a
        if policy.get("MaxDelay"):
            delay = min(delay, int(policy["MaxDelay"]))
        finished = alloc.get("_finished_ns") or now
        return True, finished + delay

    def client_update(
        self,
        alloc_id: str,
        *,
        task: str | None = None,
        event: dict[str, Any] | None = None,
        **task_fields: Any,
    ) -> None:
        """The simulated client reports: a task event and task state fields; the alloc's client
        status follows from its tasks' states."""
        alloc = self.allocs.get(alloc_id)
        if alloc is None or alloc["ClientStatus"] == "lost":
            return
        if task is not None:
            state = alloc["TaskStates"][task]
            if event is not None:
                state["Events"] = (state["Events"] + [event])[-10:]
            state.update(task_fields)
        states = alloc["TaskStates"].values()
        if any(s["State"] == "dead" and s["Failed"] for s in states):
            status, description = "failed", "Failed tasks"
        elif all(s["State"] == "dead" for s in states):
            status, description = "complete", "All tasks have completed"
        elif any(s["State"] == "running" for s in states):
            status, description = "running", "Tasks are running"
        else:
            status, description = "pending", "No tasks have started"
        became_failed = status == "failed" and alloc["ClientStatus"] != "failed"
        if status in TERMINAL_CLIENT and alloc["ClientStatus"] not in TERMINAL_CLIENT:
            alloc["_finished_ns"] = now_ns()
        self._update_alloc(alloc, ClientStatus=status, ClientDescription=description)
        if became_failed and alloc["DesiredStatus"] == "run":
            self._after_failure(alloc)
        if status in TERMINAL_CLIENT:
            self._capacity_changed()
        self._refresh_job_status(alloc["Namespace"], alloc["JobID"])

    def _after_failure(self, alloc: dict[str, Any]) -> None:
        job = self.jobs.get((alloc["Namespace"], alloc["JobID"]))
        if job is None or job["Stop"] or job["CreateIndex"] != alloc["Job"]["CreateIndex"]:
            return
        group = next((g for g in job["TaskGroups"] if g["Name"] == alloc["TaskGroup"]), None)
        if group is None:
            return
        now = now_ns()
        eligible, wait_until = self._reschedule_eligible(group, alloc, now)
        if not eligible:
            return
        if wait_until > now:
            ev = self._create_eval(job, "alloc-failure", wait_until_ns=wait_until)
            self._update_alloc(alloc, FollowupEvalID=ev["ID"])
        else:
            self._create_eval(job, "alloc-failure")


def _destructive(old: dict[str, Any], new: dict[str, Any], group: str) -> bool:
    """Whether a job update replaces a group's allocations (its tasks change, or the metadata
    its tasks see) or updates them in place."""
    if old.get("Meta") != new.get("Meta"):
        return True
    before = next((g for g in old["TaskGroups"] if g["Name"] == group), None)
    after = next((g for g in new["TaskGroups"] if g["Name"] == group), None)
    if before is None or after is None:
        return True
    return {k: v for k, v in before.items() if k != "Count"} != {
        k: v for k, v in after.items() if k != "Count"
    }
