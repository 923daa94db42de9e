"""What the strategies accept: mirror URLs (APT, PIP) and IP addresses (GITHUB); examples and properties."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rock_core.errors import InvalidParameter
from rock_speedup import AptSpeedup, GitHubSpeedup, PipSpeedup

URL_STRATEGIES = [AptSpeedup(), PipSpeedup()]
SAFE = re.compile(r"[A-Za-z0-9\-._~:/@%+=,!*()\[\]]+")


@pytest.mark.parametrize("strategy", URL_STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://mirror.example", "http://mirror.example"),
        ("https://mirror.example/", "https://mirror.example"),
        ("  https://mirror.example/base//  ", "https://mirror.example/base"),
        ("HTTP://Mirror.Example:8080", "http://Mirror.Example:8080"),
        ("http://user:p%40ss@127.0.0.15:3141", "http://user:p%40ss@127.0.0.15:3141"),
        ("http://[::1]:8080/mirror", "http://[::1]:8080/mirror"),
    ],
)
def test_mirror_urls_are_accepted_without_their_trailing_slash(
    strategy, value: str, expected: str
) -> None:
    assert strategy.validate(value) == expected


@pytest.mark.parametrize("strategy", URL_STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("mirror.example", "needs a scheme"),
        ("mirror.example:8080/base", "needs a scheme"),
        ("ftp://mirror.example", "scheme must be http or https, not 'ftp'"),
        ("http://", "no host name"),
        ("http://:8080/x", "no host name"),
        ("http://mirror.example:99999", "bad port"),
        ("http://mirror.example/simple?x=1", "no query"),
        ("http://mirror.example/#top", "no query"),
        ("http://mirror.example/a b", "characters a mirror URL cannot have: ' '"),
        ("http://mirror.example/$(reboot)", "characters a mirror URL cannot have"),
        ("http://mirror.example/'x'", 'characters a mirror URL cannot have: "\'"'),
        ("http://mirror.example\n[global]", "characters a mirror URL cannot have"),
        ("http://[not-v6]/", "cannot be parsed as a URL"),
        ("", "must be a non-empty string"),
        ("   ", "must be a non-empty string"),
    ],
)
def test_bad_mirror_urls_are_refused_naming_the_field(strategy, value: str, why: str) -> None:
    with pytest.raises(InvalidParameter, match=re.escape(why)) as info:
        strategy.validate(value)
    assert info.value.field == "speedup_value" and info.value.value == value


@given(st.text())
def test_any_text_is_either_refused_or_a_safe_http_url(value: str) -> None:
    for strategy in URL_STRATEGIES:
        try:
            url = strategy.validate(value)
        except InvalidParameter as exc:
            assert exc.field == "speedup_value" and exc.value == value
            continue
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme in ("http", "https") and parts.hostname
        assert SAFE.fullmatch(url) and not url.endswith("/")


_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,15}[a-z0-9])?", fullmatch=True)
_host = st.one_of(
    st.lists(_label, min_size=1, max_size=4).map(".".join),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
)
_path = st.lists(st.from_regex(r"[A-Za-z0-9._~-]{1,12}", fullmatch=True), max_size=3).map(
    lambda parts: "".join(f"/{p}" for p in parts)
)


@given(
    scheme=st.sampled_from(["http", "https", "HTTPS"]),
    host=_host,
    port=st.one_of(st.none(), st.integers(1, 65535)),
    path=_path,
    slash=st.booleans(),
)
def test_every_well_formed_mirror_url_is_accepted(
    scheme: str, host: str, port: int | None, path: str, slash: bool
) -> None:
    rest = f"://{host}{f':{port}' if port else ''}{path}"
    for strategy in URL_STRATEGIES:
        assert strategy.validate(scheme + rest + ("/" if slash else "")) == scheme.lower() + rest


@given(st.tuples(*[st.integers(0, 255)] * 4))
def test_every_ipv4_address_is_accepted(octets: tuple[int, int, int, int]) -> None:
    text = ".".join(map(str, octets))
    assert GitHubSpeedup().validate(f" {text}\n") == text


@given(st.tuples(*[st.integers(0, 255)] * 3), st.integers(256, 99999), st.integers(0, 3))
def test_an_octet_above_255_is_refused(octets: tuple[int, int, int], big: int, where: int) -> None:
    parts = [str(o) for o in octets]
    parts.insert(where, str(big))
    value = ".".join(parts)
    with pytest.raises(
        InvalidParameter, match=re.escape(f"{value!r} is not an IPv4 or IPv6 address")
    ) as info:
        GitHubSpeedup().validate(value)
    assert info.value.field == "speedup_value"


@given(st.ip_addresses(v=6))
def test_ipv6_addresses_are_accepted_in_canonical_form(address) -> None:
    assert GitHubSpeedup().validate(address.exploded) == str(address)


@pytest.mark.parametrize(
    "value",
    [
        "999.1.1.1",
        "github.com",
        "0127.0.0.1",
        "127.1.2",
        "127.1.2.3.4",
        "fe80::1%eth0",
        "127.1.2.3 github.com",
    ],
)
def test_values_that_are_not_an_address_are_refused(value: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        GitHubSpeedup().validate(value)
    assert info.value.field == "speedup_value" and repr(value) in str(info.value)


@given(
    st.one_of(
        st.builds(lambda o: ".".join(map(str, o)), st.tuples(*[st.integers(0, 255)] * 4)),
        st.ip_addresses(v=6).map(str),
    )
)
def test_the_github_script_is_valid_bash_for_every_address(address: str) -> None:
    _bash_syntax_ok(GitHubSpeedup().script(GitHubSpeedup().validate(address)))


@given(scheme=st.sampled_from(["http", "https"]), host=_host, path=_path)
def test_the_apt_and_pip_scripts_are_valid_bash_for_every_mirror(
    scheme: str, host: str, path: str
) -> None:
    for strategy in URL_STRATEGIES:
        _bash_syntax_ok(strategy.script(strategy.validate(f"{scheme}://{host}{path}")))


def _bash_syntax_ok(script: str) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
