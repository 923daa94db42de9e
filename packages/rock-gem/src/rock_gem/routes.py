"""ROCK's GEM API on the admin: ``POST /apis/v1/envs/gem/{make,reset,step,close,list}``, and rock's ``batch``.

Answers are ROCK's raw JSON, no envelope (rock-spec §4.5):

======================  ============================================  =============================================
path                    body                                          answer
======================  ============================================  =============================================
``make``                ``{env_id, kwargs?, image?}``                 ``{sandbox_id}``
``reset``               ``{sandbox_id, seed?}``                       ``{observation, info}``
``step``                ``{sandbox_id, action}``                      ``{observation, reward, terminated, truncated, info}``
``close``               ``{sandbox_id}``                              ``{sandbox_id}``
``list``                ``{sandbox_id}``                              ``{env_id: [...], busy: [...]}`` (rock: ``busy``)
``sandboxes`` (rock)    ``{}``                                        ``{sandboxes: [{sandbox_id, image, slots, waiting, ready}]}``
``batch`` (rock)        ``{calls: [{op, ...the op's body}]}``         ``{results: [answer | {error: {kind, detail}}]}``
======================  ============================================  =============================================

``sandboxes`` lists the caller's env sandboxes, started or starting (``sandbox_id`` null until
the engine has given it): ``slots`` (envs placed or being placed), ``waiting`` (makes waiting
for its start, beside the one starting it), ``ready`` (started and serving makes).

``busy`` (rock's, beside ROCK's ``env_id``) names the envs of the listed env's sandbox (their
``sandbox_id``) whose process is serving a reset or step right now.

In a ``batch``, resets and steps go to each sandbox in one request (several for one env run in
their order), while makes and closes run beside them: a batch should not both close and step
one env.

``sandbox_id`` is the env's handle (``<sandbox>.<env>``): several envs share a sandbox here,
where ROCK starts one sandbox per env. Unknown body keys are ignored (ROCK's own test sends
``session``).

Errors, as ROCK answers them: a body field of the wrong shape (a blank ``sandbox_id``, a
``seed`` that is not an integer, an ``action`` that is not a string) is HTTP 200 with ROCK's
``Failed`` envelope, ``{"status": "Failed", "message": "invalid parameter", "error":
"body.sandbox_id: ...", "result": null}``; anything else (an unknown env id or handle, a missing
dependency, a step after the episode ended, a dead env) is HTTP 500 ``{"detail", "traceback",
"kind"}`` (``kind``: see :data:`rock_core.envs.ENV_FAILURE_KINDS`). ``make`` reads its body as
ROCK does, a free object: a missing ``env_id`` is HTTP 500.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from rock_core.envs import EnvFailed
from rock_core.errors import RockError
from rock_core.routes import AdminRoute, RouteRequest, RouteResponse
from rock_gem.provider import GemEnv, GemProvider, provider_for

__all__ = ["PREFIX", "routes"]

PREFIX = "/apis/v1/envs/gem"
_MAX_SEED = 2**32 - 1


class _Invalid(Exception):
    """Validation errors of a body: ``["body.sandbox_id: ...", ...]``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _invalid(errors: list[str]) -> RouteResponse:
    return RouteResponse(
        {
            "status": "Failed",
            "message": "invalid parameter",
            "error": "; ".join(errors),
            "result": None,
        }
    )


def _failed(exc: BaseException) -> RouteResponse:
    detail = exc.message if isinstance(exc, RockError) else f"{type(exc).__name__}: {exc}"
    lines = list(getattr(exc, "traceback", None) or []) or traceback.format_exception_only(
        type(exc), exc
    )
    kind = getattr(exc, "kind", None) or (
        "invalid_parameter" if isinstance(exc, RockError) and exc.code // 1000 == 4 else "error"
    )
    return RouteResponse({"detail": detail, "traceback": lines, "kind": kind}, status=500)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _handle(body: dict[str, Any], where: str = "body") -> str:
    value = body.get("sandbox_id")
    if value is None:
        raise _Invalid([f"{where}.sandbox_id: Field required"])
    if not isinstance(value, str) or not value.strip():
        raise _Invalid([f"{where}.sandbox_id: must be a non-blank string, got {_shown(value)}"])
    return value.strip()


def _seed(body: dict[str, Any], where: str = "body") -> int | None:
    value = body.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SEED:
        raise _Invalid(
            [f"{where}.seed: must be an integer from 0 to {_MAX_SEED} or null, got {_shown(value)}"]
        )
    return value


def _action(body: dict[str, Any], where: str = "body") -> str:
    value = body.get("action")
    if not isinstance(value, str):
        raise _Invalid(
            [f"{where}.action: must be a string, got {_shown(value)}"]
            if "action" in body
            else [f"{where}.action: Field required"]
        )
    return value


def _object(request: RouteRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body) if request.body.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Invalid([f"body: malformed JSON: {exc}"]) from None
    if not isinstance(body, dict):
        raise _Invalid([f"body: must be an object, got {_shown(body)}"])
    return body


def _provider(request: RouteRequest) -> GemProvider | None:
    return provider_for(request.engine)


def _env(request: RouteRequest, handle: str) -> GemEnv:
    provider = _provider(request)
    if provider is None:
        raise EnvFailed(
            f"sandbox_id {handle!r}: no GEM env (no env was made with this id)", kind="no_env"
        )
    return provider.get(
        handle, tenant=request.tenant
    )  # another API key's env: as if it did not exist


# -- one call each -------------------------------------------------------------------------------


async def _make(request: RouteRequest, body: dict[str, Any]) -> Any:
    env_id = body.get("env_id")
    if env_id is None:
        raise EnvFailed("env_id is required", kind="bad_request")
    if not isinstance(env_id, str):
        raise EnvFailed(f"env_id must be a string, got {_shown(env_id)}", kind="bad_request")
    kwargs = body.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise EnvFailed(f"kwargs must be an object, got {_shown(kwargs)}", kind="bad_request")
    image = body.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        raise EnvFailed(
            f"image must be a non-blank string, got {_shown(image)}", kind="bad_request"
        )
    for reserved in ("tenant", "quota", "admit"):
        if reserved in kwargs:
            raise EnvFailed(
                f"kwargs.{reserved} is not a constructor argument: the API key says it",
                kind="bad_request",
            )
    # The API key's tenant: its EnvHub entries name the env, its own sandboxes host it (within
    # its quota, admitted as the key's starts are), and only it may drive the env.
    env = await request.engine.make_env(
        env_id,
        **({"image": image} if image else {}),
        tenant=request.tenant,
        quota=request.quota,
        admit=request.admit,
        **kwargs,
    )
    return {"sandbox_id": env.handle}


async def _reset(request: RouteRequest, body: dict[str, Any]) -> Any:
    handle, seed = _handle(body), _seed(body)
    observation, info = await _env(request, handle).reset(seed)
    return {"observation": observation, "info": info}


async def _step(request: RouteRequest, body: dict[str, Any]) -> Any:
    handle, action = _handle(body), _action(body)
    observation, reward, terminated, truncated, info = await _env(request, handle).step(action)
    return {
        "observation": observation,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "info": info,
    }


async def _close(request: RouteRequest, body: dict[str, Any]) -> Any:
    handle = _handle(body)
    provider = _provider(request)
    if provider is not None and provider.is_closed(handle, tenant=request.tenant):
        return {"sandbox_id": handle}  # closing twice is fine
    await _env(request, handle).close()
    return {"sandbox_id": handle}


async def _list(request: RouteRequest, body: dict[str, Any]) -> Any:
    env = _env(request, _handle(body))
    return await env.provider.listing(env.handle, tenant=request.tenant)


async def _sandboxes(request: RouteRequest, body: dict[str, Any]) -> Any:
    provider = _provider(request)
    return {"sandboxes": [] if provider is None else provider.sandboxes(tenant=request.tenant)}


def _route(
    call: Callable[[RouteRequest, dict[str, Any]], Awaitable[Any]],
) -> Callable[[RouteRequest], Awaitable[Any]]:
    async def handler(request: RouteRequest) -> Any:
        try:
            return await call(request, _object(request))
        except _Invalid as exc:
            return _invalid(exc.errors)
        except Exception as exc:  # noqa: BLE001 - ROCK's rule: any other failure is HTTP 500 {detail}
            return _failed(exc)

    handler.__name__ = f"gem{call.__name__}"
    return handler


# -- batches (rock) ------------------------------------------------------------------------------

_OPS = ("make", "reset", "step", "close")


async def _batch(request: RouteRequest, body: dict[str, Any]) -> Any:
    calls = body.get("calls")
    if not isinstance(calls, list):
        raise _Invalid(
            [
                f"body.calls: must be a list, got {_shown(calls)}"
                if "calls" in body
                else "body.calls: Field required"
            ]
        )
    errors: list[str] = []
    parsed: list[tuple[str, dict[str, Any]]] = []
    for i, call in enumerate(calls):
        where = f"body.calls[{i}]"
        try:
            if not isinstance(call, dict):
                raise _Invalid([f"{where}: must be an object, got {_shown(call)}"])
            op = call.get("op")
            if op not in _OPS:
                raise _Invalid([f"{where}.op: must be one of {', '.join(_OPS)}, got {_shown(op)}"])
            if op == "reset":
                _handle(call, where), _seed(call, where)
            elif op == "step":
                _handle(call, where), _action(call, where)
            elif op == "close":
                _handle(call, where)
            parsed.append((op, call))
        except _Invalid as exc:
            errors.extend(exc.errors)
    if errors:
        raise _Invalid(errors)
    results: list[Any] = [None] * len(parsed)
    # Resets and steps go to the rocklets grouped by sandbox (one request each); makes and
    # closes run concurrently on their own.
    stepped: list[tuple[int, GemEnv, str, dict[str, Any]]] = []

    async def single(i: int, op: str, call: dict[str, Any]) -> None:
        try:
            results[i] = await (_make if op == "make" else _close)(request, call)
        except Exception as exc:  # noqa: BLE001 - reported in its place
            results[i] = _error_item(exc)

    async with anyio.create_task_group() as tg:
        for i, (op, call) in enumerate(parsed):
            if op in ("make", "close"):
                tg.start_soon(single, i, op, call)
                continue
            try:
                env = _env(request, call["sandbox_id"].strip())
            except Exception as exc:  # noqa: BLE001
                results[i] = _error_item(exc)
                continue
            args = {"seed": call.get("seed")} if op == "reset" else {"action": call["action"]}
            stepped.append((i, env, op, args))
        if stepped:
            provider = stepped[0][1].provider
            answers = await provider.batch([(env, op, args) for _, env, op, args in stepped])
            for (i, _, op, _), answer in zip(stepped, answers):
                results[i] = (
                    _error_item(answer) if isinstance(answer, BaseException) else _shape(op, answer)
                )
    return {"results": results}


def _shape(op: str, answer: dict[str, Any]) -> dict[str, Any]:
    if op == "reset":
        return {"observation": answer["observation"], "info": answer["info"]}
    return {k: answer[k] for k in ("observation", "reward", "terminated", "truncated", "info")}


def _error_item(exc: BaseException) -> dict[str, Any]:
    body = _failed(exc).body
    return {"error": {"kind": body["kind"], "detail": body["detail"]}}


def routes() -> list[AdminRoute]:
    """The admin routes of ROCK's GEM API (and rock's ``batch``)."""
    return [
        AdminRoute(
            "POST", f"{PREFIX}/make", _route(_make), summary="Make a GEM env in a sandbox (ROCK)"
        ),
        AdminRoute("POST", f"{PREFIX}/reset", _route(_reset), summary="Reset a GEM env (ROCK)"),
        AdminRoute("POST", f"{PREFIX}/step", _route(_step), summary="Step a GEM env (ROCK)"),
        AdminRoute("POST", f"{PREFIX}/close", _route(_close), summary="Close a GEM env (ROCK)"),
        AdminRoute(
            "POST", f"{PREFIX}/list", _route(_list), summary="The ids GEM registered (ROCK)"
        ),
        AdminRoute(
            "POST",
            f"{PREFIX}/sandboxes",
            _route(_sandboxes),
            summary="The caller's GEM env sandboxes, started or starting (rock)",
        ),
        AdminRoute(
            "POST",
            f"{PREFIX}/batch",
            _route(_batch),
            summary="Make, reset, step and close many GEM envs in one request (rock)",
        ),
    ]
