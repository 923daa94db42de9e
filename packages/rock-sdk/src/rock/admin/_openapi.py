"""The admin's OpenAPI 3.1 document, generated from its route table and the attrs models.

Every route of the table appears, with its request body or query parameters and the ``result``
model inside ROCK's envelope, so the document cannot drift from what the server serves.
"""

from __future__ import annotations

import datetime
import enum
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

import attrs

__all__ = ["openapi_document", "schema_of"]

_SCALARS: Mapping[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    datetime.datetime: {"type": "string", "format": "date-time"},
    type(None): {"type": "null"},
}


class _Schemas:
    """Collects ``components.schemas`` while turning types into JSON schemas."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def of(self, t: Any) -> dict[str, Any]:
        if t is Any or t is typing.Any:
            return {}
        if t in _SCALARS:
            return dict(_SCALARS[t])
        supertype = getattr(t, "__supertype__", None)
        if supertype is not None:  # a constrained NewType: its base type
            return self.of(supertype)
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return {"enum": [m.value for m in t]}
        if attrs.has(t):
            name = t.__name__
            if name not in self.components:
                self.components[name] = {}  # placeholder first: models may refer to themselves
                self.components[name] = self._object(t)
            return {"$ref": f"#/components/schemas/{name}"}
        origin = get_origin(t)
        args = get_args(t)
        if origin is Literal:
            return {"enum": list(args)}
        if origin is Union or origin is types.UnionType:
            return {"anyOf": [self.of(a) for a in args]}
        if origin in (list, tuple, set, frozenset) or t in (list, tuple):
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin in (dict, Mapping) or t is dict:
            return {
                "type": "object",
                "additionalProperties": self.of(args[1]) if len(args) == 2 else {},
            }
        return {}

    def _object(self, cls: type) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            schema = self.of(hints.get(field.name, Any))
            if field.default is attrs.NOTHING:
                required.append(field.name)
            else:
                default = field.default
                if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                    default = default.factory() if not default.takes_self else None
                if isinstance(default, enum.Enum):
                    default = default.value
                if isinstance(default, (str, int, float, bool, list, dict, type(None))):
                    schema = {**schema, "default": default}
            properties[field.name] = schema
        out: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if cls.__doc__:
            out["description"] = " ".join(cls.__doc__.split())
        if required:
            out["required"] = required
        return out


def schema_of(t: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(schema, components)`` for type ``t``."""
    schemas = _Schemas()
    return schemas.of(t), schemas.components


def _envelope(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "status": {"enum": ["Success", "Failed"]},
            "message": {"type": ["string", "null"]},
            "error": {"type": ["string", "null"]},
            "result": {
                "anyOf": [
                    result,
                    {"$ref": "#/components/schemas/SandboxResponse"},
                    {"type": "null"},
                ]
            },
        },
        "required": ["status", "message", "error", "result"],
    }


def openapi_document(routes: Iterable[Any], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (the admin's :class:`~rock.admin.app.Route` table)."""
    from rock_core.actions import SandboxResponse

    schemas = _Schemas()
    schemas.of(SandboxResponse)
    paths: dict[str, Any] = {}
    for route in routes:
        operation: dict[str, Any] = {"operationId": route.name, "summary": route.summary}
        if route.description:
            operation["description"] = route.description
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in route.path_params
        ]
        if route.query is not None:
            query_schema = schemas._object(route.query)
            required = set(query_schema.get("required", []))
            for name, schema in query_schema["properties"].items():
                parameters.append(
                    {"name": name, "in": "query", "required": name in required, "schema": schema}
                )
        if parameters:
            operation["parameters"] = parameters
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schemas.of(route.body)}},
            }
        elif route.form is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"multipart/form-data": {"schema": route.form}},
            }
        if route.kind == "envelope":
            result = schemas.of(route.result) if route.result is not None else {}
            content = {"application/json": {"schema": _envelope(result)}}
            description = "ROCK's envelope (HTTP 200 on success and on failure)"
        else:
            content = {
                route.media_type: {
                    "schema": schemas.of(route.result) if route.result is not None else {}
                }
            }
            description = route.kind_description
        operation["responses"] = {"200": {"description": description, "content": content}}
        if route.limited:
            operation["responses"]["413"] = {
                "description": "the request body is larger than the configured limit"
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas.components},
    }
