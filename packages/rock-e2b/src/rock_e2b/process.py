"""envd's ``process.Process`` on rock: a command is a rocklet ``execute_stream`` in the sandbox,
run by a task of the admin's that outlives the RPC (E2B's background commands go on when their
stream closes), its events kept for the streams that read them (``Start``, ``Connect``).

``SendSignal`` signals the command's process group (the rocklet starts each in a session of its
own) with ``kill`` run in the sandbox. A command started with ``stdin`` reads a pipe that
``SendInput`` writes and ``CloseStdin`` ends (:mod:`rock_e2b.stdin`). Not served, with Connect's
``unimplemented`` and what is missing: PTYs (``pty``, ``Update``), another user than the
rocklet's (``user``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof

from rock_core.actions import Command
from rock_core.errors import RockError
from rock_e2b import stdin
from rock_e2b.dataplane import Target, current, rock_failure
from rock_e2b.envd.process import process_pb as pb
from rock_e2b.envd.process.process_connect import ProcessASGIApplication

__all__ = ["METHODS", "application"]

METHODS = (
    "List",
    "Connect",
    "Start",
    "Update",
    "StreamInput",
    "SendInput",
    "SendSignal",
    "CloseStdin",
)
_KEEPALIVE = 30.0
#: Output bytes kept per command for its streams (``Start``'s, ``Connect``'s).
KEPT_OUTPUT = 16 * 1024 * 1024
#: Events kept per command: each costs the admin far more than its bytes, so a command writing a
#: byte at a time keeps this many at most (the oldest go first, as for KEPT_OUTPUT).
KEPT_EVENTS = 65536
_tags = itertools.count(1)


class Running:
    """One command: its config, pid in the sandbox, and its events so far: the last
    :data:`KEPT_OUTPUT` bytes of output and :data:`KEPT_EVENTS` events at most (a stream that
    reads slower than the command writes more than that misses the oldest)."""

    def __init__(self, config: pb.ProcessConfig, tag: str | None) -> None:
        self.config = config
        self.tag = tag
        self.pid = 0
        self.events: list[pb.ProcessEvent] = []
        #: How many events were dropped from the front of :attr:`events`.
        self.dropped = 0
        self.kept = 0
        self.ended = False
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: The pipe the command reads its stdin from (``None``: stdin is ``/dev/null``).
        self.pipe: str | None = None
        self.writing = asyncio.Lock()

    def add(self, event: pb.ProcessEvent, size: int = 0) -> None:
        self.events.append(event)
        self.kept += size
        count = len(self.events)
        if self.kept > KEPT_OUTPUT or count > KEPT_EVENTS:
            # The oldest go in one cut (the list moves once, not once per event); past
            # KEPT_EVENTS down to three quarters of it, so the next cut is that far off.
            floor = KEPT_EVENTS * 3 // 4 if count > KEPT_EVENTS else count
            cut, kept = 0, self.kept
            while cut < count - 1 and (kept > KEPT_OUTPUT or count - cut > floor):
                kept -= _size(self.events[cut])
                cut += 1
            del self.events[:cut]
            self.kept = kept
            self.dropped += cut
        self.changed.set()
        self.changed = asyncio.Event()

    @property
    def next_index(self) -> int:
        """The index the next event will have."""
        return self.dropped + len(self.events)

    async def follow(self, start: int) -> AsyncIterator[pb.ProcessEvent]:
        """The events from index ``start`` on, until the end event; keepalives while quiet."""
        index = start
        while True:
            while index < self.next_index:
                index = max(index, self.dropped)
                event = self.events[index - self.dropped]
                index += 1
                yield event
                if event.event is not None and event.event.field == "end":
                    return
            if self.ended:
                return
            try:
                await asyncio.wait_for(self.changed.wait(), _KEEPALIVE)
            except TimeoutError:
                yield pb.ProcessEvent(event=_oneof("keepalive", pb.ProcessEvent.KeepAlive()))


def _size(event: pb.ProcessEvent) -> int:
    if event.event is None or event.event.field != "data":
        return 0
    output = event.event.value.output
    return 0 if output is None else len(output.value)


def _oneof(field: str, value: Any) -> Any:
    """A oneof's value (the generated types want each field's literal name)."""
    return Oneof(field, value)


#: Commands by sandbox id, then pid.
_running: dict[str, dict[int, Running]] = {}


def _user(where: Target) -> None:
    user = where.other_user()
    if user is not None:
        raise ConnectError(
            Code.UNIMPLEMENTED,
            f"user {user!r}: rock runs E2B's commands as the sandbox's own user (root); "
            "running them as another user is not served",
        )


def _end(exit_code: int, error: str | None = None) -> pb.ProcessEvent:
    end = pb.ProcessEvent.EndEvent(
        exit_code=exit_code,
        exited=error is None,
        status=f"exit status {exit_code}" if error is None else "error",
        error=error,
    )
    return pb.ProcessEvent(event=_oneof("end", end))


async def _run(
    where: Target, proc: Running, command: Command, started: asyncio.Future[int]
) -> None:
    engine, sandbox_id = where.engine, where.sandbox_id
    try:
        # Like E2B's timeout, the idle timeout runs while a command does: starting one is
        # activity, a command running for ever does not keep its sandbox.
        client = engine.rocklet(sandbox_id, "e2b process.Start")
        async for event in client.execute_stream(command):
            kind = event.get("type")
            if kind == "start":
                proc.pid = int(event.get("pid") or 0)
                _running.setdefault(sandbox_id, {})[proc.pid] = proc
                proc.add(
                    pb.ProcessEvent(event=_oneof("start", pb.ProcessEvent.StartEvent(pid=proc.pid)))
                )
                if not started.done():
                    started.set_result(proc.pid)
            elif kind == "output":
                data = str(event.get("data", "")).encode()
                stream = "stderr" if event.get("stream") == "stderr" else "stdout"
                output = pb.ProcessEvent.DataEvent(output=_oneof(stream, data))
                proc.add(pb.ProcessEvent(event=_oneof("data", output)), len(data))
            elif kind == "exit":
                code = event.get("exit_code")
                proc.add(_end(-1 if code is None else int(code)))
    except RockError as exc:
        if not started.done():
            started.set_exception(exc)
        else:
            proc.add(_end(-1, exc.message))
    except Exception as exc:
        if not started.done():
            started.set_exception(exc)
        else:
            proc.add(_end(-1, f"{type(exc).__name__}: {exc}"))
    finally:
        if not started.done():  # the stream ended (or was cancelled) before the start
            started.set_exception(RuntimeError("the command's stream ended before it started"))
        elif not started.cancelled() and started.exception() is None:
            last = proc.events[-1].event if proc.events else None
            if last is None or last.field != "end":
                proc.add(_end(-1, "the command's stream ended without its exit"))
        proc.ended = True
        proc.changed.set()
        _running.get(sandbox_id, {}).pop(proc.pid, None)


def _find(where: Target, selector: pb.ProcessSelector | None) -> Running:
    procs = _running.get(where.sandbox_id, {})
    chosen = selector.selector if selector is not None else None
    if chosen is not None and chosen.field == "pid" and chosen.value in procs:
        return procs[int(chosen.value)]
    if chosen is not None and chosen.field == "tag":
        for proc in procs.values():
            if proc.tag == chosen.value:
                return proc
    shown = "nothing" if chosen is None else f"{chosen.field} {chosen.value}"
    raise ConnectError(Code.NOT_FOUND, f"process with {shown} not found")


def _pipe(proc: Running) -> str:
    if proc.pipe is None:
        raise ConnectError(
            Code.FAILED_PRECONDITION,
            f"process {proc.pid} was started without stdin: start it with stdin=True",
        )
    return proc.pipe


def _unserved(what: str) -> ConnectError:
    return ConnectError(Code.UNIMPLEMENTED, f"rock does not serve {what} for E2B's commands")


class ProcessService:
    """The ``process.Process`` implementation (:class:`~rock_e2b.envd.process.process_connect.Process`)."""

    async def list(self, request: pb.ListRequest, ctx: Any) -> pb.ListResponse:
        where = current.get()
        procs = _running.get(where.sandbox_id, {}).values()
        return pb.ListResponse(
            processes=[pb.ProcessInfo(config=p.config, pid=p.pid, tag=p.tag) for p in procs]
        )

    async def start(self, request: pb.StartRequest, ctx: Any) -> AsyncIterator[pb.StartResponse]:
        where = current.get()
        if request.pty is not None:
            raise _unserved("PTYs (pty)")
        _user(where)
        config = request.process or pb.ProcessConfig()
        if not config.cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd: a command is required")
        proc = Running(config, request.tag)
        argv = [config.cmd, *config.args]
        if request.stdin:
            proc.pipe = stdin.new_pipe()
            argv = stdin.wrap(argv, proc.pipe)
        command = Command(
            command=argv,
            env=dict(config.envs) or None,
            cwd=config.cwd or None,
            timeout=None,
        )
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        proc.task = asyncio.get_running_loop().create_task(_run(where, proc, command, started))
        try:
            await started
        except RockError as exc:
            raise rock_failure(exc) from None
        async for event in proc.follow(0):
            yield pb.StartResponse(event=event)

    async def connect(
        self, request: pb.ConnectRequest, ctx: Any
    ) -> AsyncIterator[pb.ConnectResponse]:
        where = current.get()
        proc = _find(where, request.process)
        start = pb.ProcessEvent(event=_oneof("start", pb.ProcessEvent.StartEvent(pid=proc.pid)))
        yield pb.ConnectResponse(event=start)
        async for event in proc.follow(proc.next_index):
            yield pb.ConnectResponse(event=event)

    async def update(self, request: pb.UpdateRequest, ctx: Any) -> pb.UpdateResponse:
        raise _unserved("PTYs (Update)")

    async def stream_input(self, request: Any, ctx: Any) -> pb.StreamInputResponse:
        where = current.get()
        proc: Running | None = None
        async for message in request:
            event = message.event
            if event is None or event.field == "keepalive":
                continue
            if event.field == "start":
                proc = _find(where, event.value.process)
                continue
            if proc is None:
                raise ConnectError(Code.FAILED_PRECONDITION, "StreamInput: data before start")
            given = event.value.input.input if event.value.input is not None else None
            if given is not None and given.field == "pty":
                raise _unserved("PTYs (pty input)")
            async with proc.writing:
                await stdin.send(where, _pipe(proc), given.value if given is not None else b"")
        return pb.StreamInputResponse()

    async def send_input(self, request: pb.SendInputRequest, ctx: Any) -> pb.SendInputResponse:
        where = current.get()
        proc = _find(where, request.process)
        given = request.input.input if request.input is not None else None
        if given is not None and given.field == "pty":
            raise _unserved("PTYs (pty input)")
        async with proc.writing:
            await stdin.send(where, _pipe(proc), given.value if given is not None else b"")
        return pb.SendInputResponse()

    async def close_stdin(self, request: pb.CloseStdinRequest, ctx: Any) -> pb.CloseStdinResponse:
        where = current.get()
        proc = _find(where, request.process)
        async with proc.writing:
            await stdin.close(where, _pipe(proc))
        return pb.CloseStdinResponse()

    async def send_signal(self, request: pb.SendSignalRequest, ctx: Any) -> pb.SendSignalResponse:
        where = current.get()
        proc = _find(where, request.process)
        signal = "KILL" if request.signal == pb.Signal.SIGKILL else "TERM"
        argv = ["/bin/sh", "-c", f'kill -s {signal} -- "-$1"', "kill", str(proc.pid)]
        try:
            client = where.engine.rocklet(where.sandbox_id, "e2b process.SendSignal")
            answer = await client.execute(Command(command=argv, timeout=10))
        except RockError as exc:
            raise rock_failure(exc) from None
        if answer.exit_code != 0:
            raise ConnectError(
                Code.NOT_FOUND, f"process {proc.pid}: {answer.stderr.strip() or 'not running'}"
            )
        return pb.SendSignalResponse()


_app: ProcessASGIApplication | None = None


def application() -> ProcessASGIApplication:
    """The one ``process.Process`` ASGI application of this admin."""
    global _app
    if _app is None:
        _app = ProcessASGIApplication(ProcessService())  # type: ignore[arg-type]
    return _app
