"""What the engine holds in memory for each sandbox it knows, and the labels its units carry.

Held by the engine's core (:class:`~rock_core.engine.core.EngineCore`) and used by its jobs: a
:class:`LiveSandbox` per sandbox that is not deleted, and the words for a unit that exited.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime

import anyio
import attrs

from rock_core.engine.lazy_event import LazyEvent
from rock_core.errors import BadRequestRockError, RockError, SandboxNotFound
from rock_core.models import RuntimeStatus, SandboxRecord, SandboxUsage, UnitState
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.states import State

__all__ = [
    "LABEL_ENGINE",
    "LABEL_ENGINE_ID",
    "LABEL_OWNER",
    "LABEL_SANDBOX_ID",
    "LiveSandbox",
    "describe_exit",
    "new_rocklet_token",
    "not_running_error",
    "now",
    "transition_lock",
]

#: The sandbox a unit holds.
LABEL_SANDBOX_ID = "rock.sandbox_id"
#: The kind of engine that made a unit (``EngineConfig.engine_label``).
LABEL_ENGINE = "rock.engine"
#: The process (or admin) that owns a unit (:mod:`rock_core.engine.owners`).
LABEL_OWNER = "rock.owner"
#: The engine instance that made a unit (tells two engines of one process apart).
LABEL_ENGINE_ID = "rock.engine_id"


def now() -> datetime:
    """The current time, in UTC, as records keep it."""
    return datetime.now(UTC)


def restart_reason(record: SandboxRecord) -> str | None:
    """Why a crashed sandbox whose record plans its restart (stopped, its next step ``pending``
    at the back-off's end: :mod:`rock_core.engine.crash_restarts`) is shown pending; ``None``
    for any other record. From the record alone, so every admin of a cluster says the same."""
    if record.state is not State.STOPPED or record.auto_transition_state is not State.PENDING:
        return None
    delay = 0.0
    if record.auto_transition_time is not None and record.stop_time is not None:
        delay = (record.auto_transition_time - record.stop_time).total_seconds()
    return (
        f"restarting after a crash (restart {record.restart_count + 1} of"
        f" {record.spec.max_restarts}, after a {delay:g}s back-off): {record.reason}"
    )


def new_rocklet_token() -> str:
    """A fresh random secret for one sandbox's rocklet (256 bits)."""
    return secrets.token_urlsafe(32)


def describe_exit(status: RuntimeStatus) -> str:
    """Words for a unit that is not running: its exit code, an OOM kill, or its removal."""
    if status.state is UnitState.MISSING:
        return "container was removed outside rock"
    if status.exit_code is None and status.error:
        text = "container ended"  # the runtime's own reason follows ("node lost: ...")
    else:
        text = f"container exited with code {status.exit_code}"
    if status.oom_killed:
        text += " (OOM killed: the sandbox used more than its memory limit)"
    if status.error:
        text += f": {status.error}"
    return text


def not_running_error(record: SandboxRecord, attempted: str) -> RockError:
    """The error for a call that needs ``record``'s sandbox running: still starting, or not running (with why)."""
    if record.state is State.PENDING:
        return BadRequestRockError(
            f"sandbox {record.sandbox_id} is not running yet (pending); wait for it to start",
            sandbox_id=record.sandbox_id,
            attempted=attempted,
        )
    why = f": {record.reason}" if record.reason else ""
    return SandboxNotFound(
        f"sandbox {record.sandbox_id} is not running (it is {record.state.value}{why})",
        sandbox_id=record.sandbox_id,
        attempted=attempted,
    )


def transition_lock() -> anyio.Lock:
    """A sandbox's transition lock: taken without a turn of the event loop when no one holds
    it (anyio's ``fast_acquire``; a cancelled caller still raises at once, and a held lock is
    waited for in turn). Every start takes it to turn running: the default lock's extra turn
    cost a burst of 16,000 starts about 4 % of its p50 (four alternating pairs of ``rock bench
    control-plane``: 6.43 -> 6.15 s on average)."""
    return anyio.Lock(fast_acquire=True)


@attrs.define
class LiveSandbox:
    """What the engine holds in memory for a sandbox that is not deleted.

    ``lock`` serialises the sandbox's transitions; ``settled`` is set when its current start
    has finished (running, failed or stopped), ``start_done`` when that start's task has
    returned; ``start_scope`` cancels the start (or restore) under way; ``removing``: its unit
    is being removed in the background, after which its record turns deleted;
    ``archive_scope`` cancels the archive under way, and ``archive_done`` is set once it ended.
    """

    record: SandboxRecord
    lock: anyio.Lock = attrs.field(factory=transition_lock)
    handle: UnitHandle | None = None
    client: RockletClient | None = None
    activity: float = attrs.field(factory=time.time)  # last call, for the idle timer
    settled: LazyEvent = attrs.field(factory=LazyEvent)  # the current start finished
    start_done: LazyEvent = attrs.field(factory=LazyEvent)  # its task has returned
    start_error: RockError | None = None
    start_scope: anyio.CancelScope | None = None
    removing: bool = False  # the unit is being removed in the background; then deleted
    archive_scope: anyio.CancelScope | None = None  # cancels the archive under way
    archive_done: LazyEvent = attrs.field(factory=LazyEvent)  # the last archive has settled
    restart_scope: anyio.CancelScope | None = (
        None  # cancels a crash restart waiting out its back-off
    )
    usage: SandboxUsage | None = None  # its resource use, last sampled (engine/monitoring.py)
    # While a crash restart waits out its back-off: why, as the status shows it (pending).
    coming_back: str | None = None

    def begin_start(self, *, keep_settled: bool = False) -> None:
        """Reset the start's bookkeeping for a new start of this sandbox (a restart, a restore,
        a restart after a crash): not done, no error, active now, and (unless ``keep_settled``:
        the caller made a fresh one already, which waiters may hold) not settled."""
        if not keep_settled:
            self.settled = LazyEvent()
        self.start_done = LazyEvent()
        self.start_error = None
        self.activity = time.time()

    def cancel_restart(self) -> None:
        """Cancel a restart after a crash waiting out its back-off (a ``stop()`` or ``delete()``
        meanwhile; :mod:`rock_core.engine.crash_restarts`)."""
        self.coming_back = None
        if self.restart_scope is not None:
            self.restart_scope.cancel()
