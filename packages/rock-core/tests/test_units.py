"""Sizes and CPU counts as users write them, 1024-based like ROCK."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_core.sizes import (
    GiB,
    KiB,
    MiB,
    TiB,
    cpus_to_float,
    format_bytes,
    format_size,
    parse_cpus,
    parse_size,
    size_to_bytes,
)

GOOD_SIZES = [
    ("8g", 8 * GiB),
    ("512m", 512 * MiB),
    ("20G", 20 * GiB),
    ("1.5g", int(1.5 * GiB)),
    ("1024", 1024),
    (1024, 1024),
    (0, 0),
    ("0", 0),
    ("2Gi", 2 * GiB),
    ("2GiB", 2 * GiB),
    ("4gb", 4 * GiB),
    ("4GB", 4 * GiB),
    ("64k", 64 * KiB),
    ("64KiB", 64 * KiB),
    ("100b", 100),
    ("100B", 100),
    ("1t", TiB),
    ("1Ti", TiB),
    ("8 g", 8 * GiB),
    ("  8g  ", 8 * GiB),
    (".5k", 512),
    ("1.5b", 1),  # fractional bytes are truncated, as ROCK does
]


@pytest.mark.parametrize(("text", "expected"), GOOD_SIZES)
def test_parse_size_accepts_rock_sizes(text: str | int, expected: int) -> None:
    assert parse_size(text, field="memory") == expected


BAD_SIZES = [
    "8x",
    "",
    "  ",
    "-1g",
    "-5",
    "nan",
    "inf",
    "g",
    "8gg",
    "1e3",
    "8 x",
    "8.0.0g",
    "8p",
    "٨g",  # a non-ASCII digit
    -5,
    True,
    False,
    None,
    1.5,
    [8],
]


@pytest.mark.parametrize("value", BAD_SIZES, ids=repr)
def test_parse_size_rejects_with_field_and_value(value: object) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_size(value, field="disk")  # type: ignore[arg-type]
    err = info.value
    assert str(err).startswith("disk: ")
    assert repr(value) in str(err)
    assert err.field == "disk"
    assert err.value == value
    # A bad size is the caller's mistake: a 4xxx error.
    assert isinstance(err, BadRequestRockError)
    assert 4000 <= err.code < 5000


def test_bad_size_message_says_what_is_expected() -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_size("8x", field="memory")
    assert str(info.value) == (
        "memory: invalid size '8x' (expected a number with an optional unit b, k, m, g, t, like '8g')"
    )


def test_size_to_bytes_gives_reason_without_field() -> None:
    with pytest.raises(ValueError, match=r"^invalid size '8x'"):
        size_to_bytes("8x")
    assert size_to_bytes("2m") == 2 * MiB


@given(
    number=st.integers(min_value=0, max_value=10**6),
    unit=st.sampled_from(["", "b", "k", "m", "g", "t"]),
    suffix=st.sampled_from(["", "b", "i", "ib"]),
    upper=st.booleans(),
)
def test_every_unit_spelling_is_1024_based(
    number: int, unit: str, suffix: str, upper: bool
) -> None:
    if unit in ("", "b"):
        suffix = ""  # "bib" is not a unit
    text = f"{number}{unit}{suffix}"
    if upper:
        text = text.upper()
    power = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4}[unit]
    assert parse_size(text, field="memory") == number * 1024**power


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (8 * GiB, "8.00g"),
        (512 * MiB, "0.50g"),
        (int(1.5 * GiB), "1.50g"),
        (50 * GiB, "50.00g"),
        (0, "0.00g"),
    ],
)
def test_format_size_is_rocks_normalised_form(n: int, expected: str) -> None:
    assert format_size(n) == expected


def test_format_size_of_a_parsed_size() -> None:
    assert format_size(parse_size("8g", field="memory")) == "8.00g"
    assert parse_size(format_size(3 * GiB), field="memory") == 3 * GiB


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (8 * GiB, "8 GiB"),
        (int(2.5 * TiB), "2.5 TiB"),
        (MiB, "1 MiB"),
    ],
)
def test_format_bytes_for_people(n: int, expected: str) -> None:
    assert format_bytes(n) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(2, 2.0), (0.5, 0.5), ("1.5", 1.5), ("4", 4.0), (16.0, 16.0)]
)
def test_parse_cpus_accepts_positive_numbers(value: object, expected: float) -> None:
    result = parse_cpus(value, field="cpus")
    assert result == expected
    assert isinstance(result, float)


@pytest.mark.parametrize(
    "value",
    [0, -1, -0.5, "abc", "", float("nan"), float("inf"), "nan", "-inf", True, False, None, [1]],
    ids=repr,
)
def test_parse_cpus_rejects_with_field_and_value(value: object) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_cpus(value, field="limit_cpus")
    err = info.value
    assert str(err).startswith("limit_cpus: expected a positive number, got ")
    assert err.field == "limit_cpus"
    if not (isinstance(value, float) and math.isnan(value)):
        assert err.value == value


def test_parse_cpus_message_quotes_the_value() -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_cpus("abc", field="cpus")
    assert str(info.value) == "cpus: expected a positive number, got 'abc'"
    with pytest.raises(ValueError, match="got 0"):
        cpus_to_float(0)


def test_long_values_are_cut_in_messages() -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_size("x" * 500, field="memory")
    assert len(str(info.value)) < 200
    assert info.value.value == "x" * 500
