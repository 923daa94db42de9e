"""The chains rock-docker writes for an egress policy (rock_docker/_firewall.py): what each
rule becomes, in order, and that iptables itself accepts the whole (``iptables-restore
--test``: checked, nothing changed on the host)."""

from __future__ import annotations

import subprocess

import pytest

from rock_core.egress import EgressPolicy, EgressRule, egress_policy
from rock_docker._firewall import _body, _reject, chain_names

POLICY = egress_policy(
    EgressPolicy(
        "deny",
        (
            EgressRule.deny("198.51.100.9", [443], "tcp"),
            EgressRule.allow("203.0.113.0/24", [443, "8000-8100"]),
            EgressRule.allow("169.254.169.254", [80], "tcp"),
            EgressRule.deny("192.0.2.0/24", protocol="udp"),
        ),
        ("packages.example.org",),
    )
)


def test_rules_become_lines_in_order_and_replies_pass_first():
    forward, _local = chain_names("0123456789abcdef0123")
    assert forward == "ROCK-EG-0123456789abcdef"
    lines = _body(forward, POLICY, ["203.0.113.223"], ["192.0.2.53"])
    assert lines == [
        f"-A {forward} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        f"-A {forward} -d 198.51.100.9/32 -p tcp -m multiport --dports 443 -j REJECT --reject-with tcp-reset",
        f"-A {forward} -d 203.0.113.0/24 -p tcp -m multiport --dports 443,8000:8100 -j RETURN",
        f"-A {forward} -d 203.0.113.0/24 -p udp -m multiport --dports 443,8000:8100 -j RETURN",
        f"-A {forward} -d 169.254.169.254/32 -p tcp -m multiport --dports 80 -j RETURN",
        f"-A {forward} -d 192.0.2.0/24 -p udp -j REJECT --reject-with icmp-port-unreachable",
        f"-A {forward} -d 203.0.113.223/32 -j RETURN",
        f"-A {forward} -d 192.0.2.53/32 -p udp --dport 53 -j RETURN",
        f"-A {forward} -d 192.0.2.53/32 -p tcp --dport 53 -j RETURN",
    ]
    assert _reject(forward, "") == [
        f"-A {forward} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {forward} -j REJECT --reject-with icmp-port-unreachable",
    ]


def test_iptables_accepts_the_chains_of_a_policy():
    forward, local = chain_names("fedcba9876543210ffff")
    text = [
        "*filter",
        f":{forward} - [0:0]",
        f":{local} - [0:0]",
        *_body(forward, POLICY, ["203.0.113.223"], ["192.0.2.53"]),
        *_reject(forward, "-d 169.254.0.0/16"),
        *_reject(forward, ""),
        *_body(local, POLICY, [], []),
        *_reject(local, ""),
        "COMMIT",
    ]
    done = subprocess.run(
        ["iptables-restore", "--test", "--noflush"],
        input="\n".join(text) + "\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_host_without_iptables_and_no_policy_is_not_swept_or_warned_about(
    monkeypatch, caplog, anyio_backend
):
    from rock_docker.runtime import DockerRuntime

    monkeypatch.setenv("PATH", "/nonexistent")
    runtime = DockerRuntime(base_url="unix:///nonexistent/docker.sock")
    await runtime.sync_egress({})  # neither iptables nor Docker asked
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    await runtime.aclose()


def test_refusals_are_counted_per_unit_and_kept_across_a_rewrite_of_its_chains_only():
    from rock_docker._firewall import Firewall

    table = [
        ":ROCK-EG-aaaa - [0:0]",
        ":ROCK-EG-bbbb - [0:0]",
        "[3:180] -A ROCK-EG-aaaa -p tcp -j REJECT --reject-with tcp-reset",
        "[1:60] -A ROCK-EG-aaaa -j REJECT --reject-with icmp-port-unreachable",
        "[5:300] -A ROCK-EGI-bbbb -p tcp -j REJECT --reject-with tcp-reset",
        "[9:900] -A ROCK-EG-bbbb -d 203.0.113.0/24 -j RETURN",
    ]
    asked: list[tuple[str, ...]] = []

    def listed(program: str, *args: str, text: str | None = None) -> str:
        # `iptables -v -S <chain>`: that chain's rules, each with its counters after `-c`.
        asked.append(args)
        chain = args[-1]
        out = []
        for line in table:
            counters, _, rule = line.partition("] ")
            if rule.startswith(f"-A {chain} "):
                packets = counters[1:].split(":")[0]
                out.append(rule.replace(f"-A {chain} ", f"-A {chain} -c {packets} 0 ", 1))
        return "".join(f"{line}\n" for line in out)

    firewall = Firewall((), 30.0)
    firewall._save = lambda counters=False: list(table)  # type: ignore[method-assign]
    firewall._iptables = listed  # type: ignore[method-assign]
    firewall._remember([line for line in table if line.startswith(":")])
    assert firewall.refused() == {"aaaa": 4, "bbbb": 5}
    firewall._counted("aaaa")  # aaaa's chains are about to be written again
    assert {args[-1] for args in asked} == {"ROCK-EG-aaaa"}, "only its own chains are read"
    table[2:4] = [
        line.replace("[3:180]", "[0:0]").replace("[1:60]", "[0:0]") for line in table[2:4]
    ]
    assert firewall.refused() == {"aaaa": 4, "bbbb": 5}
