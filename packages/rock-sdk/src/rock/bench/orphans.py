"""``rock bench orphans``: a new trainer's first sandbox while its engine sweeps away N orphans.

A trainer killed with SIGKILL leaves its sandboxes running: orphans, whose owner is dead. The
next engine that starts on the host removes them in the background
(:func:`rock_core.engine.reaping.background_sweep`), and must not make its own first start
wait for that. The run, each trainer a child Python process using ROCK's SDK
(:class:`~rock.sdk.sandbox.client.Sandbox`, the embedded engine) as a trainer does:

1. **the floor**: a new trainer times its first ``Sandbox(config).start()`` (its engine starting
   inside it) and its first command, with no orphan on the host; then exits;
2. **the orphans**: a trainer starts N sandboxes at once. While they run and it lives, a new
   trainer times the same first start: the *busy floor*, a host with N more containers but
   nothing to sweep. Then the first trainer kills itself with SIGKILL. This process does not
   reap it, so while the next step runs the owner is a zombie (which counts as dead);
3. **the first start among orphans**: a new trainer times the same first start and command
   while its engine's sweep removes the N orphans; meanwhile (after the first start, so that the
   polling does not load dockerd during it) ``docker ps -a`` is polled until no orphan is left:
   the time until all are gone and the removal rate, both from the moment the trainer called
   ``start()`` (its engine, and so its sweep, begins then). The trainer also notes when its sweep
   had listed the orphans (the engine's log line).

Finally every container of the run (rock's ``rock.sandbox_id`` label and the run's name prefix)
must be gone: what is left counts as leftovers.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import attrs

from rock.bench._host import containers
from rock.bench.rollout import machine_info

__all__ = ["GOAL_FIRST_START_SECONDS", "OrphanSettings", "run_orphans", "table_rows"]

#: Issue #15: the first sandbox of a process that finds 300 orphans starts (and answers) within this.
GOAL_FIRST_START_SECONDS = 1.5


@attrs.frozen(kw_only=True)
class OrphanSettings:
    """What ``rock bench orphans`` runs.

    :param count: orphans left by the killed trainer.
    :param image: / ``memory`` / ``cpus``: every sandbox's.
    :param startup_timeout: each start's limit (from when it leaves the engine's start queue).
    :param gone_timeout: how long the orphans may take to go before what is left counts as leftovers.
    """

    count: int
    image: str = "python:3.11"
    memory: str = "256m"
    cpus: float = 0.1
    startup_timeout: float = 300.0
    gone_timeout: float = 300.0

    def sandbox_config(self, sandbox_id: str) -> Any:
        """The :class:`~rock.sdk.sandbox.config.SandboxConfig` of one sandbox of the run."""
        from rock.sdk.sandbox.config import SandboxConfig

        return SandboxConfig(
            sandbox_id=sandbox_id,
            image=self.image,
            memory=self.memory,
            cpus=self.cpus,
            startup_timeout=self.startup_timeout,
            auto_clear_seconds=3600,
            experiment_id="bench-orphans",
        )


# -- the trainers (child processes) --------------------------------------------------------------


def _emit(**fields: Any) -> None:
    """One JSON line to the bench (the children's only channel)."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def _make_orphans(settings: OrphanSettings, prefix: str) -> None:
    """Start ``settings.count`` sandboxes at once, say so, and when told (a line on stdin) die by
    SIGKILL (no clean-up runs)."""
    import asyncio

    from rock.sdk.sandbox.client import Sandbox

    t0 = time.perf_counter()
    sandboxes = [
        Sandbox(settings.sandbox_config(f"{prefix}{n:04d}")) for n in range(settings.count)
    ]
    running = 0

    async def start(sandbox: Sandbox) -> None:
        nonlocal running
        await sandbox.start()
        running += 1

    async def progress() -> None:
        while True:
            await asyncio.sleep(2)
            _emit(event="progress", running=running, seconds=round(time.perf_counter() - t0, 3))

    reporter = asyncio.create_task(progress())
    outcomes = await asyncio.gather(*(start(s) for s in sandboxes), return_exceptions=True)
    reporter.cancel()
    errors = sorted({f"{type(e).__name__}: {e}" for e in outcomes if isinstance(e, BaseException)})
    if errors:
        _emit(event="failed", running=running, errors=errors[:5])
        return  # a normal exit: the engine removes what it started
    _emit(event="running", running=running, seconds=round(time.perf_counter() - t0, 3))
    await asyncio.to_thread(sys.stdin.readline)  # the bench measures the busy floor meanwhile
    os.kill(os.getpid(), signal.SIGKILL)


class _SweepLog(logging.Handler):
    """Notes when the engine's sweep has listed the orphans (its ``removing N ...`` line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.at: float | None = None
        self.found: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        # the sweep's own line (rock_core.engine.reaping.sweep), by its format, not its wording's end
        if self.at is None and str(record.msg).startswith("removing %d sandbox(es) whose owner"):
            self.at = time.monotonic()
            found = record.args[0] if isinstance(record.args, tuple) and record.args else None
            self.found = None if found is None else int(cast("int", found))


async def _first_start(settings: OrphanSettings, sandbox_id: str, sweep: _SweepLog) -> None:
    """Time a new trainer's first start and first command; report; hold on until told to exit."""
    import asyncio

    from rock.sdk.sandbox.client import Sandbox
    from rock_core.actions import Command

    sandbox = Sandbox(settings.sandbox_config(sandbox_id))
    called = time.monotonic()  # monotonic is one clock for every process of the host (Linux)
    await sandbox.start()
    started = time.monotonic()
    answer = await sandbox.execute(Command(command=["echo", "x"], timeout=60))
    answered = time.monotonic()
    if answer.exit_code != 0 or answer.stdout.strip() != "x":
        raise RuntimeError(
            f"echo x answered {answer.exit_code}: {answer.stdout!r} {answer.stderr!r}"
        )
    _emit(
        event="first_start",
        called_at=called,
        start_seconds=round(started - called, 4),
        command_seconds=round(answered - started, 4),
        sweep_listed_seconds=None if sweep.at is None else round(sweep.at - called, 4),
        sweep_found=sweep.found,
    )
    await asyncio.to_thread(sys.stdin.read)  # the bench closes our stdin once it has measured
    await sandbox.stop()


def _child_main(role: str, settings_json: str, name: str, engine_label: str) -> None:
    import asyncio

    from rock.sdk import configure_embedded_driver
    from rock_core.engine.config import EngineConfig
    from rock_core.models import NonBlankStr

    settings = OrphanSettings(**json.loads(settings_json))
    configure_embedded_driver(EngineConfig(engine_label=NonBlankStr(engine_label)))
    if role == "make":
        asyncio.run(_make_orphans(settings, name))
        return
    sweep = _SweepLog()
    engine_log = logging.getLogger("rock.engine")
    engine_log.addHandler(sweep)
    engine_log.setLevel(logging.INFO)
    asyncio.run(_first_start(settings, name, sweep))


# -- the bench ------------------------------------------------------------------------------------


def _spawn(role: str, settings: OrphanSettings, name: str) -> subprocess.Popen[str]:
    # Popen, never asyncio's subprocesses: their child watcher would reap the killed trainer at
    # once, and the bench wants it left a zombie while the next trainer judges its owner.
    # The run's own engine label: other engines on the host (tests, trainers) neither sweep
    # this run's orphans nor hand their own to this run's sweep.
    label = f"bench-{name.split('-')[1]}"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rock.bench.orphans",
            role,
            json.dumps(attrs.asdict(settings)),
            name,
            label,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _read_event(
    process: subprocess.Popen[str], wanted: str, say: Callable[[str], None], count: int = 0
) -> dict[str, Any]:
    """Read the child's lines until the ``wanted`` event; a failure or an early exit raises."""
    stdout = process.stdout
    assert stdout is not None  # the child was made with stdout=PIPE
    for line in stdout:
        event: dict[str, Any] = json.loads(line)
        if event["event"] == wanted:
            return event
        if event["event"] == "progress":
            say(f"started {event['running']}/{count} after {event['seconds']:.1f}s")
        elif event["event"] == "failed":
            raise RuntimeError(
                f"{count - event['running']} of {count} starts failed: {event['errors']}"
            )
    code = process.wait()
    raise RuntimeError(
        f"the trainer process ended (exit code {code}) before it reported {wanted!r}"
    )


def _process_state(pid: int) -> str:
    """``"zombie"``, ``"running"`` (any live state) or ``"gone"``, from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "gone"
    return "zombie" if state == "Z" else "running"


def _trainer(
    settings: OrphanSettings, sandbox_id: str, say: Callable[[str], None]
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """A new trainer process that has made its first start; its report."""
    process = _spawn("trainer", settings, sandbox_id)
    try:
        return process, _read_event(process, "first_start", say)
    except BaseException:
        _end(process)
        raise


def _end(process: subprocess.Popen[str], timeout: float = 120) -> None:
    """Let a trainer exit as a trainer does (its engine removes its sandboxes); kill it if it hangs."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_gone(prefix: str, since: float, timeout: float) -> tuple[float, int]:
    """Poll ``docker ps -a`` until no container named ``prefix...`` is left: ``(seconds since `since`, left)``."""
    deadline = time.monotonic() + timeout
    while True:
        left = len(containers(prefix))
        at = time.monotonic()
        if left == 0 or at > deadline:
            return at - since, left
        time.sleep(0.25)


def run_orphans(
    settings: OrphanSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run the three steps; return the document (figures, ``settings``, ``machine``)."""
    run = f"orphans-{uuid.uuid4().hex[:8]}-"
    orphans = f"{run}o-"
    figures: dict[str, Any] = {
        "count": settings.count,
        "containers_filter": f"label=rock.sandbox_id name=^{run}",
    }
    document: dict[str, Any] = {
        "figures": figures,
        "settings": attrs.asdict(settings),
        "machine": machine_info(),
    }
    maker: subprocess.Popen[str] | None = None
    try:
        say("the floor: a new trainer's first start with no orphans")
        floor, report = _trainer(settings, f"{run}floor", say)
        _end(floor)
        figures.update(
            {
                "floor_first_start_seconds": report["start_seconds"],
                "floor_first_command_seconds": report["command_seconds"],
            }
        )

        say(
            f"a trainer starts {settings.count} sandboxes ({settings.image}, {settings.memory}, "
            f"{settings.cpus:g} cpus), then kills itself with SIGKILL"
        )
        maker = _spawn("make", settings, orphans)
        made = _read_event(maker, "running", say, settings.count)
        figures["orphans_running_seconds"] = made["seconds"]

        say(
            f"the busy floor: a new trainer's first start beside {settings.count} sandboxes of a live trainer"
        )
        busy, report = _trainer(settings, f"{run}busy", say)
        _end(busy)
        figures.update(
            {
                "busy_floor_first_start_seconds": report["start_seconds"],
                "busy_floor_first_command_seconds": report["command_seconds"],
            }
        )
        assert maker.stdin is not None and maker.stdout is not None
        maker.stdin.write("die\n")
        maker.stdin.flush()
        for _ in maker.stdout:  # EOF: it is dead (and, unreaped, a zombie)
            pass
        figures["orphans"] = len(containers(orphans))
        figures["orphan_owner_state"] = _process_state(maker.pid)
        say(f"{figures['orphans']} orphans; their owner is {figures['orphan_owner_state']}")

        say("a new trainer's first start while its engine sweeps the orphans")
        trainer, report = _trainer(settings, f"{run}first", say)
        try:
            figures["orphans_left_after_first_start"] = len(containers(orphans))
            figures.update(
                {
                    "first_start_seconds": report["start_seconds"],
                    "first_command_seconds": report["command_seconds"],
                    "sweep_listed_orphans_seconds": report["sweep_listed_seconds"],
                    "sweep_found_orphans": report["sweep_found"],
                }
            )
            say(
                f"first start {report['start_seconds']:.2f}s + first command {report['command_seconds']:.2f}s; "
                f"{figures['orphans_left_after_first_start']} orphans left"
            )
            gone, left = _wait_gone(orphans, report["called_at"], settings.gone_timeout)
        finally:
            _end(trainer)
        figures["orphans_gone_seconds"] = round(gone, 3) if left == 0 else None
        figures["orphans_removal_rate_per_second"] = (
            round(settings.count / gone, 2) if left == 0 and gone > 0 else None
        )
        say(
            f"all {settings.count} orphans gone after {gone:.1f}s"
            if left == 0
            else f"{left} ORPHANS LEFT after {gone:.0f}s"
        )
    finally:
        if maker is not None:
            maker.wait()  # reap the zombie (it is dead: this returns at once)
        _, figures["leftovers"] = _wait_gone(run, time.monotonic(), 60)
    first = _first_total(figures, "")
    for kind in ("floor_", "busy_floor_"):
        total = figures[f"{kind}first_start_and_command_seconds"] = _first_total(figures, kind)
        figures[f"first_start_over_{kind}seconds"] = (
            round(first - total, 4) if first is not None and total is not None else None
        )
    figures["first_start_and_command_seconds"] = first
    figures["goal_first_start_seconds"] = GOAL_FIRST_START_SECONDS
    figures["goal_met"] = first is not None and first <= GOAL_FIRST_START_SECONDS
    return document


def _first_total(figures: dict[str, Any], prefix: str) -> float | None:
    start, command = (
        figures.get(f"{prefix}first_start_seconds"),
        figures.get(f"{prefix}first_command_seconds"),
    )
    return None if start is None or command is None else round(start + command, 4)


# Rows of the table: (label, figure without orphans, beside a live trainer's N, among N orphans).
TABLE = (
    (
        "first start (s)",
        "floor_first_start_seconds",
        "busy_floor_first_start_seconds",
        "first_start_seconds",
    ),
    (
        "first command (s)",
        "floor_first_command_seconds",
        "busy_floor_first_command_seconds",
        "first_command_seconds",
    ),
    (
        "first start + command (s)",
        "floor_first_start_and_command_seconds",
        "busy_floor_first_start_and_command_seconds",
        "first_start_and_command_seconds",
    ),
    ("sweep listed the orphans (s)", None, None, "sweep_listed_orphans_seconds"),
    ("orphans left after the first start", None, None, "orphans_left_after_first_start"),
    ("all orphans gone (s)", None, None, "orphans_gone_seconds"),
    ("removal rate (/s)", None, None, "orphans_removal_rate_per_second"),
    ("leftovers", None, None, "leftovers"),
)


def table_rows(figures: dict[str, Any]) -> list[list[str]]:
    """One row per line of :data:`TABLE`: its label, then its value in each of the three cases."""

    def cell(key: str | None) -> str:
        value = figures.get(key) if key else None
        return "" if value is None else f"{value:g}"

    return [[label, *(cell(key) for key in keys)] for label, *keys in TABLE]


if __name__ == "__main__":
    _child_main(*sys.argv[1:5])
