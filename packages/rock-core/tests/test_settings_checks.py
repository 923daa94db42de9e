"""Values that come from outside HTTP (settings files, environment variables, the SDK's configs)
are read by the same converter as a request's fields, and a bad one names its path and value."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from rock_core.converters import checked, structure_fields, structure_value
from rock_core.errors import InvalidParameter
from rock_core.models import (
    ByteSize,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
    constrained,
    must,
)
from rock_core.sizes import MiB


class ConfigError(InvalidParameter, ValueError):
    """A caller's own subclass, as the SDK's ``InvalidConfig``."""


@pytest.mark.parametrize(
    ("value", "cls", "expected"),
    [
        ("8", PositiveInt, 8),
        ("10m", ByteSize, 10 * MiB),
        (1024, ByteSize, 1024),
        ("1.5", PositiveFloat, 1.5),
        (None, NonNegativeInt | None, None),
        ({"A": "1"}, dict[str, str], {"A": "1"}),
        (("NET_RAW",), list[str], ["NET_RAW"]),
    ],
)
def test_a_value_is_read_as_a_request_field_of_its_type_would_be(
    value: Any, cls: Any, expected: Any
) -> None:
    assert structure_value(value, cls, path="x") == expected


@pytest.mark.parametrize(
    ("value", "cls", "path", "message", "bad"),
    [
        (0, Port, "admin.port", "admin.port: expected a port number 1..65535, got 0", 0),
        (True, PositiveInt, "n", "n: expected an integer, got True", True),
        (
            "huge",
            ByteSize,
            "admin.max_json_body",
            "admin.max_json_body: invalid size 'huge'",
            "huge",
        ),
        (1.5, ByteSize, "b", "b: expected a size like '10m' or a number of bytes, got 1.5", 1.5),
        ("-1", PositiveFloat, "t", "t: expected a number > 0, got '-1'", "-1"),
        ({"A": 1}, dict[str, str], "env", "env['A']: expected a string, got 1", 1),
        (["ok", 2], list[str], "keys", "keys[1]: expected a string, got 2", 2),
        ("NET_RAW", list[str], "cap_add", "cap_add: expected a list, got 'NET_RAW'", "NET_RAW"),
    ],
)
def test_a_bad_value_names_its_path_and_the_value(
    value: Any, cls: Any, path: str, message: str, bad: Any
) -> None:
    with pytest.raises(ConfigError) as info:
        structure_value(value, cls, path=path, error=ConfigError)
    assert info.value.message.startswith(message)
    assert info.value.field == message.partition(": ")[0]
    assert info.value.value == bad


@attrs.frozen
class Pool:
    image: str
    size: int = constrained(NonNegativeInt, default=0)


def test_a_nested_models_own_check_is_named_by_its_full_path() -> None:
    with pytest.raises(InvalidParameter) as info:
        structure_value(
            [{"image": "a"}, {"image": "b", "size": -2}], list[Pool], path="engine.pools"
        )
    assert info.value.message == "engine.pools[1].size: expected an integer >= 0, got -2"
    assert (info.value.field, info.value.value) == ("engine.pools[1].size", -2)


def test_a_table_is_read_key_by_key_and_every_problem_is_named_at_once() -> None:
    types = {"port": Port, "max_json_body": ByteSize, "strict": bool}
    assert structure_fields({"port": "9000", "max_json_body": "1m"}, types, path="admin") == {
        "port": 9000,
        "max_json_body": MiB,
    }
    with pytest.raises(InvalidParameter) as info:
        structure_fields({"port": 0, "strict": "maybe", "colour": "red"}, types, path="admin")
    assert info.value.message == (
        "admin.port: expected a port number 1..65535, got 0; "
        "admin.strict: expected true or false, got 'maybe'; "
        "admin.colour: not a known key (known: max_json_body, port, strict)"
    )
    assert info.value.field == "admin.port, admin.strict, admin.colour"
    with pytest.raises(InvalidParameter, match="^admin: expected a table, got 5$"):
        structure_fields(5, types, path="admin")


@attrs.define(kw_only=True)
class Config:
    pids_limit: int | None = checked(PositiveInt | None, error=ConfigError, default=None)
    env: dict[str, str] = checked(dict[str, str], error=ConfigError, factory=dict)
    name: str = attrs.field(
        default="a", validator=must(str.isalpha, "letters only", error=ConfigError)
    )
    token: str = attrs.field(
        default="x" * 8, validator=must(lambda v: len(v) >= 8, "8 characters", secret=True)
    )


def test_checked_fields_are_read_when_built_and_when_assigned() -> None:
    config = Config(pids_limit="64")
    assert config.pids_limit == 64
    with pytest.raises(ConfigError) as info:
        Config(pids_limit=0)
    assert (info.value.message, info.value.field, info.value.value) == (
        "pids_limit: expected an integer > 0, got 0",
        "pids_limit",
        0,
    )
    with pytest.raises(ConfigError, match=r"^env\['HOME'\]: expected a string, got 1$"):
        config.env = {"HOME": 1}  # type: ignore[dict-item]
    assert config.env == {}


def test_must_names_the_field_and_the_value_unless_it_is_a_secret() -> None:
    with pytest.raises(ConfigError) as info:
        Config(name="a b")
    assert (info.value.message, info.value.field, info.value.value) == (
        "name: expected letters only, got 'a b'",
        "name",
        "a b",
    )
    with pytest.raises(InvalidParameter) as hidden:
        Config(token="short")
    assert hidden.value.message == "token: expected 8 characters, got a value not shown (a secret)"
    assert hidden.value.value is None and "short" not in str(hidden.value)


def test_a_byte_size_field_keeps_the_count() -> None:
    @attrs.frozen
    class Limits:
        body: int = constrained(ByteSize, default="10m")

    assert Limits().body == 10 * MiB and Limits(body=5).body == 5
    with pytest.raises(InvalidParameter, match="^body: invalid size 'lots'"):
        Limits(body="lots")
