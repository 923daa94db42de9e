"""An egress policy on a runtime that cannot enforce one (capability ``egress``, as Nomad's) is
refused before any unit is made, naming the runtime and the capability; a malformed policy is
refused naming the part that is wrong."""

from __future__ import annotations

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.egress import EgressPolicy, EgressRule, egress_policy, with_mirrors
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter, NotSupported
from rock_core.testing import NullRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_policy_is_refused_on_a_runtime_that_cannot_enforce_one_naming_the_capability():
    assert not NullRuntime().capabilities.egress
    async with SandboxManager(EngineConfig(), runtime=NullRuntime()) as engine:
        with pytest.raises(InvalidParameter) as info:
            await engine.start_async(
                SandboxStartRequest(image="python:3.11", egress={"default": "deny"})
            )
        assert info.value.field == "egress"
        assert "cannot enforce an egress policy" in info.value.message
        assert "(capability egress)" in info.value.message
        assert engine.list_records() == []
        with pytest.raises(NotSupported, match=r"\(capability egress\)"):
            await engine.update_egress("any", {"default": "deny"})


async def test_a_malformed_policy_is_refused_naming_the_part():
    async with SandboxManager(EngineConfig(), runtime=NullRuntime()) as engine:
        bad = {
            "default": "deny",
            "rules": [{"action": "allow", "cidr": "198.51.100.0/24", "ports": [0]}],
        }
        with pytest.raises(InvalidParameter) as info:
            await engine.start_async(SandboxStartRequest(image="python:3.11", egress=bad))
        assert info.value.field == "egress.rules[0].ports"
        for wrong, field in [
            ({"default": "block"}, "egress.default"),
            ({"rules": [{"action": "allow", "cidr": "fd00::/8"}]}, "egress.rules[0].cidr"),
            ({"rules": [{"action": "drop", "cidr": "198.51.100.1"}]}, "egress.rules[0].action"),
            ({"domains": ["not a name"]}, "egress.domains[0]"),
            ({"domains": ["198.51.100.1"]}, "egress.domains[0]"),
            ({"deny": []}, "egress"),
        ]:
            with pytest.raises(InvalidParameter) as info:
                egress_policy(wrong)
            assert info.value.field == field, wrong


def test_a_host_network_sandbox_cannot_have_a_policy():
    from rock_core.converters import spec_from_start_request

    with pytest.raises(InvalidParameter, match="network 'host' cannot have an egress policy"):
        spec_from_start_request(
            SandboxStartRequest(image="python:3.11", network="host", egress={"default": "deny"})
        )


def test_speedup_mirrors_are_allowed_when_the_policy_denies_by_default():
    policy = EgressPolicy.deny_all([EgressRule.allow("198.51.100.3", [443])])
    opened = with_mirrors(
        policy, ["http://198.51.100.7:3141/simple", "https://mirror.example.org/pypi"]
    )
    assert EgressRule("allow", "198.51.100.7/32", ("3141",), "tcp") in opened.rules
    bare = with_mirrors(policy, ["198.51.100.6"])
    assert EgressRule("allow", "198.51.100.6/32", ("80", "443"), "tcp") in bare.rules
    assert opened.domains == ("mirror.example.org",)
    assert with_mirrors(EgressPolicy(default="allow"), ["http://198.51.100.7/"]) == EgressPolicy()
