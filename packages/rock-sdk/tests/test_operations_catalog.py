"""Every surface has every operation of the catalog (rock_core.operations), with its fields.

The catalog is the one declaration of each operation; the admin's routes and both SDK drivers
are built from it for the operations of kind ``call``, and the hand-written surfaces (ROCK's
``Sandbox`` signatures, the rocklet's route table, the streams) are checked against it here.
Behaviour through each surface is tested where each operation is (test_sdk_*.py run embedded
and, with ROCK_TEST_REMOTE=1, against a real admin).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import attrs
import pytest
from starlette.routing import Route as StarletteRoute

from rock.admin._openapi import openapi_document
from rock.admin.app import create_app
from rock.admin.config import AdminSettings
from rock.admin.routing import PREFIX
from rock.sdk._drivers.base import Driver
from rock.sdk._drivers.embedded import EmbeddedDriver
from rock.sdk._drivers.remote import RemoteDriver
from rock.sdk.sandbox.client import Sandbox
from rock_core.operations import KINDS, OPERATIONS, operation
from rock_core.rocklet.api import Rocklet, build_router
from rock_core.rocklet.errors import BadRequest

OPS = {op.name: op for op in OPERATIONS}
GENERIC = [name for name, op in OPS.items() if op.generic]


def _filled(path: str) -> str:
    """``path`` with each ``{param}`` filled in."""
    return "/".join("p1" if part.startswith("{") else part for part in path.split("/"))


@pytest.fixture(scope="module")
def admin() -> Any:
    return create_app(AdminSettings())


@pytest.fixture(scope="module")
def rocklet_router(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_router(Rocklet(str(tmp_path_factory.mktemp("rocklet"))))


def test_the_catalog_names_each_operation_once_and_the_generic_ones_exist() -> None:
    assert len(OPS) == len(OPERATIONS)
    assert {"execute", "create_session", "run_in_session", "close_session"} <= set(GENERIC)
    assert {"read_file", "write_file", "list_dir", "interrupt_session"} <= set(GENERIC)
    assert all(op.kind in KINDS for op in OPERATIONS)
    assert operation("execute") is OPS["execute"]


@pytest.mark.parametrize("name", list(OPS))
def test_the_rocklet_serves_its_route(name: str, rocklet_router: Any) -> None:
    op = OPS[name]
    route, _params = rocklet_router.resolve(op.rocklet_method, _filled(op.rocklet_path))
    assert route.method == op.rocklet_method


def test_the_rocklet_still_answers_404_and_405_for_routes_it_does_not_serve(
    rocklet_router: Any,
) -> None:
    with pytest.raises(BadRequest) as missing:
        rocklet_router.resolve("POST", "/no_such_operation")
    assert missing.value.status == 404
    with pytest.raises(BadRequest) as wrong_method:
        rocklet_router.resolve("GET", "/read_file")
    assert wrong_method.value.status == 405


@pytest.mark.parametrize("name", list(OPS))
def test_the_admin_serves_its_route_and_documents_it(name: str, admin: Any) -> None:
    op = OPS[name]
    path = PREFIX + op.admin_path
    served = {
        (method, r.path)
        for r in admin.starlette.routes
        if isinstance(r, StarletteRoute)
        for method in (r.methods or ())
    }
    assert (op.admin_method, path) in served
    route = next(r for r in admin.routes if r.path == path and r.method == op.admin_method)
    assert route.activity is op.activity
    assert route.failure == op.failure
    document = openapi_document(admin.routes, title="t", version="0")
    assert op.admin_method.lower() in document["paths"][path]


@pytest.mark.parametrize("name", GENERIC)
def test_the_admin_body_is_the_request_with_sandbox_id(name: str, admin: Any) -> None:
    op = OPS[name]
    route = next(r for r in admin.routes if r.path == PREFIX + op.admin_path)
    assert route.body is op.body
    fields = set(attrs.fields_dict(route.body))
    assert fields >= set(attrs.fields_dict(op.request)) | {"sandbox_id"}


@pytest.mark.parametrize("name", list(OPS))
def test_both_drivers_answer_it(name: str) -> None:
    op = OPS[name]
    for driver in (Driver, EmbeddedDriver, RemoteDriver):
        method = "call" if op.generic else op.name
        assert callable(getattr(driver, method, None)), f"{driver.__name__} lacks {method}"


def _fields_of(method: Any) -> set[str]:
    return {p for p in inspect.signature(method).parameters if p != "self"}


@pytest.mark.parametrize("name", list(OPS))
def test_the_sandbox_has_its_method_with_its_fields(name: str) -> None:
    op = OPS[name]
    method = getattr(Sandbox, op.sandbox_method, None)
    assert callable(method), f"Sandbox lacks {op.sandbox_method}"
    if not op.generic:
        return
    hints = typing.get_type_hints(method)
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    takes_model = any(
        isinstance(hints.get(p), type) and issubclass(op.request, hints[p]) for p in params
    )
    # ROCK's signatures take the request model; rock's additions take its fields.
    assert takes_model or _fields_of(method) >= set(attrs.fields_dict(op.request)), (
        f"Sandbox.{op.sandbox_method}{inspect.signature(method)} takes neither "
        f"{op.request.__name__} nor its fields"
    )
