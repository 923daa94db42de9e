"""The admin's ``[engine]`` keys are :class:`EngineConfig`'s fields: a new engine setting is
readable from the file and the environment without being listed again."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from rock.admin.config import load_settings
from rock_core.converters import unstructure_wire
from rock_core.engine.config import EngineConfig
from rock_core.errors import InvalidParameter

#: Set by the admin whatever the file says, or read from [plugins]: not [engine] keys.
FIXED = {"remove_on_close", "plugin_options"}
SETTINGS = [field for field in attrs.fields(EngineConfig) if field.name not in FIXED]


def _known_engine_keys(tmp_path: Path) -> set[str]:
    config = tmp_path / "admin.toml"
    config.write_text("[engine]\nno_such_setting = 1\n")
    with pytest.raises(InvalidParameter) as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert info.value.field == "engine.no_such_setting"
    return set(info.value.message.split("(known: ", 1)[1].rstrip(")").split(", "))


def test_every_engine_setting_is_a_known_engine_key(tmp_path: Path) -> None:
    assert _known_engine_keys(tmp_path) == {field.name for field in SETTINGS}


@pytest.mark.parametrize(
    "field", [f for f in SETTINGS if f.name != "store_path"], ids=lambda f: f.name
)
def test_every_engine_setting_is_read_from_the_file(tmp_path: Path, field: attrs.Attribute) -> None:
    value = _a_value(field)
    config = tmp_path / "admin.toml"
    config.write_text(f"[engine]\n{field.name} = {_toml(unstructure_wire(value))}\n")
    settings = load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert getattr(settings.engine, field.name) == value


@pytest.mark.parametrize(
    "field", [f for f in SETTINGS if f.name != "store_path"], ids=lambda f: f.name
)
def test_every_engine_setting_is_read_from_the_environment(
    tmp_path: Path, field: attrs.Attribute
) -> None:
    value = _a_value(field)
    text = unstructure_wire(value)
    if isinstance(text, list) and field.name != "warm_pools":
        text = ",".join(text)  # comma-separated names
    elif isinstance(text, (list, dict)):
        text = json.dumps(text)
    elif isinstance(text, bool):
        text = str(text).lower()
    variable = f"ROCK_ENGINE_{field.name.upper()}"
    settings = load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), variable: str(text)})
    assert getattr(settings.engine, field.name) == value


def _toml(value: object) -> str:
    """``value`` (JSON-ready) as a TOML value: JSON's, but tables inline as ``{ a = 1 }``."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _a_value(field: attrs.Attribute) -> object:
    """A value of ``field`` other than its default (so reading it is seen), or the default."""
    others = {
        "runtime": "nomad",
        "runtime_options": {"a": 1},
        "warm_pools": (),
        "allowed_cap_add": ("NET_RAW",),
        "archive_store": "fs",
        "rocklet_url": "http://127.0.0.1:1/rocklet.pyz",
        "store": "postgresql://rock@127.0.0.1:5432/rock",
        "cluster": "team-a",
        "cluster_address": "http://admin-a.example:8080",
        "commit_registries": ("registry.example.com",),
        "engine_label": "other",
        "max_auto_delete_seconds": 7,
    }
    if field.name in others:
        return others[field.name]
    default = field.default.factory() if isinstance(field.default, attrs.Factory) else field.default
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    raise AssertionError(f"no test value for the new setting {field.name}: add one to _a_value")
