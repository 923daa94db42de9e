"""One route of the admin's own API: :class:`Route` (how its input is read, what it answers,
whether it counts as activity, and its documentation). The table is :mod:`rock.admin.route_table`."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from starlette.requests import Request

from rock.admin.envelope import BYTES, JSON, NDJSON

__all__ = ["Handler", "PREFIX", "Route"]

#: Where ROCK's sandbox routes live.
PREFIX = "/apis/envs/sandbox/v1"

_PATH_PARAM = re.compile(r"{(\w+)}")

Handler = Callable[[Request, Any], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class Route:
    """One route of the admin: how its input is read, what it answers, and its documentation.

    :param body: the attrs model of the JSON body (``None``: no body).
    :param query: the attrs model of the query string (``None``: no query parameters).
    :param form: the JSON schema of a multipart body (``/upload``).
    :param result: the model in the envelope's ``result`` (or of the raw answer).
    :param kind: ``envelope`` (ROCK's JSON envelope), ``ndjson`` or ``bytes`` (streams).
    :param failure: the envelope's ``message`` when the engine fails (ROCK's wording).
    :param leader: only a cluster's leader makes it (it changes the cluster's sandboxes): an
        admin that does not lead sends it on to the leader (:mod:`rock.admin.leader_forward`).
    :param activity: whether a call counts as activity of the sandbox it names (its idle timer
        restarts, and it is never idle-stopped while the call runs). Reads (status, liveness,
        statistics, listings) do not: a dashboard or a trainer's waits must not keep an idle
        sandbox alive.
    """

    method: str
    path: str
    name: str
    handler: Handler
    summary: str
    description: str = ""
    body: Any = None
    query: Any = None
    form: dict[str, Any] | None = None
    result: Any = None
    kind: str = "envelope"
    failure: str = ""
    activity: bool = True
    leader: bool = False

    @property
    def path_params(self) -> list[str]:
        """Names of the ``{...}`` parts of the path."""
        return _PATH_PARAM.findall(self.path)

    @property
    def limited(self) -> bool:
        """Whether the route reads a body (and so can answer 413)."""
        return self.body is not None or self.form is not None

    @property
    def media_type(self) -> str:
        """The ``Content-Type`` of a successful answer."""
        return {"envelope": JSON, "ndjson": NDJSON, "bytes": BYTES}[self.kind]

    @property
    def kind_description(self) -> str:
        """What a successful answer is, in words (for the OpenAPI document)."""
        return {
            "envelope": "ROCK's envelope",
            "ndjson": "NDJSON events; a failure before the first event is ROCK's JSON envelope",
            "bytes": "the raw bytes; a failure is ROCK's JSON envelope",
        }[self.kind]
