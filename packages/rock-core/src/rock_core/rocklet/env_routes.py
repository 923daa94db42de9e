"""The rocklet's ``/env/*`` routes: each reads its body, checks it, and calls the
:class:`~.envs.EnvChannel` (imported on the first call: most sandboxes run no env).

Routes (answers are bare JSON; failures are HTTP 511 ``EnvError`` with ``extra_info.kind``):

``POST /env/make {env_id, kwargs?, pythonpath?, share?, timeout?}`` → ``{env, env_id, pid}``
    ``env`` is the handle of the new env in this sandbox (``e1``, ``e2``, ...). ``pythonpath``
    (default ``$ROCK_ENV_PYTHONPATH``) is where GEM is looked for first; one worker serves each.
    ``share`` (default 0: a process of its own) puts the env in one of that many processes shared
    by the envs made so, each env's generator states kept apart (see :mod:`.envs`).
``POST /env/reset {env, seed?, timeout?}`` → ``{observation, info}``
``POST /env/step {env, action, timeout?}`` → ``{observation, reward, terminated, truncated, info}``
    After the episode ended (terminated or truncated), a step fails with kind
    ``episode_ended`` until the next reset.
``POST /env/close {env}`` → ``{env, closed}``: ends the env's process; closing twice is fine.
``POST /env/list {env?, pythonpath?}`` → ``{env_id: [...], busy?: [...]}``: the ids GEM has
    registered; asked of an ``env``, also ``busy``: the envs of this sandbox whose process has a
    request sent and not yet answered.
``GET /env`` → ``{envs: [{env, env_id, pid, busy, shared}], workers: [...]}``
``POST /env/batch {calls: [{env, op: "reset"|"step", seed?, action?}], timeout?}`` →
    ``{results: [{ok: ...} | {error: {kind, message}}]}``: the calls of one batch run
    concurrently across processes, one message to each (the calls to one process, and several
    calls to one env, run in their order).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

from .envs import DEFAULT_TIMEOUT
from .errors import BadRequest
from .http_messages import Response

__all__ = ["make", "reset", "step", "close", "list_ids", "batch", "describe"]


def _timeout(body: dict[str, Any]) -> float | None:
    value = body.get("timeout", DEFAULT_TIMEOUT)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise BadRequest(
            "field 'timeout' must be a positive number or null, got %s" % json.dumps(value)
        )
    return float(value)


def _pythonpath(body: dict[str, Any]) -> str | None:
    value = body.get("pythonpath")
    if value is not None and not isinstance(value, str):
        raise BadRequest("field 'pythonpath' must be a string, got %s" % json.dumps(value))
    return value


def _key(body: dict[str, Any]) -> str:
    key = body.get("env")
    if not isinstance(key, str) or not key:
        raise BadRequest("field 'env' must be a non-empty string, got %s" % json.dumps(key))
    return key


def make(rocklet: Any, req: Any) -> Any:
    """``POST /env/make``."""
    body = req.json()
    env_id = body.get("env_id")
    if not isinstance(env_id, str) or not env_id.strip():
        raise BadRequest("field 'env_id' must be a non-empty string, got %s" % json.dumps(env_id))
    kwargs = body.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise BadRequest("field 'kwargs' must be an object, got %s" % json.dumps(kwargs))
    share = body.get("share", 0)
    if isinstance(share, bool) or not isinstance(share, int) or share < 0:
        raise BadRequest("field 'share' must be a non-negative integer, got %s" % json.dumps(share))
    return rocklet.envs.make(env_id, kwargs, _timeout(body), _pythonpath(body), share)


def reset(rocklet: Any, req: Any) -> Any:
    """``POST /env/reset``."""
    body = req.json()
    return rocklet.envs.call(_key(body), {"op": "reset", "seed": body.get("seed")}, _timeout(body))


def step(rocklet: Any, req: Any) -> Any:
    """``POST /env/step``."""
    body = req.json()
    return rocklet.envs.call(
        _key(body), {"op": "step", "action": body.get("action")}, _timeout(body)
    )


def close(rocklet: Any, req: Any) -> Any:
    """``POST /env/close``."""
    return rocklet.envs.close(_key(req.json()))


def list_ids(rocklet: Any, req: Any) -> Any:
    """``POST /env/list``."""
    body = req.json()
    key = body.get("env")
    return rocklet.envs.list_ids(
        None if key is None else _key(body), _timeout(body), _pythonpath(body)
    )


def batch(rocklet: Any, req: Any) -> Any:
    """``POST /env/batch``."""
    body = req.json()
    calls = body.get("calls")
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise BadRequest("field 'calls' must be a list of objects")
    results = rocklet.envs.batch(calls, _timeout(body))  # each result JSON text already
    return Response(b'{"results":[' + b",".join(results) + b"]}")


def describe(rocklet: Any, req: Any) -> Any:
    """``GET /env``."""
    return rocklet.envs.describe()
