"""The admin's API fuzzed from its own OpenAPI document, over a socket to a real admin process.

For every operation the document lists, hypothesis draws requests: bodies and query strings from
the operation's JSON schemas (turned into strategies here: hypothesis-jsonschema 0.23 does not work
with this hypothesis, and the document uses a small subset of JSON Schema), mixed with what a careless client sends
(arbitrary JSON, malformed bytes, unknown parameters, odd identity headers). Whatever it sends,
the admin must never answer 5xx, and every ROCK route must answer ROCK's envelope
``{status, message, error, result}`` (a stream route may answer its documented stream instead;
413 only where the document lists it).

Starts are fuzzed without an ``image`` (so a drawn body can never start a real sandbox in bulk);
any container the admin made is removed at the end anyway (its ``rock.owner`` label).
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PREFIX = "/apis/envs/sandbox/v1"
GEM_PREFIX = "/apis/v1/envs/gem/"  # rock-gem's plugin routes, when installed
# Examples per operation (``ROCK_FUZZ_EXAMPLES`` for a longer hunt).
EXAMPLES = int(os.environ.get("ROCK_FUZZ_EXAMPLES", "30"))
# Routes whose valid bodies would start sandboxes or pull images: fuzzed without the required ``image``.
STARTING = {"start", "start_async", "warmup/tasks"}
ENVELOPE_KEYS = {"status", "message", "error", "result"}


@pytest.fixture(scope="module")
def admin_url(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[str]:
    """A ``rock admin serve`` of its own (small body limits so 413 can be reached), stopped at the end."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("fuzz-admin"),
        config='[admin]\nmax_json_body = "64k"\nmax_upload_body = "128k"\n',
    )
    try:
        yield server.url
    finally:
        stop_admin(server, docker_client)


# ---------------------------------------------------------------------------------------------
# Strategies drawn from the document


@functools.cache
def _json_values() -> st.SearchStrategy[Any]:
    """Any JSON value (what a careless client might send instead of the documented body)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
        ),
        max_leaves=10,
    )


def _with_components(
    schema: Any, document: dict[str, Any], seen: frozenset[str] = frozenset()
) -> Any:
    """``schema`` with its ``#/components/schemas/...`` references inlined (a model that refers
    to itself is cut short as ``{}``, any value)."""
    if isinstance(schema, list):
        return [_with_components(item, document, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        if name in seen:
            return {}
        return _with_components(document["components"]["schemas"][name], document, seen | {name})
    return {key: _with_components(value, document, seen) for key, value in schema.items()}


_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=24),
    "integer": st.integers(min_value=-(2**40), max_value=2**40),
    "number": st.floats(allow_nan=False, allow_infinity=False, width=32) | st.integers(-1000, 1000),
    "boolean": st.booleans(),
    "null": st.none(),
}


def from_schema(schema: Any) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (the JSON Schema subset the admin's document uses: ``type``
    (one or several), ``enum``, ``anyOf``, objects with ``properties``/``required``/
    ``additionalProperties``, arrays with ``items``; ``{}`` is any JSON value).

    Built once per schema (cached by its JSON text): the same strategy for every draw."""
    return _from_schema_text(json.dumps(schema))


@functools.cache
def _from_schema_text(text: str) -> st.SearchStrategy[Any]:
    schema = json.loads(text)
    if not isinstance(schema, dict) or not schema or set(schema) <= {"default", "description"}:
        return _json_values()
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(option) for option in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": one}) for one in kind])
    if kind == "string" and schema.get("format") == "date-time":
        return st.datetimes().map(lambda d: d.isoformat() + "Z")
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=4)
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        fixed = st.fixed_dictionaries(
            {name: from_schema(sub) for name, sub in properties.items() if name in required},
            optional={
                name: from_schema(sub) for name, sub in properties.items() if name not in required
            },
        )
        extra = schema.get("additionalProperties", True)
        if extra is False or not (extra is True or isinstance(extra, dict)):
            return fixed
        values = _json_values() if extra is True else from_schema(extra)
        more = st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=3)
        return st.tuples(more, fixed).map(lambda pair: {**pair[0], **pair[1]})
    if kind in _TYPES:
        return _TYPES[kind]
    return _json_values()


def _query_text(value: Any) -> str | None:
    """How a client would put ``value`` in a query string (``None``: leave it out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


# h11 (rightly) refuses to send a header value with whitespace at either end.
_HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=16
).map(str.strip)
# "." and ".." are dot segments: every HTTP client removes them from a path (RFC 3986), so no
# request can carry them as an id.
_PATH_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/"),
    min_size=1,
    max_size=20,
).filter(lambda text: text not in (".", ".."))


@st.composite
def _requests(
    draw: st.DrawFn, document: dict[str, Any], path: str, method: str, operation: dict[str, Any]
) -> dict[str, Any]:
    """One request for ``operation``: ``{"method", "url", "kwargs"}`` for httpx."""
    name = path[len(PREFIX) + 1 :] if path.startswith(PREFIX) else path
    url = path
    params: dict[str, str] = {}
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            url = url.replace(
                "{" + parameter["name"] + "}", urllib.parse.quote(draw(_PATH_TEXT), safe="")
            )
            continue
        if not parameter.get("required") and draw(st.booleans()):
            continue
        strategy = (
            from_schema(_with_components(parameter["schema"], document))
            if draw(st.integers(0, 3))
            else _json_values()
        )
        text = _query_text(draw(strategy))
        if text is not None:
            params[parameter["name"]] = text
    if draw(st.integers(0, 5)) == 0:
        params[draw(st.text(min_size=1, max_size=8))] = draw(st.text(max_size=8))
    headers = {}
    for header in ("X-User-Id", "X-Experiment-Id", "X-Namespace", "X-Cluster"):
        if draw(st.integers(0, 3)) == 0:
            headers[header] = draw(_HEADER_TEXT)
    kwargs: dict[str, Any] = {"params": params, "headers": headers}
    body = operation.get("requestBody", {}).get("content", {})
    if "application/json" in body:
        schema = _with_components(body["application/json"]["schema"], document)
        choice = draw(st.integers(0, 10))
        if choice < 6:
            value = draw(from_schema(schema))
            if name in STARTING and isinstance(value, dict):
                value.pop("image", None)
            kwargs["json"] = value
        elif choice < 9:
            value = draw(_json_values())
            if name in STARTING and isinstance(value, dict):
                value.pop("image", None)
            kwargs["json"] = value
        elif choice < 10:
            kwargs["content"] = draw(st.binary(max_size=64))
            headers["content-type"] = "application/json"
        else:  # over the admin's 64 KiB limit: 413 where the document says so
            kwargs["json"] = {"sandbox_id": "x", "padding": "a" * (70 * 1024)}
    elif "multipart/form-data" in body:
        schema = body["multipart/form-data"]["schema"]
        data: dict[str, str] = {}
        files: dict[str, Any] = {}
        for field, field_schema in schema.get("properties", {}).items():
            if draw(st.integers(0, 4)) == 0:
                continue
            if (
                field_schema.get("format") == "binary" or "contentMediaType" in field_schema
            ):  # a file part
                files[field] = (draw(_PATH_TEXT), draw(st.binary(max_size=256)))
            else:
                value = draw(from_schema(field_schema) if draw(st.booleans()) else _json_values())
                text = _query_text(value)
                if text is not None:
                    data[field] = text
        kwargs["data"] = data
        if files:
            kwargs["files"] = files
    return {"method": method.upper(), "url": url, "kwargs": kwargs}


class _Document(dict):  # type: ignore[type-arg]
    """The OpenAPI document with a short repr (hypothesis shows its strategies' arguments)."""

    def __repr__(self) -> str:
        return "<the admin's openapi.json>"


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, methods in sorted(document["paths"].items())
        for method, operation in sorted(methods.items())
    ]


def _check(
    response: httpx.Response, path: str, operation: dict[str, Any], request: dict[str, Any]
) -> None:
    """The admin's answer to a fuzzed ``request``: never 5xx; a ROCK route answers its envelope."""
    shown = f"{request['method']} {request['url']} {request['kwargs']!r}"
    answer = f"HTTP {response.status_code} {response.headers.get('content-type')}: {response.text[:300]!r}"
    if path.startswith(GEM_PREFIX) and response.status_code == 500:
        # ROCK's GEM API answers a runtime error (an unknown env id, a missing env_id in make)
        # with HTTP 500 {"detail", "traceback"} (rock-spec 4.5); never an unexplained one.
        assert response.json().get("detail"), f"{shown}\n  -> {answer}"
        return
    assert response.status_code < 500, f"{shown}\n  -> {answer}"
    if not path.startswith(PREFIX):
        return
    documented = set(operation["responses"]) | {"401"}
    assert str(response.status_code) in documented, f"undocumented status\n{shown}\n  -> {answer}"
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        envelope = response.json()
        assert isinstance(envelope, dict) and set(envelope) == ENVELOPE_KEYS, (
            f"not ROCK's envelope\n{shown}\n  -> {answer}"
        )
        assert envelope["status"] in ("Success", "Failed"), f"{shown}\n  -> {answer}"
        if envelope["status"] == "Failed":
            assert envelope["error"], f"a failure that does not say why\n{shown}\n  -> {answer}"
    else:
        streamed = {
            media
            for media in operation["responses"]["200"]["content"]
            if media != "application/json"
        }
        assert response.status_code == 200 and any(content_type.startswith(m) for m in streamed), (
            f"neither ROCK's envelope nor the documented stream\n{shown}\n  -> {answer}"
        )


def _fuzzer(
    http: httpx.Client, document: dict[str, Any], path: str, method: str, operation: dict[str, Any]
) -> Any:
    """A hypothesis test sending ``EXAMPLES`` drawn requests for one operation."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(request=_requests(document, path, method, operation))
    def fuzz(request: dict[str, Any]) -> None:
        response = http.request(request["method"], request["url"], **request["kwargs"])
        _check(response, path, operation, request)

    return fuzz


def test_every_operation_fuzzed_from_the_openapi_document(admin_url: str) -> None:
    with httpx.Client(base_url=admin_url, timeout=30) as http:
        document = _Document(http.get("/openapi.json").json())
        operations = _operations(document)
        assert len([op for op in operations if op[0].startswith(PREFIX)]) >= 20
        failures: list[str] = []

        def fuzz(path: str, method: str, operation: dict[str, Any]) -> None:
            try:
                _fuzzer(http, document, path, method, operation)()
            except AssertionError as exc:
                failures.append(f"{method.upper()} {path}: {exc}")

        # Two operations at a time (hypothesis is thread-safe since 6.136): one thread draws
        # requests while the admin answers the other's, so both cores work.
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for done in [pool.submit(fuzz, *op) for op in operations]:
                done.result()
        # Nothing was started by the fuzzing: a start without an image never creates a sandbox.
        listed = http.get(f"{PREFIX}/sandboxes").json()
        assert listed["status"] == "Success" and listed["result"]["total"] == 0, listed
    assert not failures, "\n\n".join(failures)
