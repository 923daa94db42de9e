"""``rock envhub`` on the local database (no server): register, list, get, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rock_gem.cli import envhub


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    for name in ("ROCK_ENVHUB_BASE_URL", "ROCK_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCK_ENVHUB_DB_URL", f"sqlite:///{tmp_path / 'hub.db'}")

    def _run(*args: str, ok: bool = True) -> str:
        result = CliRunner().invoke(envhub, list(args))
        assert (result.exit_code == 0) is ok, result.output
        return result.output

    return _run


def test_register_list_get_delete(run) -> None:  # type: ignore[no-untyped-def]
    entry = json.loads(
        run(
            "register",
            "my-sokoban",
            "img:1",
            "--gem-id",
            "game:Sokoban-v0-easy",
            "--tag",
            "games",
            "--extra-spec",
            '{"kwargs": {"max_turns": 5}}',
        )
    )
    assert entry["extra_spec"] == {"kwargs": {"max_turns": 5}, "env_id": "game:Sokoban-v0-easy"}
    assert [e["env_name"] for e in json.loads(run("list", "--tag", "games"))] == ["my-sokoban"]
    assert json.loads(run("list", "--tag", "nothing")) == []
    assert json.loads(run("get", "my-sokoban"))["image"] == "img:1"
    run("delete", "my-sokoban")
    assert "'my-sokoban' is not registered" in run("get", "my-sokoban", ok=False)
    assert "not registered" in run("delete", "my-sokoban", ok=False)


def test_bad_input_names_the_option(run) -> None:  # type: ignore[no-untyped-def]
    assert "--extra-spec" in run("register", "x", "img", "--extra-spec", "{nope", ok=False)
    assert "image" in run("register", "x", " ", ok=False)
