"""Waiting for starts over the admin's HTTP API: :meth:`RemoteWaits.wait_until_running` and
:meth:`RemoteWaits.wait_any`, the remote driver's base, so :mod:`rock.sdk._drivers.remote`
stays one module's read.

A trainer starts hundreds of sandboxes at once from one process. Each start's wait does not
hold a request of its own: the waits of one event loop are gathered by a :class:`_Gatherer`,
which asks the admin's ``POST /sandboxes/wait_any`` for all of them in one held request (a few
at most, :data:`_MAX_GATHERED`), and hands each answer to the waits it settles. Each id is sent
once, into a watch the admin keeps, so a thousand starts cost the admin a thousand ids, not a
thousand at every ask. An admin
without that route (ROCK's, or an older rock) is asked ``GET /get_status?wait=`` per sandbox,
as before.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Sequence
from typing import Any

import anyio

from rock.sdk._drivers.remote_commits import RemoteCommits
from rock.sdk._drivers.remote_wire import MAX_HELD
from rock_core.actions import SandboxStatusResponse, WaitAnyResponse
from rock_core.converters import structure_wire
from rock_core.errors import (
    BadRequestRockError,
    ImagePullFailed,
    InternalServerRockError,
    NotSupported,
    SandboxNotFound,
    StartupTimeout,
)
from rock_core.models import PhaseStatus
from rock_core.states import LIVE_STATES, State

__all__ = ["RemoteWaits"]

# wait_until_running asks the admin to hold its answer this long while the sandbox starts (rock's
# ``wait``); an admin that answers sooner, still pending (ROCK's), is polled from _POLL_FIRST
# seconds apart, growing to the cap.
_STATUS_WAIT = 20.0
_POLL_FIRST = 0.05
_POLL_MAX = 1.0
_POLL_GROWTH = 1.5
#: Held ``wait_any`` requests of one event loop at once; the ids of each (the admin's
#: ``batch_max_count`` is 2,000 by default).
_MAX_GATHERED = 4
_GATHER_IDS = 1000
#: A request answered sooner than this after it was sent asks again only once this long has
#: passed: while thousands start, answers come at once, one settled each; waiting lets the
#: next answer carry all that settled meanwhile.
_REASK_AFTER = 0.2


class _Lane:
    """The ids one held ``wait_any`` request at a time asks about, and the admin's watch of
    them (``token``: ``""`` until the admin named one; ``None``: an admin without watches,
    asked about every id each time)."""

    def __init__(self) -> None:
        self.ids: dict[str, None] = {}  # the ids this lane waits for
        self.new: dict[str, None] = {}  # ids not sent to its watch yet
        self.token: str | None = ""
        self.asking = False


class _Gatherer:
    """The starting sandboxes one event loop waits for, asked of the admin together: in at most
    :data:`_MAX_GATHERED` lanes of up to :data:`_GATHER_IDS` ids, each one held request at a
    time. A lane's ids go once into a watch the admin keeps (``wait_any``'s ``watch``), so an
    ask costs the admin the ids that settled, not all those still starting."""

    def __init__(self, driver: RemoteWaits) -> None:
        self._driver = driver
        self._waits: dict[str, set[asyncio.Future[SandboxStatusResponse | None]]] = {}
        self._unsent: dict[str, None] = {}  # ids in no lane, in order
        self._lanes: list[_Lane] = []
        self._flush_soon = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def settled(self, sandbox_id: str) -> SandboxStatusResponse | None:
        """The sandbox's status once its start settled; ``None``: the admin has no
        ``wait_any`` (ask per sandbox)."""
        future: asyncio.Future[SandboxStatusResponse | None] = (
            asyncio.get_running_loop().create_future()
        )
        waits = self._waits.setdefault(sandbox_id, set())
        if not waits:
            self._unsent[sandbox_id] = None
        waits.add(future)
        self._ask_more()
        try:
            return await future
        finally:
            waits.discard(future)
            if not waits and self._waits.get(sandbox_id) is waits:
                del self._waits[sandbox_id]
                self._unsent.pop(sandbox_id, None)

    def _ask_more(self) -> None:
        """Send the unsent ids at the end of this loop turn: the waits that begin in one turn
        (a start batch's answer settles hundreds) go in one request, not one request each."""
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        # New ids go where they are sent soonest: a lane not asking, a new lane, and only then
        # a lane holding a request (sent once its answer comes).
        for lane in self._lanes:
            if not lane.asking:
                self._fill(lane)
        while self._unsent and len(self._lanes) < _MAX_GATHERED:
            lane = _Lane()
            self._lanes.append(lane)
            self._fill(lane)
        for lane in self._lanes:
            self._fill(lane)
        for lane in self._lanes:
            if lane.new and not lane.asking:
                lane.asking = True
                task = asyncio.get_running_loop().create_task(self._run(lane))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _fill(self, lane: _Lane) -> None:
        while self._unsent and len(lane.ids) < _GATHER_IDS:
            sandbox_id = next(iter(self._unsent))
            del self._unsent[sandbox_id]
            lane.ids[sandbox_id] = None
            lane.new[sandbox_id] = None

    def _settle(self, sandbox_id: str, outcome: Any) -> None:
        for future in self._waits.pop(sandbox_id, ()):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    async def _run(self, lane: _Lane) -> None:
        """Ask for the lane's ids until none is waited for any more."""
        try:
            while True:
                for sandbox_id in [i for i in lane.ids if i not in self._waits]:
                    del lane.ids[sandbox_id]  # its waits ended (cancelled)
                    lane.new.pop(sandbox_id, None)
                if not lane.ids:
                    return
                if not await self._ask(lane):
                    return
        finally:
            lane.asking = False
            if lane in self._lanes and not lane.ids:
                self._lanes.remove(lane)
            self._ask_more()

    async def _ask(self, lane: _Lane) -> bool:
        """One request of ``lane``; whether to go on."""
        sent = time.monotonic()
        token = lane.token
        ids = list(lane.ids if token is None else lane.new)
        lane.new.clear()
        try:
            answer = await self._driver._wait_watched(ids, _STATUS_WAIT, token)
        except NotSupported:
            self._driver._wait_any_served = False
            self._end(lane, None)
            return False
        except BadRequestRockError as exc:
            if self._driver._wait_brief:
                self._driver._wait_brief = False  # an older admin refusing the field: ask again
                lane.new.update(dict.fromkeys(ids))
                return True
            if token is None:
                self._end(lane, exc)
                return False
            lane.token = None  # an admin refusing the field (strict_fields): ask about every id
            lane.new.update(lane.ids)
            return True
        except Exception as exc:  # the admin unreachable: every wait it served learns why
            self._end(lane, exc)
            return False
        if token and answer.watch != token:
            lane.new.update(lane.ids)  # the watch was lost: send every id again
        lane.token = answer.watch
        for status in answer.statuses:
            if status.sandbox_id is not None:
                lane.ids.pop(status.sandbox_id, None)
                self._settle(status.sandbox_id, status)
        for sandbox_id in answer.unknown:
            lane.ids.pop(sandbox_id, None)
            self._settle(
                sandbox_id,
                SandboxNotFound(
                    f"sandbox {sandbox_id} not found",
                    sandbox_id=sandbox_id,
                    attempted="wait_until_running",
                ),
            )
        pause = _REASK_AFTER - (time.monotonic() - sent)
        if pause > 0 and any(sandbox_id in self._waits for sandbox_id in lane.ids):
            await asyncio.sleep(pause)  # settled ones gather meanwhile: one request for them
        return True

    def _end(self, lane: _Lane, outcome: Any) -> None:
        ids, lane.ids = list(lane.ids), {}
        lane.new.clear()
        for sandbox_id in ids:
            self._settle(sandbox_id, outcome)


def _started(sandbox_id: str, status: SandboxStatusResponse) -> bool:
    """Whether ``status`` says the start is done (true) or still under way (false).

    :raises StartupTimeout: / :class:`ImagePullFailed` / :class:`InternalServerRockError`: a
        phase failed or timed out; :class:`SandboxNotFound`: the sandbox stopped."""
    if status.state is State.RUNNING:
        return True
    for name, phase in (status.status or {}).items():
        if phase.status in (PhaseStatus.FAILED, PhaseStatus.TIMEOUT):
            message = f"Failed to start sandbox because {name}: {phase.message}"
            if phase.status is PhaseStatus.TIMEOUT:
                raise StartupTimeout(message, sandbox_id=sandbox_id, attempted="start")
            cls = ImagePullFailed if name == "image_pull" else InternalServerRockError
            raise cls(message, sandbox_id=sandbox_id, attempted="start")
    if status.state is not None and status.state not in LIVE_STATES:
        why = f": {status.reason}" if status.reason else ""
        raise SandboxNotFound(
            f"sandbox {sandbox_id} is not running (it is {status.state.value}{why})",
            sandbox_id=sandbox_id,
            attempted="wait_until_running",
        )
    return False


class RemoteWaits(RemoteCommits):
    """:meth:`wait_until_running` and :meth:`wait_any` of
    :class:`~rock.sdk._drivers.remote.RemoteDriver`."""

    _held: int
    _wait_any_served: bool = True  # until the admin answers that it has no such route
    _wait_brief: bool = True  # until the admin refuses the field (an older rock, strict_fields)

    def _gatherer(self) -> _Gatherer:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            gatherers = self.__dict__.setdefault("_gatherers", weakref.WeakKeyDictionary())
            gatherer: _Gatherer | None = gatherers.get(loop)
            if gatherer is None:
                gatherer = gatherers[loop] = _Gatherer(self)
            return gatherer

    async def wait_any(self, sandbox_ids: Sequence[str], timeout: float) -> WaitAnyResponse:
        """(rock) ``POST /sandboxes/wait_any``: held until the start of any of ``sandbox_ids``
        has settled, or ``timeout`` seconds (at most 30) passed; the statuses of all that have
        settled, and the ids the admin has no sandbox of (``unknown``).

        :raises NotSupported: the admin has no such route (ROCK's, or an older rock)."""
        result = await self._call(
            "POST",
            "/sandboxes/wait_any",
            "wait_any",
            None,
            json={"sandbox_ids": list(sandbox_ids), "wait": timeout},
            held=timeout > 0,
        )
        return structure_wire(result, WaitAnyResponse, forbid_extra_keys=False)

    async def _wait_watched(
        self, sandbox_ids: Sequence[str], timeout: float, watch: str | None
    ) -> WaitAnyResponse:
        """:meth:`wait_any` with the ids added to the admin's ``watch`` (``""``: a new one),
        answered ``brief`` (a running sandbox by its id, state and address: all a start's wait
        reads) unless this admin refused the field."""
        body: dict[str, Any] = {"sandbox_ids": list(sandbox_ids), "wait": timeout}
        if watch is not None:
            body["watch"] = watch
        if self._wait_brief:
            body["brief"] = True
        result = await self._call(
            "POST", "/sandboxes/wait_any", "wait_any", None, json=body, held=timeout > 0
        )
        return structure_wire(result, WaitAnyResponse, forbid_extra_keys=False)

    async def wait_until_running(
        self, sandbox_id: str, timeout: float | None = None
    ) -> SandboxStatusResponse:
        """Wait until the sandbox runs: without ``timeout``, together with this event loop's
        other waits, in one held ``wait_any`` request; else (or with an admin that lacks it)
        with ``get_status`` held until the start settles (up to 20 s a request; at most 512
        such requests at once per driver, the rest poll); an admin that answers at once (ROCK's)
        is polled 0.05 s apart, growing to 1 s. The status is the one the wait saw; waited
        together, a running sandbox's is brief (``sandbox_id``, ``state``, ``is_alive``,
        ``host_name``, ``host_ip``): ``get_status`` has the rest.

        :raises InternalServerRockError: a start phase failed or timed out: ``"Failed to start
            sandbox because {phase}: {message}"`` (:class:`~rock_core.errors.ImagePullFailed` for
            the image pull).
        :raises SandboxNotFound: the sandbox stopped (its reason in the message) or is unknown.
        :raises StartupTimeout: ``timeout`` seconds passed first (the start goes on).
        """
        delay = _POLL_FIRST
        while timeout is None and self._wait_any_served:
            status = await self._gatherer().settled(sandbox_id)
            if status is None:
                break  # no wait_any at this admin: as before
            if _started(sandbox_id, status):
                return status
            await anyio.sleep(delay)  # answered, still starting (a follower of a cluster)
            delay = min(delay * _POLL_GROWTH, _POLL_MAX)
        return await self._wait_each(sandbox_id, timeout)

    async def _wait_each(self, sandbox_id: str, timeout: float | None) -> SandboxStatusResponse:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            wait = (
                _STATUS_WAIT
                if deadline is None
                else min(_STATUS_WAIT, max(0.0, deadline - time.monotonic()))
            )
            with self._clients_lock:
                if self._held >= MAX_HELD:
                    wait = 0.0  # enough connections held open already: poll
                elif wait > 0:
                    self._held += 1
            asked_at = time.monotonic()
            try:
                status = await self.get_status(sandbox_id, include_all_states=True, wait=wait)
            finally:
                if wait > 0:
                    with self._clients_lock:
                        self._held -= 1
            held = wait > 0 and time.monotonic() - asked_at >= wait / 2  # the admin waited
            if _started(sandbox_id, status):
                return status
            pause = 0.0 if held else delay
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StartupTimeout(
                        f"Failed to start sandbox within {timeout:g}s",
                        sandbox_id=sandbox_id,
                        attempted="start",
                    )
                pause = min(pause, remaining)
            if pause > 0:
                await anyio.sleep(pause)
                delay = min(delay * _POLL_GROWTH, _POLL_MAX)

    async def get_status(
        self, sandbox_id: str, include_all_states: bool = False, *, wait: float = 0.0
    ) -> SandboxStatusResponse:
        """``GET /get_status`` (ROCK sends the flag as a Python bool string). With ``wait``
        seconds, rock's admin answers once a start under way has settled or the time is up."""
        params = {"sandbox_id": sandbox_id, "include_all_states": str(bool(include_all_states))}
        if wait > 0:
            params["wait"] = f"{wait:g}"
        result = await self._call(
            "GET", "/get_status", "get_status", sandbox_id, params=params, held=wait > 0
        )
        return structure_wire(result, SandboxStatusResponse, forbid_extra_keys=False)
