"""Egress policies and tenants (issue #26 point 4): the admin's default policy, a key's own
default and its widest policy. A start or an update wider than its key allows is refused,
naming the rule and the tenant; a start without a policy gets the default, which its status
shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.egress import EgressPolicy, EgressRule
from rock_core.errors import RockError

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

KEY_A = "egress-tenant-a-key-0001"
KEY_B = "egress-tenant-b-key-0002"
WIDEST = {
    "default": "deny",
    "rules": [{"action": "allow", "cidr": "198.18.0.0/15", "ports": [443]}],
}
KEY_DEFAULT = {
    "default": "deny",
    "rules": [{"action": "allow", "cidr": "198.18.1.3", "ports": [443]}],
}


def _toml(policy: dict[str, Any]) -> str:
    rules = ", ".join(
        "{ " + ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in rule.items()) + " }"
        for rule in policy.get("rules", [])
    )
    return f'{{ default = "{policy["default"]}", rules = [{rules}] }}'


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: Any, docker_client: Any, admin_launcher: Any) -> Iterator[Any]:
    launch_admin, stop_admin = admin_launcher
    config = (
        "[admin]\n"
        'default_egress = { default = "deny" }\n'
        "api_keys = [\n"
        f'  {{ tenant = "team-a", key = "{KEY_A}", max_egress = {_toml(WIDEST)}, '
        f"default_egress = {_toml(KEY_DEFAULT)} }},\n"
        f'  {{ tenant = "team-b", key = "{KEY_B}" }},\n'
        "]\n"
    )
    server = launch_admin(tmp_path_factory.mktemp("rock-egress-keys"), config=config)
    yield server
    stop_admin(server, docker_client)


def _sandbox(admin: Any, key: str, egress: Any = None) -> Sandbox:
    return Sandbox(
        SandboxConfig(
            image="python:3.11",
            memory="256m",
            cpus=0.5,
            base_url=admin.url,
            extra_headers={"X-API-Key": key},
            egress=egress,
        )
    )


async def test_a_start_wider_than_its_key_allows_is_refused_naming_the_rule_and_tenant(keyed):
    wide = EgressPolicy.deny_all([EgressRule.allow("198.18.0.0/15")])  # every port, not only 443
    with pytest.raises(RockError) as info:
        await _sandbox(keyed, KEY_A, wide).start()
    message = str(info.value)
    assert (
        "egress: rules[0] (allow 198.18.0.0/15) is wider than tenant 'team-a' may ask for"
        in message
    )
    assert (
        "max_egress on its api_keys entry: deny by default; allow 198.18.0.0/15 any 443" in message
    )
    with pytest.raises(RockError, match="egress: default allow is wider than tenant 'team-a'"):
        await _sandbox(keyed, KEY_A, EgressPolicy(default="allow")).start()


async def test_starts_without_a_policy_get_the_keys_default_or_the_admins_and_status_shows_it(
    keyed,
):
    a, b = _sandbox(keyed, KEY_A), _sandbox(keyed, KEY_B)
    await a.start()
    await b.start()
    try:
        assert (await a.get_status()).egress == {
            "default": "deny",
            "rules": [
                {"action": "allow", "cidr": "198.18.1.3/32", "ports": ["443"], "protocol": "any"}
            ],
            "domains": [],
        }
        assert (await b.get_status()).egress == {"default": "deny", "rules": [], "domains": []}
        # An update within the key's widest goes; a wider one is refused naming the rule.
        narrow = EgressPolicy.deny_all([EgressRule.allow("198.19.0.0/16", [443])])
        assert (await a.update_egress(narrow)).egress == narrow.to_dict()
        with pytest.raises(RockError, match=r"rules\[0\] \(allow 192.0.2.0/24\) is wider than"):
            await a.update_egress(EgressPolicy.deny_all(["192.0.2.0/24"]))
        assert (await a.get_status()).egress == narrow.to_dict()
        # A key without a widest policy may open its sandbox entirely.
        assert (await b.update_egress(EgressPolicy(default="allow"))).egress["default"] == "allow"
    finally:
        await a.stop()
        await b.stop()
