"""ROCK's JSON envelope, in which every admin route answers (at HTTP 200 unless said)::

    {"status": "Success", "message": null, "error": null, "result": <the route's model>}
    {"status": "Failed", "message": "stop sandbox failed", "error": "<what went wrong>",
     "result": {"code": 4000, "rock_code": 4004, "exit_code": null,
                "failure_reason": "<what went wrong>"}}

A typed rock error carries its code in ``result``: ``code`` is ROCK's (2000, 4000, 5000 or 6000:
the only values ROCK 1.11's SDK reads), ``rock_code`` rock's finer one (4004: not found), which
ROCK's SDK ignores and rock's reads. Any other exception leaves ``result`` null.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.responses import Response

from rock_core.converters import unstructure_wire
from rock_core.errors import InvalidParameter, RockError, wire_code

__all__ = [
    "JSON",
    "NDJSON",
    "BYTES",
    "json_response",
    "success",
    "success_plain",
    "failure",
    "BadInput",
]

#: The media types the admin answers with.
JSON = "application/json"
NDJSON = "application/x-ndjson"
BYTES = "application/octet-stream"


# The standard library's encoder, for what orjson refuses (json.dumps with separators makes one
# encoder per call).
_compact = json.JSONEncoder(separators=(",", ":")).encode
_ORJSON = orjson.OPT_NON_STR_KEYS


def json_response(data: Any, status_code: int = 200) -> Response:
    """``data`` as compact JSON: orjson's (UTF-8 where ``json`` escapes; a start batch's answer
    at a fraction of the standard library's cost), or the standard library's for what orjson
    refuses (an integer beyond 64 bits; a type neither knows raises the standard library's
    ``TypeError``)."""
    try:
        body = orjson.dumps(data, option=_ORJSON)
    except TypeError:  # orjson.JSONEncodeError
        body = _compact(data).encode()
    return Response(body, status_code=status_code, media_type=JSON)


def success(result: Any) -> Response:
    """ROCK's envelope of a successful call."""
    return json_response(
        {"status": "Success", "message": None, "error": None, "result": unstructure_wire(result)}
    )


def success_plain(result: dict[str, Any]) -> Response:
    """:func:`success` of a result already in its wire form (plain JSON values)."""
    return json_response({"status": "Success", "message": None, "error": None, "result": result})


def failure(message: str, exc: BaseException) -> Response:
    """ROCK's envelope of a failed call: typed errors carry their code in ``result``."""
    text = str(exc) or type(exc).__name__
    result = None
    if isinstance(exc, RockError):
        result = {
            "code": wire_code(exc.code),
            "rock_code": exc.code,
            "exit_code": getattr(exc, "exit_code", None),
            "failure_reason": text,
        }
    return json_response({"status": "Failed", "message": message, "error": text, "result": result})


class BadInput(Exception):
    """Wraps an :class:`InvalidParameter` raised while reading the request (not by the engine):
    answered ``Failed`` with ``message: "invalid parameter"``."""

    def __init__(self, error: InvalidParameter) -> None:
        super().__init__(str(error))
        self.error = error
