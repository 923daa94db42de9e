"""EnvHub's store: ROCK's semantics (upsert by name, any-tag listing, 404-worthy misses)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rock_core.errors import InvalidParameter
from rock_gem.envhub import DEFAULT_ENV_NAME, EnvHub, EnvNotRegistered, database_path


def test_register_is_an_upsert_that_keeps_the_creation_time(tmp_path: Path) -> None:
    hub = EnvHub(tmp_path / "hub.db")
    first = hub.register("sokoban", "img:1", owner="ann", tags=["games"], extra_spec={"env_id": "game:Sokoban-v0-easy"})
    second = hub.register("sokoban", "img:2", owner="ann", tags=["games", "grid"])
    assert second.image == "img:2" and second.tags == ("games", "grid") and second.extra_spec is None
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


def test_the_default_entry_and_the_database_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = EnvHub(tmp_path / "hub.db", default_image="rock-gem/python:3.11")
    entry = hub.get(DEFAULT_ENV_NAME)
    assert entry.image == "rock-gem/python:3.11" and entry.owner == "ENVHUB" and "default" in entry.tags
    monkeypatch.delenv("ROCK_ENVHUB_DB_URL", raising=False)
    assert database_path(None, "/state/rock.sqlite") == Path("/state/envhub.sqlite")
    assert database_path("sqlite:////x/y.db") == Path("/x/y.db")
    monkeypatch.setenv("ROCK_ENVHUB_DB_URL", "sqlite:////env/hub.db")
    assert database_path(None, "/state/rock.sqlite") == Path("/env/hub.db")
    with pytest.raises(InvalidParameter, match="envhub_db"):
        database_path("mysql://h/db")
