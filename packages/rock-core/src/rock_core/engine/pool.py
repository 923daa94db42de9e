"""Warm pools: sandboxes started ahead of demand, so that a start is one claim away from running.

A pool holds up to ``size`` *members* for one kind of sandbox (one :func:`pool_key`: image,
resources, network, environment). A member is a unit the runtime created and started, whose
rocklet has answered, but which no sandbox owns yet; it carries the engine's labels plus
``rock.pool`` (the key) and ``rock.pool_member`` (its name while unclaimed), and no
``rock.sandbox_id``. When a start asks for a sandbox of that kind, the engine takes a member,
has the runtime rename it to the sandbox id (:meth:`rock_core.runtime.Runtime.assign`) and checks
its rocklet once; the sandbox is running after that round trip. The pool then starts a
replacement, but only while no ordinary start waits in the start queue: refills never delay a
start that could not be served from the pool.

Falling back is always possible: a start whose kind has no pool, or whose pool is empty, or
whose member turns out dead, goes the ordinary way (create, start, wait for the rocklet). A
member that cannot be made (the image cannot be pulled, the runtime fails) is retried with a
growing delay, and the reason is kept in :attr:`WarmPool.last_error` for ``rock`` to show.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Container, Mapping

import anyio
import anyio.lowlevel
import attrs
import httpx

from rock_core.actions import WarmPoolStatus
from rock_core.engine.start_queue import StartQueue
from rock_core.errors import RockError
from rock_core.models import PRIORITY_MIN, NonBlankStr, RuntimeStatus, SandboxSpec, UnitState
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import Runtime, UnitHandle

__all__ = [
    "LABEL_POOL",
    "LABEL_POOL_MEMBER",
    "Member",
    "WarmPool",
    "is_unclaimed_member",
    "pool_key",
]

log = logging.getLogger("rock.engine.pool")

#: Label carrying a member's pool key; kept after the member is claimed.
LABEL_POOL = "rock.pool"
#: Label carrying a member's own name; a unit still named so has not been claimed.
LABEL_POOL_MEMBER = "rock.pool_member"
#: The start queue's fairness key for refills.
QUEUE_KEY = "rock:warm-pool"

# Spec fields that decide what the unit is; everything else (timeouts, identity, metadata,
# the id) belongs to the sandbox and is applied when a member is claimed.
_UNIT_FIELDS = (
    "image",
    "image_os",
    "memory",
    "cpus",
    "limit_cpus",
    "disk",
    "num_gpus",
    "accelerator_type",
    "pull",
    "registry_username",
    "registry_password",
    "env",
    "runtime_options",
    "pids_limit",
    "cap_add",
)
# Refill retry delays after failures: 1 s, 2 s, 4 s, ... at most a minute.
_MAX_BACKOFF = 60.0
# How often a refill waiting for the start queue to empty looks again.
_QUEUE_POLL = 0.05


def pool_key(spec: SandboxSpec) -> str:
    """The pool a sandbox of ``spec`` can be claimed from: a short digest of its unit-shaping fields.

    Two specs share a key exactly when the units made for them would be the same: image, pull
    policy, sizes, CPU settings, accelerators, environment, registry credentials and runtime
    options, and for a network group its tenant. Timeouts, identity headers, metadata and the
    sandbox id do not count, nor the tenant otherwise: any tenant's start may claim a member.
    """
    fields = {name: getattr(spec, name) for name in _UNIT_FIELDS}
    fields["pull"] = str(fields["pull"].value)
    if "network_group" in spec.runtime_options:
        # A group's network is its tenant's: only that tenant's starts may claim its members.
        fields["tenant"] = spec.tenant
    text = json.dumps(fields, sort_keys=True, default=str)
    return "pool-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def is_unclaimed_member(handle: UnitHandle, claimed: Container[str] = ()) -> bool:
    """Whether ``handle`` (from :meth:`Runtime.list`) is a pool member no sandbox has claimed.

    :param claimed: the unit ids sandboxes hold: a member claimed on a runtime that does not
        rename units keeps its pool name and labels, and only the records tell it apart.
    """
    name = handle.labels.get(LABEL_POOL_MEMBER)
    return bool(name) and handle.sandbox_id == name and handle.unit_id not in claimed


@attrs.frozen
class Member:
    """A started, answering unit waiting in a pool, with the secret its rocklet was given.

    The secret was made for this member alone and is handed to no one until the sandbox that
    claims the member takes it over.
    """

    handle: UnitHandle
    status: RuntimeStatus
    token: str = attrs.field(repr=False)


class WarmPool:
    """Keeps up to ``size`` members of one kind ready; see the module docstring.

    The engine runs :meth:`run` in its task group and calls :meth:`take` when a start of this
    kind arrives. Everything here runs on the engine's event loop, so no locks are needed.

    :param spec: the spec members are made from (``sandbox_id`` is replaced per member).
    :param labels: the engine's labels for the units it owns (without ``rock.sandbox_id``).
    :param startup_timeout: seconds a member may take to answer before it counts as a failure.
    :param is_busy: returns true while ordinary starts need the runtime (a refill then waits).
    :param key: the pool's key, when ``spec`` carries defaults its starts' specs leave unset
        (default: :func:`pool_key` of ``spec``).
    """

    def __init__(
        self,
        spec: SandboxSpec,
        size: int,
        *,
        runtime: Runtime,
        labels: Mapping[str, str],
        http: httpx.AsyncClient,
        queue: StartQueue,
        startup_timeout: float,
        is_busy: Callable[[], bool] | None = None,
        key: str | None = None,
    ) -> None:
        self.key = key or pool_key(spec)
        self.spec = attrs.evolve(spec, sandbox_id=None)
        self.size = size
        self._runtime = runtime
        self._labels = {**labels, LABEL_POOL: self.key}
        self._http = http
        self._queue = queue
        self._startup_timeout = startup_timeout
        self._is_busy = is_busy or (lambda: queue.depth > 0)
        # The first fill may use half the start slots; later refills go one at a time, so that
        # they do not crowd the CPU the claimed sandboxes are working with.
        self._fill_concurrency = max(1, queue.max_concurrency // 2)
        self._ready: deque[Member] = deque()
        self._starting = 0
        self._claimed = 0
        self._made = 0
        self._failures = 0  # in a row; reset by a success
        self._failures_total = 0
        self._retry_at = 0.0
        self.last_error: str | None = None
        self._changed = anyio.Event()
        self._closed = False

    # -- what the engine calls -------------------------------------------------------------

    def take(self) -> Member | None:
        """Hand out the oldest ready member (the caller now owns it), or ``None`` if there is none."""
        if not self._ready:
            return None
        member = self._ready.popleft()
        self._claimed += 1
        self._wake()
        return member

    def forget(self, unit_id: str) -> bool:
        """Drop a ready member whose unit stopped or vanished; return whether it was one of ours."""
        for member in self._ready:
            if member.handle.unit_id == unit_id:
                self._ready.remove(member)
                self._wake()
                return True
        return False

    def resize(self, size: int) -> list[Member]:
        """Change the target size; return the members beyond it, which the caller removes."""
        self.size = size
        surplus = []
        while len(self._ready) > size:
            surplus.append(self._ready.pop())
        self._wake()
        return surplus

    def drain(self) -> list[Member]:
        """Stop refilling and hand back every ready member, for the caller to remove."""
        self._closed = True
        members = list(self._ready)
        self._ready.clear()
        self._wake()
        return members

    @property
    def full(self) -> bool:
        """Whether the pool holds its target number of ready members."""
        return len(self._ready) >= self.size

    def status(self) -> WarmPoolStatus:
        """A snapshot of the pool for display."""
        return WarmPoolStatus(
            key=self.key,
            image=self.spec.image,
            size=self.size,
            ready=len(self._ready),
            starting=self._starting,
            claimed=self._claimed,
            made=self._made,
            failures=self._failures_total,
            last_error=self.last_error,
        )

    async def wait_changed(self) -> None:
        """Return at the pool's next change (a member ready, taken, failed, or the size changed)."""
        await self._changed.wait()

    # -- refilling -------------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self, remove: Callable[[UnitHandle], Awaitable[None]]) -> None:
        """Refill forever (until cancelled or drained), one member per free start slot.

        :param remove: how to dispose of a unit that failed to become a member.
        """
        async with anyio.create_task_group() as tg:
            while not self._closed:
                missing = self.size - len(self._ready) - self._starting
                now = time.monotonic()
                if missing <= 0:
                    await self._changed.wait()
                elif now < self._retry_at:
                    with anyio.move_on_after(self._retry_at - now):
                        await self._changed.wait()
                elif self._is_busy() or self._starting >= (
                    1 if self._claimed else self._fill_concurrency
                ):
                    await anyio.sleep(_QUEUE_POLL)
                else:
                    self._starting += 1
                    tg.start_soon(self._make_member, remove)
                    await (
                        anyio.lowlevel.checkpoint()
                    )  # let it take its queue slot before counting again

    async def _make_member(self, remove: Callable[[UnitHandle], Awaitable[None]]) -> None:
        name = f"rock-pool-{uuid.uuid4().hex[:12]}"
        spec = attrs.evolve(self.spec, sandbox_id=NonBlankStr(name))
        token = secrets.token_urlsafe(32)
        handle: UnitHandle | None = None
        try:
            async with self._queue.slot(QUEUE_KEY, name, PRIORITY_MIN) as release:  # behind all
                with anyio.fail_after(self._startup_timeout):
                    handle = await self._runtime.create(
                        spec, labels={**self._labels, LABEL_POOL_MEMBER: name}, rocklet_token=token
                    )
                    status = await self._runtime.start(handle) or await self._runtime.inspect(
                        handle
                    )
                    if status.state is not UnitState.RUNNING or status.rocklet_address is None:
                        raise _MemberFailed(
                            f"its unit is {status.state.value} (exit code {status.exit_code})"
                        )
                    client = RockletClient(self._http, *status.rocklet_address, name, token=token)
                    release()  # the rocklet boots in the unit's own CPU share, outside the count
                    await _wait_alive(client)
                    await client.warm_up()  # loaded before a claim, not by its first command
        except (RockError, _MemberFailed, TimeoutError) as exc:
            message = (
                exc.message
                if isinstance(exc, RockError)
                else str(exc) or f"no answer within {self._startup_timeout:g}s"
            )
            self._failed(name, message)
            if handle is not None:
                with anyio.CancelScope(shield=True):
                    await remove(handle)
            return
        except BaseException:
            # Cancelled: the pool was removed, or the engine closes. Leave nothing behind, not
            # even a unit the runtime finished creating as the cancellation came.
            with anyio.CancelScope(shield=True):
                await self._discard(name, handle, remove)
            raise
        finally:
            self._starting -= 1
        if self._closed or len(self._ready) >= self.size:
            with anyio.CancelScope(shield=True):
                await remove(handle)
            self._wake()
            return
        self._ready.append(Member(handle=handle, status=status, token=token))
        self._made += 1
        self._failures = 0
        self._wake()

    async def _discard(
        self, name: str, handle: UnitHandle | None, remove: Callable[[UnitHandle], Awaitable[None]]
    ) -> None:
        """Remove member ``name``'s unit, found by its label when its handle never came back."""
        handles = [handle] if handle is not None else []
        if handle is None:
            try:
                handles = list(await self._runtime.list({LABEL_POOL_MEMBER: name}))
            except RockError as exc:
                log.warning(
                    "warm pool %s: could not look for member %s to remove it: %s",
                    self.key,
                    name,
                    exc,
                )
        for found in handles:
            await remove(found)

    def _failed(self, name: str, message: str) -> None:
        self._failures += 1
        self._failures_total += 1
        self.last_error = message
        delay = min(_MAX_BACKOFF, 2.0 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        log.warning(
            "warm pool %s (%s): member %s failed: %s; retrying in %gs",
            self.key,
            self.spec.image,
            name,
            message,
            delay,
        )
        self._wake()


class _MemberFailed(Exception):
    pass


async def _wait_alive(client: RockletClient) -> None:
    """Poll a fresh member's rocklet until it answers (the caller's deadline bounds it)."""
    delay = 0.005
    while not await client.probe(timeout=1.0):
        await anyio.sleep(delay)
        delay = min(delay * 1.5, 0.1)
