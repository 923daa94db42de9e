"""A :class:`~rock.sdk.sandbox.client.Sandbox`'s lifecycle: start (or attach), wait until it runs,
stop, delete, archive, restart, status, and ``async with``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from rock.sdk.sandbox._handle import SandboxHandle
from rock_core.actions import IsAliveResponse, SandboxStartRequest, SandboxStatusResponse
from rock_core.egress import EgressPolicy
from rock_core.errors import (
    BadRequestRockError,
    InternalServerRockError,
    SandboxNotFound,
    StartupTimeout,
)
from rock_core.models import NonBlankStr
from rock_core.states import LIVE_STATES

log = logging.getLogger("rock.sdk.sandbox.client")  # where these messages were always logged


class SandboxLifecycle(SandboxHandle):
    """Starting, stopping and watching the sandbox (ROCK's lifecycle methods)."""

    # -- lifecycle -----------------------------------------------------------------------------

    def _start_request(self) -> SandboxStartRequest:
        cfg = self.config
        cfg.check_lifecycle()
        # Plain values: the request's fields check each one (a bad value names its field).
        fields: dict[str, Any] = dict(
            image=cfg.image,
            image_os=cfg.image_os,
            auto_clear_seconds=cfg.auto_clear_seconds,
            auto_clear_time_minutes=math.ceil(cfg.auto_clear_seconds / 60),
            startup_timeout=cfg.startup_timeout,
            memory=cfg.memory,
            cpus=cfg.cpus,
            limit_cpus=cfg.limit_cpus,
            num_gpus=cfg.num_gpus,
            accelerator_type=cfg.accelerator_type,
            registry_username=cfg.registry_username,
            registry_password=cfg.registry_password,
            use_kata_runtime=cfg.use_kata_runtime,
            sandbox_id=cfg.sandbox_id,
            auto_archive_seconds=cfg.auto_archive_seconds,
            auto_delete_seconds=cfg.auto_delete_seconds,
            disk=cfg.disk,
            env=dict(cfg.env) if cfg.env else None,
            metadata=dict(cfg.metadata) if cfg.metadata else None,
            network=cfg.network,
            network_group=cfg.network_group,
            pids_limit=cfg.pids_limit,
            cap_add=list(cfg.cap_add) if cfg.cap_add else None,
            priority=cfg.priority,
            restart_policy=cfg.restart_policy,
            max_restarts=cfg.max_restarts,
            snapshot=cfg.snapshot,
            egress=cfg.egress.to_dict() if cfg.egress is not None else None,
        )
        return SandboxStartRequest(**fields)

    async def start(self) -> None:
        """Start the sandbox and wait until it runs (at most ``config.startup_timeout`` seconds).

        A failed start fails at once, naming the phase: ``"Failed to start sandbox because
        image_pull: Failed to pull image ..."``. In embedded mode the wait is on the engine's own
        event, not a 3-second poll. A start that times out is stopped (nothing is left running).

        :raises InvalidParameter: a bad ``memory``/``disk``/``cpus``, a value above the engine's
            maximum (16 CPUs, 64g, 256g), an invalid ``sandbox_id`` (all ``BadRequestRockError``).
        :raises SandboxAlreadyExists: ``config.sandbox_id`` is taken.
        :raises BadRequestRockError: this ``Sandbox`` already holds a pending or running sandbox
            (ROCK would start a second one and lose the first); ``stop()`` it first.
        :raises InternalServerRockError: the start failed (``StartupTimeout`` when it timed out).
        """
        driver = self._get_driver()
        cfg = self.config
        if self._sandbox_id is not None:
            try:
                current = (await driver.get_status(self._sandbox_id, True)).state
            except SandboxNotFound:
                current = None
            if current in LIVE_STATES:
                raise BadRequestRockError(
                    f"this Sandbox already holds sandbox {self._sandbox_id} ({current.value}); a second start() "
                    "would leave it running unreachable: stop() it first, or make another Sandbox",
                    sandbox_id=self._sandbox_id,
                    attempted="start",
                )
        request = self._start_request()
        # Choose the id here, so that a start cancelled at any point can still be stopped.
        chosen = request.sandbox_id is None
        if chosen:
            request = attrs.evolve(request, sandbox_id=NonBlankStr(uuid.uuid4().hex))
        try:
            started = await driver.start_async(
                request,
                user_id=cfg.user_id,
                experiment_id=cfg.experiment_id,
                namespace=cfg.namespace,
                cluster=cfg.cluster,
            )
        except asyncio.CancelledError:
            if chosen:
                await self._stop_after_cancel(str(request.sandbox_id))
            raise
        assert started.sandbox_id is not None
        self._sandbox_id = started.sandbox_id
        self._host_name = started.host_name
        self._host_ip = started.host_ip
        await self._wait_running("start")

    async def _wait_running(self, attempted: str) -> None:
        driver = self._get_driver()
        sandbox_id = self._require_id(attempted)
        try:
            # No client-side deadline: the engine applies ``startup_timeout`` from the moment the
            # start leaves its queue, so a sandbox waiting in a burst is not failed for waiting.
            status = await driver.wait_until_running(sandbox_id, timeout=None)
        except StartupTimeout:
            await self.stop()
            raise
        except asyncio.CancelledError:
            await self._stop_after_cancel(sandbox_id)
            raise
        self._host_name = status.host_name or self._host_name
        self._host_ip = status.host_ip or self._host_ip

    async def _stop_after_cancel(self, sandbox_id: str) -> None:
        # The caller gave up on the start: stop the sandbox rather than leave it running unseen.
        try:
            await asyncio.shield(self._get_driver().stop(sandbox_id))
        except Exception as exc:  # noqa: BLE001 - already unwinding a cancellation
            log.warning(
                "could not stop sandbox %s after its start was cancelled: %s", sandbox_id, exc
            )

    async def stop(self) -> None:
        """Stop the sandbox. Never raises (as ROCK): a failure is logged. No-op before ``start()``.

        With the default lifecycle the stopped sandbox is deleted at once (ROCK's ``--rm``);
        set ``auto_delete_seconds`` to keep it for :meth:`restart`.
        """
        if not self._sandbox_id:
            return
        try:
            await self._get_driver().stop(self._sandbox_id)
        except Exception as exc:  # noqa: BLE001 - ROCK's stop() never raises
            log.warning("could not stop sandbox %s (ignored): %s", self._sandbox_id, exc)

    async def delete(self) -> None:
        """Delete the stopped sandbox and its container (already deleted: no error).

        :raises InvalidTransition: it is still pending or running: ``stop()`` it first.
        """
        await self._get_driver().delete(self._require_id("delete"))

    async def archive(self) -> None:
        """Archive the stopped sandbox: store it in the engine's archive store and remove its
        container. Returns at once; the sandbox is ``archiving``, then ``archived`` (see
        ``get_status(include_all_states=True)``: phases ``image_archive`` and ``log_archive``),
        or ``stopped`` again with the reason when the archive failed. :meth:`restart` brings it
        back where it was.

        Needs an archive store (the engine's ``archive_store``, e.g. ``s3`` from
        rock-archive-s3) and a sandbox kept after its stop (``auto_delete_seconds > 0``).

        :raises BadRequestRockError: it is not stopped, or its container is gone.
        :raises NotSupported: no archive store is configured, or the runtime cannot snapshot.
        """
        await self._get_driver().archive(self._require_id("archive"))

    async def pause(self) -> SandboxStatusResponse:
        """(rock) Freeze the running sandbox: its processes stop (no CPU), its memory and
        processes are kept. Its state stays ``running``; its status says ``paused``. Calls into
        it (commands, files, sessions) are refused until :meth:`resume`; the idle timer does not
        count the paused time (unless the engine's ``idle_counts_paused``). Pausing a paused
        sandbox does nothing. Returns its status.

        :raises BadRequestRockError: it is not running (the message names its state).
        :raises NotSupported: the runtime cannot pause (Nomad: capability ``pause``).
        """
        return await self._get_driver().pause(self._require_id("pause"))

    async def update_egress(
        self, egress: EgressPolicy | Mapping[str, Any] | None
    ) -> SandboxStatusResponse:
        """(rock) Replace the running sandbox's egress policy (``None``: none): in force on the
        host before this returns (e.g. open the network for set-up, then close it for the
        episode). Connections already open stay open. Returns its status (``egress``).

        :raises InvalidConfig: the policy is malformed (naming the part).
        :raises NotSupported: the runtime cannot enforce one (capability ``egress``).
        """
        from rock.sdk.sandbox.config import _egress

        policy = _egress(egress)
        wire = policy.to_dict() if policy is not None else None
        return await self._get_driver().update_egress(self._require_id("update_egress"), wire)

    async def resume(self) -> SandboxStatusResponse:
        """(rock) Thaw a paused sandbox: its processes go on where they were (same pids, same
        memory). Resuming a sandbox that is not paused does nothing. Returns its status.

        :raises BadRequestRockError: it is not running (the message names its state).
        """
        return await self._get_driver().resume(self._require_id("resume"))

    async def restart(self) -> None:
        """Start a stopped sandbox again, in its own container: files kept, sessions gone. An
        archived sandbox is restored from its archive (files kept, a new container).

        Waits until it runs, as :meth:`start` does. A failed restore leaves the sandbox
        ``archived`` with the reason (and raises it); nothing is lost.

        :raises BadRequestRockError: it is not stopped or archived, or its container is gone (the
            default lifecycle deletes a sandbox when it stops; set ``auto_delete_seconds`` to keep it).
        :raises InternalServerRockError: the restart or restore failed (the phase and its message).
        """
        sandbox_id = self._require_id("restart")
        started = await self._get_driver().restart(sandbox_id)
        self._host_name = started.host_name or self._host_name
        self._host_ip = started.host_ip or self._host_ip
        await self._wait_running("restart")

    async def get_status(self, include_all_states: bool = False) -> SandboxStatusResponse:
        """The sandbox's status: state, phases, port mapping, resources, times, history.

        :raises SandboxNotFound: unknown, or (without ``include_all_states``, as ROCK) not
            pending or running — the message says its state and why it stopped.
        """
        return await self._get_driver().get_status(
            self._require_id("get_status"), include_all_states
        )

    async def is_alive(self) -> IsAliveResponse:
        """Whether the sandbox runs: ``IsAliveResponse(is_alive, message=host_name)``.

        A sandbox that stopped (or was deleted) answers ``is_alive=False`` with the reason in
        ``message`` (ROCK raises instead); a paused one ``is_alive=False``, "... is paused".

        :raises BadRequestRockError: this handle has no sandbox yet.
        """
        sandbox_id = self._require_id("is_alive")
        status = await self._get_driver().get_status(sandbox_id, True)
        if status.paused:
            return IsAliveResponse(is_alive=False, message=f"sandbox {sandbox_id} is paused")
        if status.state in LIVE_STATES:
            return IsAliveResponse(is_alive=bool(status.is_alive), message=status.host_name or "")
        state = status.state.value if status.state is not None else "unknown"
        reason = f": {status.reason}" if status.reason else ""
        return IsAliveResponse(is_alive=False, message=f"sandbox {sandbox_id} is {state}{reason}")

    async def attach(self, sandbox_id: str) -> None:
        """Make this handle refer to the existing sandbox ``sandbox_id`` (in any state).

        Copies the sandbox's id, image, cpus, memory, user, experiment and namespace into
        :attr:`config`. In embedded mode only sandboxes of this process's engine can be attached.

        :raises SandboxNotFound: no such sandbox.
        """
        status = await self._get_driver().get_status(sandbox_id, True)
        if status.sandbox_id != sandbox_id:
            raise InternalServerRockError(
                f"asked to attach to {sandbox_id!r} but the engine answered for {status.sandbox_id!r}",
                sandbox_id=sandbox_id,
                attempted="attach",
            )
        self._sandbox_id = sandbox_id
        self._host_name = status.host_name
        self._host_ip = status.host_ip
        cfg = self.config
        cfg.sandbox_id = sandbox_id
        if status.image:
            cfg.image = status.image
        if status.cpus is not None:
            cfg.cpus = status.cpus
        if status.memory:
            cfg.memory = status.memory
        cfg.user_id = status.user_id
        cfg.experiment_id = status.experiment_id
        cfg.namespace = status.namespace

    async def close(self) -> None:
        """ROCK's ``close()``: the same as :meth:`stop`."""
        await self.stop()
