"""EnvHub's store: ROCK's semantics (upsert by name, any-tag listing, 404-worthy misses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rock_core.errors import InvalidParameter
from rock_gem.envhub import DEFAULT_ENV_NAME, EnvHub, EnvNotRegistered, database_path


def test_register_is_an_upsert_that_keeps_the_creation_time(tmp_path: Path) -> None:
    hub = EnvHub(tmp_path / "hub.db")
    first = hub.register(
        "sokoban",
        "img:1",
        owner="ann",
        tags=["games"],
        extra_spec={"env_id": "game:Sokoban-v0-easy"},
    )
    second = hub.register("sokoban", "img:2", owner="ann", tags=["games", "grid"])
    assert (
        second.image == "img:2" and second.tags == ("games", "grid") and second.extra_spec is None
    )
    assert second.create_at == first.create_at and second.update_at >= first.update_at
    assert hub.get("sokoban") == second


def test_list_filters_by_owner_and_any_tag(tmp_path: Path) -> None:
    hub = EnvHub(tmp_path / "hub.db")
    hub.register("a", "i", owner="ann", tags=["x"])
    hub.register("b", "i", owner="bob", tags=["y"])
    hub.register("c", "i", owner="ann", tags=["y", "z"])
    assert [e.env_name for e in hub.list()] == ["a", "b", "c"]
    assert [e.env_name for e in hub.list(owner="ann")] == ["a", "c"]
    assert [e.env_name for e in hub.list(tags=["z", "x"])] == ["a", "c"]
    assert [e.env_name for e in hub.list(owner="bob", tags=["x"])] == []


def test_misses_and_bad_fields_name_the_env_or_field(tmp_path: Path) -> None:
    hub = EnvHub(tmp_path / "hub.db")
    with pytest.raises(EnvNotRegistered, match="'nope'"):
        hub.get("nope")
    assert hub.delete("nope") is False
    with pytest.raises(InvalidParameter, match="image"):
        hub.register("x", "  ")
    with pytest.raises(InvalidParameter, match="tags"):
        hub.register("x", "i", tags=[1])  # type: ignore[list-item]


def test_the_default_entry_and_the_database_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = EnvHub(tmp_path / "hub.db", default_image="rock-gem/python:3.11")
    entry = hub.get(DEFAULT_ENV_NAME)
    assert (
        entry.image == "rock-gem/python:3.11"
        and entry.owner == "ENVHUB"
        and "default" in entry.tags
    )
    monkeypatch.delenv("ROCK_ENVHUB_DB_URL", raising=False)
    assert database_path(None, "/state/rock.sqlite") == Path("/state/envhub.sqlite")
    assert database_path("sqlite:////x/y.db") == Path("/x/y.db")
    monkeypatch.setenv("ROCK_ENVHUB_DB_URL", "sqlite:////env/hub.db")
    assert database_path(None, "/state/rock.sqlite") == Path("/env/hub.db")
    with pytest.raises(InvalidParameter, match="envhub_db"):
        database_path("mysql://h/db")


# -- namespaces (issue #22 point 2) ---------------------------------------------------------------


def test_each_tenant_names_its_own_entries_and_sees_the_operators(tmp_path: Path) -> None:
    hub = EnvHub(tmp_path / "hub.db")
    hub.register("task", "img:operator")
    hub.register("task", "img:a", tenant="a")
    hub.register("only-b", "img:b", tenant="b")
    assert (
        hub.get("task", tenant="a").image == "img:a" and hub.get("task", tenant="a").tenant == "a"
    )
    assert (
        hub.get("task", tenant="b").image == "img:operator"
        and hub.get("task", tenant="b").tenant is None
    )
    assert hub.get("task").image == "img:operator"
    assert hub.find("only-b", tenant="a") is None and hub.find("only-b") is None
    assert [(e.env_name, e.image) for e in hub.list(tenant="a")] == [("task", "img:a")]
    assert [(e.env_name, e.image) for e in hub.list(tenant="b")] == [
        ("only-b", "img:b"),
        ("task", "img:operator"),
    ]
    assert len(hub.list(everyone=True)) == 3
    assert hub.delete("only-b", tenant="a") is False and hub.delete("task", tenant="b") is False
    assert hub.delete("task", tenant="a") is True
    assert hub.get("task", tenant="a").image == "img:operator"  # the operator's shows through again
    with pytest.raises(InvalidParameter, match="tenant"):
        hub.register("x", "i", tenant=" ")


def test_entries_of_a_database_written_before_namespaces_are_the_operators(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the schema rock-gem wrote before namespaces
        db.execute(
            "CREATE TABLE envs (env_name TEXT PRIMARY KEY, image TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', "
            "description TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]', extra_spec TEXT, "
            "create_at TEXT NOT NULL, update_at TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO envs VALUES ('old', 'img:old', 'ann', '', '[\"x\"]', '{\"env_id\": \"game:Sudoku-v0-easy\"}', 't0', 't1')"
        )
    db.close()
    hub = EnvHub(path)
    old = hub.get("old", tenant="a")
    assert (old.tenant, old.image, old.owner, old.tags, old.extra_spec, old.create_at) == (
        None,
        "img:old",
        "ann",
        ("x",),
        {"env_id": "game:Sudoku-v0-easy"},
        "t0",
    )
    assert hub.delete("old", tenant="a") is False  # a tenant cannot remove it
    hub.register("old", "img:a", tenant="a")
    assert hub.get("old", tenant="a").image == "img:a" and hub.get("old").image == "img:old"
    hub.close()
    assert EnvHub(path).get("old").image == "img:old"  # opened again: nothing to migrate


def test_a_request_acts_in_its_tenants_namespace_and_only_an_operator_names_another() -> None:
    from rock_core.routes import RouteRequest
    from rock_gem.envhub import EnvNotYours, namespace_of

    def request(tenant: str | None, operator: bool) -> RouteRequest:
        return RouteRequest(
            "POST", "/env/get", {}, {}, {}, b"{}", engine=None, tenant=tenant, operator=operator
        )

    assert namespace_of(request("a", False), {}) == "a"
    assert namespace_of(request("a", False), {"tenant": "a"}) == "a"
    with pytest.raises(EnvNotYours, match="'b'"):
        namespace_of(request("a", False), {"tenant": "b"})
    assert namespace_of(request(None, True), {}) is None  # keyless: the operator's
    assert namespace_of(request("ops", True), {}) is None
    assert namespace_of(request("ops", True), {"tenant": "b"}) == "b"
    with pytest.raises(InvalidParameter, match="tenant"):
        namespace_of(request("ops", True), {"tenant": 3})
