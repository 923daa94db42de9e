"""``read_types``: the type each field of a settings class is read as, so a table of settings
(a TOML file, environment variables) is read from the class alone."""

from __future__ import annotations

from typing import Optional

import attrs
import pytest

from rock_core.converters import READ_AS, checked, read_types, structure_fields, structure_options
from rock_core.errors import InvalidParameter
from rock_core.models import ByteSize, PositiveInt


@attrs.frozen(kw_only=True)
class _Options:
    workers: PositiveInt = checked(PositiveInt, default=1)
    limit: ByteSize | None = checked(Optional[ByteSize], default=None)
    names: tuple[str, ...] = attrs.field(default=(), converter=tuple, metadata={READ_AS: list[str]})


def test_each_field_is_read_as_its_checked_type_or_its_metadata() -> None:
    assert read_types(_Options) == {
        "workers": PositiveInt,
        "limit": Optional[ByteSize],
        "names": list[str],
    }


def test_a_table_read_with_them_names_the_bad_field_by_its_path() -> None:
    read = structure_fields({"workers": "3", "limit": "1k"}, read_types(_Options), path="plugins.x")
    assert _Options(**read) == _Options(workers=3, limit=1024)
    with pytest.raises(InvalidParameter) as info:
        structure_fields({"workers": 0}, read_types(_Options), path="plugins.x")
    assert (info.value.message, info.value.field, info.value.value) == (
        "plugins.x.workers: expected an integer > 0, got 0",
        "plugins.x.workers",
        0,
    )


def test_a_field_without_a_type_is_refused_naming_it() -> None:
    @attrs.frozen
    class Forgotten:
        known: int = checked(int, default=0)
        forgotten: int = 0

    with pytest.raises(TypeError, match="Forgotten: no type to read forgotten as"):
        read_types(Forgotten)


@attrs.frozen(kw_only=True)
class _Range:
    low: PositiveInt = checked(PositiveInt, default=1)
    high: PositiveInt = checked(PositiveInt, default=2)

    def __attrs_post_init__(self) -> None:
        if self.low > self.high:
            raise InvalidParameter(
                f"low: {self.low} is above high {self.high}", field="low", value=self.low
            )


def test_structure_options_builds_the_class_and_names_its_own_checks_under_the_path() -> None:
    assert structure_options({"low": "2", "high": 3}, _Range, path="plugins.r") == _Range(
        low=2, high=3
    )
    with pytest.raises(InvalidParameter) as info:
        structure_options({"low": 5}, _Range, path="plugins.r")
    assert (info.value.message, info.value.field, info.value.value) == (
        "plugins.r.low: 5 is above high 2",
        "plugins.r.low",
        5,
    )
    with pytest.raises(
        InvalidParameter, match=r"^plugins\.r\.wide: not a known key \(known: high, low\)$"
    ):
        structure_options({"wide": 1}, _Range, path="plugins.r")
