"""One event stream for every start in progress: :class:`EventFeed`.

A start waits for its evaluation to be processed and then for its allocation to run. With a
blocking query per start, 100 starts hold 100 connections, and every request the pool hands
out scans them all (httpcore; measured at some 6 ms of CPU a request at that size). Instead one
``GET /v1/event/stream?topic=Evaluation:*&topic=Allocation:*`` feeds every start: each start
registers its job id before it registers the job (so no event of it is missed once the stream
is up), and is woken by the events of its job.

The stream is a help, never a requirement: a start that hears nothing for ``poll_after``
seconds asks Nomad directly (one plain read), so a broken or slow stream only makes starts
slower. The stream reconnects from the last index it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from rock_nomad._api import NomadApi

__all__ = ["EventFeed", "JobWatch", "Queue", "Wanted", "slim_alloc"]

log = logging.getLogger("rock.nomad")

#: A subscriber's queue of ``(topic, type, object)``.
Queue = asyncio.Queue[tuple[str, str, dict[str, Any]]]
#: Whether a subscriber wants an event: ``wanted(topic, type, object)``.
Wanted = Callable[[str, str, dict[str, Any]], bool]


def _everything(topic: str, kind: str, obj: dict[str, Any]) -> bool:
    return True


#: How Nomad writes an event that registers a job: its topic and type first (Go's order of the
#: event's fields), without spaces. Inside a JSON string a quote is escaped, so ``"Topic":``
#: occurs in a frame only as a key.
_JOB_REGISTERED = '"Topic":"Job","Type":"JobRegistered"'
_FRAME_INDEX = re.compile(r'\{"Index":(\d+),')


def registrations_only(line: str) -> int | None:
    """The index of a frame that tells of nothing but job registrations (each a whole job:
    the largest events a start makes, which no start reads), ``None`` for any other frame.

    Every ``"Topic":`` of the frame is that of a job registration; an event of any other kind
    (or a frame written another way) has a ``"Topic":`` that is not, so its frame is decoded.
    The first event is looked at first: most frames are told apart by it, without a count of
    the whole line (a start's other five frames: a tenth of their handling)."""
    first = line.find('"Topic":', 0, 256)
    if first < 0 or not line.startswith(_JOB_REGISTERED, first):
        return None
    topics = line.count('"Topic":')
    if not topics or line.count(_JOB_REGISTERED) != topics:
        return None
    found = _FRAME_INDEX.match(line)
    return int(found.group(1)) if found else None


#: What the runtime reads of an allocation (:func:`slim_alloc`): its state, node, task
#: events and ports.
_ALLOC_KEYS = (
    "ID",
    "JobID",
    "EvalID",
    "NodeID",
    "NodeName",
    "ClientStatus",
    "ClientDescription",
    "DesiredStatus",
    "DesiredDescription",
    "TaskStates",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
)


def slim_alloc(alloc: dict[str, Any]) -> dict[str, Any]:
    """An allocation as the stream tells it, with only what the runtime reads of it kept (the
    keys of :data:`_ALLOC_KEYS` and ``AllocatedResources.Shared.Ports``).

    A start holds its allocation while it waits and the runtime keeps every started job's
    newest one (:attr:`EventFeed.latest`): whole, each is some 40 dicts and lists (Nomad's
    resources, metrics, networks; more on a real cluster), which the garbage collector walks
    again and again while thousands of sandboxes start and run."""
    slim = {key: alloc[key] for key in _ALLOC_KEYS if key in alloc}
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    if "Ports" in shared:
        slim["AllocatedResources"] = {"Shared": {"Ports": shared["Ports"]}}
    return slim


class JobWatch:
    """What the stream told of one job: its evaluations and allocations by id, newest state."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.evals: dict[str, dict[str, Any]] = {}
        self.allocs: dict[str, dict[str, Any]] = {}
        self._changed = False
        self._waiter: asyncio.Future[bool] | None = None
        self._until: Callable[[], bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._news_at: float | None = None  # the loop's time of news that did not end a wait

    def update(self, kind: str, obj: dict[str, Any]) -> None:
        table = self.evals if kind == "Evaluation" else self.allocs
        known = table.get(obj.get("ID", ""))
        if known is not None and (known.get("ModifyIndex") or 0) > (obj.get("ModifyIndex") or 0):
            return  # an older state than one already seen (a direct read raced the stream)
        table[obj["ID"]] = obj
        self._changed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            until = self._until
            if until is None or until():
                waiter.set_result(True)
            else:  # news, but not what the wait is for: the silence counts from now
                self._news_at = waiter.get_loop().time()

    async def changed(self, timeout: float, until: Callable[[], bool] | None = None) -> bool:
        """Wait until something new is told of the job, or ``timeout`` seconds; whether it was.

        ``until``: wait instead until it is true of what the watch holds (at once when it is
        already), or until ``timeout`` seconds pass without news of the job (``False``). News
        that leaves it false does not wake the waiter, it only puts the silence off: a start's
        evaluation and allocation are told five or six times, two of which it waits for, and
        every wake resumes the engine's chain of coroutines down to the start.

        One future and one timer (no task, as ``asyncio.wait_for`` makes each time)."""
        if until is not None:
            told = until() or await self._wait(timeout, until)
            self._changed = False
            return told
        if not self._changed:
            await self._wait(timeout, None)
        told, self._changed = self._changed, False
        return told

    async def _wait(self, timeout: float, until: Callable[[], bool] | None) -> bool:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._until, self._news_at = until, None
        self._timer = loop.call_later(timeout, self._time_up, waiter, timeout)
        try:
            return await waiter
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._waiter = self._until = self._timer = None

    def _time_up(self, waiter: asyncio.Future[bool], timeout: float) -> None:
        if waiter.done():
            return
        loop = waiter.get_loop()
        if self._news_at is not None:
            remaining = self._news_at + timeout - loop.time()
            if remaining > 0:  # news came meanwhile: not silent long enough yet
                self._timer = loop.call_later(remaining, self._time_up, waiter, timeout)
                return
        waiter.set_result(False)


class EventFeed:
    """Nomad's event stream of the runtime's namespace, dispatched to the starts that watch a job."""

    def __init__(self, api: NomadApi) -> None:
        self._api = api
        self._watches: dict[str, JobWatch] = {}
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._attempted = asyncio.Event()  # set after each connection attempt, whatever came of it
        self._index = 0
        self.frames = 0
        #: The newest allocation the stream told of, for each job :meth:`track` names.
        self.latest: dict[str, dict[str, Any]] = {}
        self._tracked: set[str] = set()
        #: Each subscriber's queue, and which events it wants.
        self._subscribers: dict[Queue, Wanted] = {}
        #: The subscribers that may want a job's registration (all but those that say not).
        self._registrations: set[Queue] = set()
        #: Frames of job registrations only, not decoded (no one wanted them).
        self.skipped = 0

    def subscribe(self, wanted: Wanted | None = None, *, registrations: bool = True) -> Queue:
        """A queue of every ``(topic, type, object)`` the stream tells from now on (Allocation,
        Job), or only of those ``wanted(topic, type, object)`` is true of: a burst of starts
        tells five or six events each, which would wake a subscriber that wants none of them.

        :param registrations: ``False``: ``wanted`` is false of every ``JobRegistered`` event,
            so a frame of nothing else need not be decoded while no subscriber wants one (a
            whole job each, a sixth of what a start's events weigh)."""
        queue: Queue = asyncio.Queue()
        self._subscribers[queue] = wanted or _everything
        if registrations:
            self._registrations.add(queue)
        return queue

    def unsubscribe(self, queue: Queue) -> None:
        self._subscribers.pop(queue, None)
        self._registrations.discard(queue)

    @property
    def connected(self) -> bool:
        """Whether the stream is up now (what it told is current)."""
        return self._connected.is_set()

    def track(self, job_id: str) -> None:
        """Keep :attr:`latest` of ``job_id`` (a started sandbox's job) until :meth:`untrack`."""
        self._tracked.add(job_id)

    def untrack(self, job_id: str) -> None:
        self._tracked.discard(job_id)
        self.latest.pop(job_id, None)

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[JobWatch]:
        """Hear the events of ``job_id`` while the block runs."""
        watch = self._watches[job_id] = JobWatch(job_id)
        try:
            yield watch
        finally:
            if self._watches.get(job_id) is watch:
                del self._watches[job_id]

    async def ready(self, timeout: float = 5.0) -> bool:
        """Start the stream if it is not running; wait (at most ``timeout``) until it is connected."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="rock-nomad event stream"
            )
        if self._connected.is_set():
            return True
        try:
            # Until the first attempt is over: a refused token or a missing API fails it at once,
            # and starts then read Nomad themselves instead of waiting for the stream.
            await asyncio.wait_for(self._attempted.wait(), timeout)
        except TimeoutError:
            return False
        return self._connected.is_set()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                if self._index == 0:
                    # From now on: the stream replays what its buffer holds from ``index``.
                    response = await self._api.request(
                        "GET",
                        "jobs",
                        params={"prefix": "rock-nomad-index-probe-"},
                        attempted="events",
                    )
                    self._index = int(response.headers.get("X-Nomad-Index") or 0)
                params = [
                    ("topic", "Evaluation:*"),
                    ("topic", "Allocation:*"),
                    ("topic", "Job:*"),
                    ("index", str(self._index + 1)),
                ]
                async with self._api.stream("event/stream", params) as events:
                    self._connected.set()
                    self._attempted.set()
                    delay = 0.5
                    async for line in events.aiter_lines():
                        if line.strip():
                            self._frame(line)
                log.info("Nomad's event stream ended; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the stream is a help: starts poll without it
                log.warning(
                    "Nomad's event stream failed (%s); starts poll meanwhile, reconnecting in %.1fs",
                    exc,
                    delay,
                )
            self._connected.clear()
            self._attempted.set()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _frame(self, line: str) -> None:
        if not self._registrations:
            index = registrations_only(line)
            if index is not None:  # no watch, track or subscriber reads them
                self.frames += 1
                self.skipped += 1
                self._index = max(self._index, index)
                return
        try:
            frame = orjson.loads(line)  # a start's frames: 18.7 KB; a third of json's CPU
        except ValueError:
            return
        events = frame.get("Events")
        if not events:
            return  # a heartbeat
        self.frames += 1
        self._index = max(self._index, int(frame.get("Index") or 0))
        if not self._watches and not self._tracked and not self._subscribers:
            return
        for event in events:
            topic = event.get("Topic")
            payload = (event.get("Payload") or {}).get(topic)
            if not isinstance(payload, dict):
                continue
            if self._subscribers:
                told = (str(topic), str(event.get("Type") or ""), payload)
                for queue, wanted in self._subscribers.items():
                    if wanted(*told):
                        queue.put_nowait(told)
            if topic == "Job":
                continue
            job_id = payload.get("JobID") or ""
            watch = self._watches.get(job_id)
            tracked = job_id in self._tracked
            if topic == "Allocation" and (watch is not None or tracked):
                payload = slim_alloc(payload)
            if watch is not None:
                watch.update(topic, payload)
            if topic == "Allocation" and tracked:
                known = self.latest.get(job_id)
                if known is None or (
                    known.get("CreateIndex") or 0,
                    known.get("ModifyIndex") or 0,
                ) <= (payload.get("CreateIndex") or 0, payload.get("ModifyIndex") or 0):
                    self.latest[job_id] = payload
