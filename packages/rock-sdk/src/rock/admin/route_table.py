"""The admin's route table: ROCK's lifecycle routes, written here, and a route for every
operation of :mod:`rock_core.operations` (:func:`rock.admin.operations.operation_routes`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from rock.admin import lifecycle, pausing, start_waits
from rock.admin.commits import commit_routes
from rock.admin.egress import egress_routes
from rock.admin.models import GetStatusQuery, ListSandboxesQuery, SandboxIdQuery
from rock.admin.operations import operation_routes
from rock.admin.routing import PREFIX, Handler, Route
from rock.admin.snapshots import snapshot_routes
from rock_core.actions import (
    BatchSandboxStatusRequest,
    BatchSandboxStatusResponse,
    IsAliveResponse,
    SandboxIdRequest,
    SandboxListResponse,
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    StartBatchRequest,
    StartBatchResponse,
    WaitAnyRequest,
    WaitAnyResponse,
    WarmPoolsResponse,
    WarmupRequest,
)

if TYPE_CHECKING:
    from rock.admin.app import AdminApp

__all__ = ["build_routes"]


def build_routes(app: AdminApp) -> list[Route]:
    """The admin's route table: the lifecycle's routes, then one for each operation."""
    p = PREFIX

    def bound(handler: Callable[..., Awaitable[Any]]) -> Handler:
        return partial(handler, app)  # a route module's handler, given this app

    return [
        Route(
            method="POST",
            path=f"{p}/start",
            name="start",
            leader=True,
            handler=bound(lifecycle.start),
            body=SandboxStartRequest,
            result=SandboxStartResponse,
            failure="start sandbox failed",
            summary="Start a sandbox and wait until it runs.",
            description="Identity headers X-User-Id, X-Experiment-Id, X-Namespace, X-Cluster are recorded.",
        ),
        Route(
            method="POST",
            path=f"{p}/start_async",
            name="start_async",
            leader=True,
            handler=bound(lifecycle.start_async),
            body=SandboxStartRequest,
            result=SandboxStartResponse,
            failure="start sandbox failed",
            summary="Accept a start and return at once; poll get_status.",
            description="Identity headers X-User-Id, X-Experiment-Id, X-Namespace, X-Cluster are recorded.",
        ),
        Route(
            method="GET",
            path=f"{p}/get_status",
            name="get_status",
            activity=False,
            handler=bound(lifecycle.get_status),
            query=GetStatusQuery,
            result=SandboxStatusResponse,
            failure="get sandbox status failed",
            summary="A sandbox's state and phases; stopped ones only with include_all_states.",
        ),
        Route(
            method="GET",
            path=f"{p}/is_alive",
            name="is_alive",
            activity=False,
            handler=bound(lifecycle.is_alive),
            query=SandboxIdQuery,
            result=IsAliveResponse,
            failure="check sandbox alive failed",
            summary="Whether the sandbox's agent answers (any failure: false).",
        ),
        Route(
            method="GET",
            path=f"{p}/sandboxes/{{sandbox_id}}/statistics",
            name="statistics",
            activity=False,
            handler=bound(lifecycle.statistics),
            query=SandboxIdQuery,
            result=dict,
            failure="get sandbox statistics failed",
            summary="The sandbox's resource use as the engine last sampled it (no call into the sandbox).",
            description="ROCK's get_statistics figures cpu and mem (percent), disk (percent of its limit), net "
            "(bytes received plus sent), and usage (every figure, sampled_at) and warnings.",
        ),
        Route(
            method="POST",
            path=f"{p}/stop",
            name="stop",
            leader=True,
            handler=bound(lifecycle.stop),
            body=SandboxIdRequest,
            result=str,
            failure="stop sandbox failed",
            summary="Stop a sandbox (unknown or stopped: no error).",
        ),
        Route(
            method="POST",
            path=f"{p}/delete",
            name="delete",
            leader=True,
            handler=bound(lifecycle.delete),
            body=SandboxIdRequest,
            result=str,
            failure="delete sandbox failed",
            summary="Delete a stopped sandbox (unknown: no error).",
        ),
        Route(
            method="POST",
            path=f"{p}/restart",
            name="restart",
            leader=True,
            handler=bound(lifecycle.restart),
            body=SandboxIdRequest,
            result=SandboxStartResponse,
            failure="restart sandbox failed",
            summary="Start a stopped sandbox again in its own container (restore an archived one).",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/{{sandbox_id}}/restart",
            name="restart_by_path",
            leader=True,
            handler=bound(lifecycle.restart),
            body=SandboxIdRequest,
            result=SandboxStartResponse,
            failure="restart sandbox failed",
            summary="ROCK's alias of /restart, the sandbox named in the path.",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/{{sandbox_id}}/archive",
            name="archive",
            leader=True,
            handler=bound(lifecycle.archive),
            body=SandboxIdRequest,
            result=str,
            failure="archive sandbox failed",
            summary="Archive a stopped sandbox into the archive store (in the background); restart restores it.",
            description="Returns at once; get_status(include_all_states=true) shows archiving, then archived "
            "(phases image_archive, log_archive), or stopped with the reason.",
        ),
        Route(
            method="POST",
            path=f"{p}/pause",
            name="pause",
            leader=True,
            handler=bound(pausing.pause),
            body=SandboxIdRequest,
            result=SandboxStatusResponse,
            failure="pause sandbox failed",
            summary="(rock) Freeze a running sandbox: no CPU, memory and processes kept.",
            description="Its state stays running; its status says paused (and paused_time). Calls "
            "into it are refused until /resume. A sandbox not running is refused, naming its state.",
        ),
        Route(
            method="POST",
            path=f"{p}/resume",
            name="resume",
            leader=True,
            handler=bound(pausing.resume),
            body=SandboxIdRequest,
            result=SandboxStatusResponse,
            failure="resume sandbox failed",
            summary="(rock) Thaw a paused sandbox: its processes go on where they were.",
        ),
        Route(
            method="POST",
            path=f"{p}/warmup/tasks",
            name="warmup",
            leader=True,
            handler=bound(lifecycle.warmup),
            body=WarmupRequest,
            result=None,
            failure="warmup failed",
            summary="Pull an image ahead of the starts that need it (in the background).",
            description="rock addition: with size > 0 the engine keeps that many sandboxes of the kind the "
            "other start-request fields describe started in a warm pool (0 removes the pool).",
        ),
        Route(
            method="GET",
            path=f"{p}/warm_pools",
            name="warm_pools",
            leader=True,
            handler=bound(lifecycle.warm_pools),
            result=WarmPoolsResponse,
            failure="list warm pools failed",
            summary="(rock) The warm pools: target size, members ready and starting, claims, failures.",
        ),
        Route(
            method="GET",
            path=f"{p}/sandboxes",
            name="list_sandboxes",
            handler=bound(lifecycle.list_sandboxes),
            query=ListSandboxesQuery,
            result=SandboxListResponse,
            failure="list sandboxes failed",
            summary="A page of pending and running sandboxes, with exact-match filters (page_size at most 2000).",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/batch",
            name="batch_status",
            handler=bound(lifecycle.batch_status),
            body=BatchSandboxStatusRequest,
            result=BatchSandboxStatusResponse,
            failure="batch get status failed",
            summary="Statuses of the pending and running sandboxes among the ids asked (at most 2000).",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/wait_any",
            name="wait_any",
            activity=False,
            handler=bound(start_waits.wait_any),
            body=WaitAnyRequest,
            result=WaitAnyResponse,
            failure="wait for sandboxes failed",
            summary="(rock) Held until the start of any of the sandboxes asked settles (at most "
            "wait seconds, 30 at most); the statuses of those settled.",
        ),
        Route(
            method="POST",
            path=f"{p}/sandboxes/start_batch",
            name="start_batch",
            leader=True,
            handler=bound(lifecycle.start_batch),
            body=StartBatchRequest,
            result=StartBatchResponse,
            failure="start sandboxes failed",
            summary="(rock) Accept many starts at once, each as /start_async would (at most "
            "batch_max_count); one outcome per item, in order: its sandbox or its error.",
            description="Each item carries what /start_async reads from its headers: user_id, "
            "experiment_id, namespace, cluster, idempotency_key.",
        ),
        *snapshot_routes(bound),
        *commit_routes(bound),
        *egress_routes(bound),
        *operation_routes(app),
    ]
