"""A reset's spare unit: a sandbox that was reset once keeps the next unit started, so its next
reset is a swap rather than a start (issue #25's goal: a reset within half a cold start).

After a reset, on a runtime that renames units (capability ``assign``: Docker), :func:`keep`
creates and starts one unit of the sandbox's spec and image in the background, with the
sandbox's rocklet secret, named and labelled as a warm-pool member is (so an engine that closes
or starts again removes it if it was never used). :func:`take` hands it to the next reset of
the same image, which renames it after the sandbox. A spare holds the image's files and its
rocklet only (no process of the sandbox's); it is removed once the sandbox is no longer
running, or is reset to another image.
"""

from __future__ import annotations

import logging
import uuid
import weakref

import anyio
import attrs

from rock_core.engine.admission import startup_timeout, with_defaults
from rock_core.engine.core import EngineCore
from rock_core.engine.pool import LABEL_POOL_MEMBER
from rock_core.engine.removals import remove_quietly
from rock_core.errors import RockError
from rock_core.models import NonBlankStr, RuntimeStatus, UnitState
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.states import State

__all__ = ["Spare", "keep", "take"]

log = logging.getLogger("rock.engine")

#: How often a spare's keeper looks whether its sandbox still runs.
_WATCH_SECONDS = 1.0


@attrs.frozen
class Spare:
    """A started unit whose rocklet answered, for the next reset of ``image``."""

    handle: UnitHandle
    status: RuntimeStatus
    image: str


_spares: weakref.WeakKeyDictionary[EngineCore, dict[str, Spare]] = weakref.WeakKeyDictionary()
_making: weakref.WeakKeyDictionary[EngineCore, set[str]] = weakref.WeakKeyDictionary()


def take(core: EngineCore, sandbox_id: str, image: str) -> Spare | None:
    """The spare of ``sandbox_id`` if it holds ``image`` (the caller now owns it); a spare of
    another image is removed."""
    spare = _spares.get(core, {}).pop(sandbox_id, None)
    if spare is None or spare.image == image:
        return spare
    core.removals.submit(spare.handle)
    return None


def keep(core: EngineCore, sandbox_id: str) -> None:
    """Start making a spare for ``sandbox_id`` (its spec and image now), unless one is kept or
    being made, or the runtime cannot rename units, or the sandbox has GPUs."""
    if not core.runtime.capabilities.assign or not core.is_open:
        return
    live = core.live.get(sandbox_id)
    if live is None or live.record.spec.num_gpus:  # a spare would hold GPUs of its own
        return
    making = _making.setdefault(core, set())
    if sandbox_id in making or sandbox_id in _spares.get(core, {}):
        return
    making.add(sandbox_id)
    core.task_group().start_soon(_keeper, core, sandbox_id)


def _running(core: EngineCore, sandbox_id: str) -> bool:
    live = core.live.get(sandbox_id)
    return live is not None and live.record.state is State.RUNNING and not live.removing


async def _keeper(core: EngineCore, sandbox_id: str) -> None:
    """Make the spare, then remove it once its sandbox stops running (unless a reset took it)."""
    spare: Spare | None = None
    try:
        spare = await _make(core, sandbox_id)
        _making.get(core, set()).discard(sandbox_id)
        if spare is None:
            return
        spares = _spares.setdefault(core, {})
        spares[sandbox_id] = spare
        while spares.get(sandbox_id) is spare and _running(core, sandbox_id):  # noqa: ASYNC110
            await anyio.sleep(_WATCH_SECONDS)
        if spares.get(sandbox_id) is spare:
            del spares[sandbox_id]
            core.removals.submit(spare.handle)
    except BaseException:
        _making.get(core, set()).discard(sandbox_id)
        if spare is not None and _spares.get(core, {}).get(sandbox_id) is spare:
            del _spares[core][sandbox_id]
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await remove_quietly(core.runtime, spare.handle)
        raise


async def _make(core: EngineCore, sandbox_id: str) -> Spare | None:
    live = core.live.get(sandbox_id)
    if live is None or not _running(core, sandbox_id) or live.record.rocklet_token is None:
        return None
    record = live.record
    token = live.record.rocklet_token
    name = f"rock-pool-{uuid.uuid4().hex[:12]}"
    spec = attrs.evolve(with_defaults(core, record.spec), sandbox_id=NonBlankStr(name))
    runtime = core.runtime
    handle: UnitHandle | None = None
    try:
        with anyio.fail_after(startup_timeout(core, spec)):
            handle = await runtime.create(
                spec,
                labels={**core.labels(None), LABEL_POOL_MEMBER: name},
                rocklet_token=token,
            )
            status = await runtime.start(handle) or await runtime.inspect(handle)
            if status.state is not UnitState.RUNNING or status.rocklet_address is None:
                raise RockError(f"the spare unit is {status.state.value}")
            client = RockletClient(core.http, *status.rocklet_address, name, token=token)
            delay = 0.005
            while not await client.probe(timeout=1.0):
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 0.1)
            await client.forget()
    except (RockError, TimeoutError) as exc:
        log.info("no spare unit for sandbox %s: %s", sandbox_id, exc)
        if handle is not None:
            core.removals.submit(handle)
        return None
    except BaseException:
        if handle is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await remove_quietly(runtime, handle)
        raise
    if (
        not _running(core, sandbox_id)
        or core.live[sandbox_id].record.spec.image != record.spec.image
    ):
        core.removals.submit(handle)  # stopped, or reset to another image, meanwhile
        return None
    return Spare(handle=handle, status=status, image=record.spec.image)
