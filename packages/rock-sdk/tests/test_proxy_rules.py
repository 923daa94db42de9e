"""The proxy's rules without a sandbox: which port a request names, which ports may be reached,
where a redirect points, and how ``rock sandbox port-forward`` reads its arguments."""

from __future__ import annotations

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rock._cli_connect import parse_forward
from rock.admin.proxy import _rewrite_location, check_port, choose_port
from rock.admin.tunnels import ProxyRefused

BASE = "/apis/envs/sandbox/v1/sandboxes/sb/proxy"


def test_the_port_comes_from_exactly_one_source_else_8080() -> None:
    assert choose_port("/port/3000/a/b", None, None) == (3000, "path", "/a/b")
    assert choose_port("/port/3000", None, None) == (3000, "path", "/")
    assert choose_port("/a", "3000", None) == (3000, "header", "/a")
    assert choose_port("/a", None, "3000") == (3000, "query", "/a")
    assert choose_port("", None, None) == (8080, "default", "/")
    assert choose_port("/portal/x", None, None) == (
        8080,
        "default",
        "/portal/x",
    )  # not a port prefix


@pytest.mark.parametrize(
    ("path", "header", "query", "named"),
    [
        ("/port/1/", "2", None, "path, header"),
        ("/port/1/", None, "2", "path, query"),
        ("/", "1", "2", "header, query"),
        ("/port/1/", "2", "3", "path, header, query"),
    ],
)
def test_more_than_one_source_is_refused_naming_them(
    path: str, header: str | None, query: str | None, named: str
) -> None:
    with pytest.raises(ProxyRefused) as refused:
        choose_port(path, header, query)
    assert refused.value.status == 400 and refused.value.ws_code == 1008
    assert refused.value.detail == f"Cannot specify target port via multiple sources: {named}"


@given(st.integers(min_value=1, max_value=65535).filter(lambda p: p != 22555))
def test_every_port_but_the_rocklets_may_be_reached(port: int) -> None:
    assert check_port(str(port), "port") == port


@pytest.mark.parametrize("bad", ["0", "65536", "-1", "abc", "", "1.5", "22555"])
def test_bad_ports_are_400_naming_the_source(bad: str) -> None:
    with pytest.raises(ProxyRefused) as refused:
        check_port(bad, "X-ROCK-Target-Port")
    assert refused.value.status == 400 and "X-ROCK-Target-Port" in refused.value.detail


@pytest.mark.parametrize(
    ("location", "source", "expected"),
    [
        ("/login?next=/", "path", f"{BASE}/port/3000/login?next=/"),
        ("/login", "default", f"{BASE}/login"),
        ("/login", "header", f"{BASE}/login"),
        ("/login?a=1", "query", f"{BASE}/login?a=1&rock_target_port=3000"),
        ("http://localhost:3000/x#top", "path", f"{BASE}/port/3000/x#top"),
        ("http://127.0.0.1:3000/", "default", f"{BASE}/"),
        ("http://127.0.0.1:4000/x", "path", "http://127.0.0.1:4000/x"),  # another port: left alone
        ("https://example.invalid/x", "path", "https://example.invalid/x"),  # elsewhere: left alone
        ("next-page", "path", "next-page"),  # relative: already under the prefix
    ],
)
def test_redirects_into_the_sandbox_are_rewritten_under_the_prefix(
    location: str, source: str, expected: str
) -> None:
    base = BASE + ("/port/3000" if source == "path" else "")
    assert _rewrite_location(location, 3000, source, base) == expected


def test_port_forward_arguments_read_as_kubectl_does() -> None:
    assert parse_forward("8080") == (8080, 8080)
    assert parse_forward("9000:8080") == (9000, 8080)
    assert parse_forward(":8080") == (0, 8080)
    for bad in ("x", "1:y", "0", "70000", "1:0"):
        with pytest.raises(click.BadParameter):
            parse_forward(bad)
