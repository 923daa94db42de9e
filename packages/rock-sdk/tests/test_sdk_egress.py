"""Egress policies on real sandboxes (issue #26): an allowed destination answers, a denied one
and the metadata address are refused at once, a domain on the allow-list connects and one off
it does not (and a name that moves is followed), root inside the sandbox cannot lift the rules,
a policy survives an admin restart and a flushed firewall, and sandboxes that come and go leave
no rule.

"Outside" is the host as the sandbox sees it: TCP servers bound to the bridge gateway's address
and to the host's own address (this machine has no internet), and a DNS server the test starts
on the gateway's port 53, which the admin gives its sandboxes (``egress_dns``). The probe run
inside the sandbox prints, per ``host:port``, ``answered``, ``refused``, ``timeout`` (its
connect waits 20 s: a denied connection must be refused, not left to hang), ``unresolved``,
``error`` or ``silent`` (it connected, and what it read, in hex, did not say ``hello``: a failure
prints those bytes, ``-`` when the server closed without a word).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.actions import Command
from rock_core.egress import EgressPolicy, EgressRule
from rock_core.testing import eventually_async
from rock_core.testing.fixtures import bridge_gateway

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

PROBE = r"""
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(20)
    try:
        s.connect((host, int(port)))
        got = b""
        while not got.endswith(b"\n") and len(got) < 64:
            chunk = s.recv(64)
            if not chunk:
                break
            got += chunk
        if got.startswith(b"hello"):
            print(target, "answered")
        else:
            print(target, "silent", got.hex() or "-")
    except ConnectionRefusedError:
        print(target, "refused")
    except socket.timeout:
        print(target, "timeout")
    except socket.gaierror:
        print(target, "unresolved")
    except OSError as exc:
        print(target, "error", exc.errno)
    finally:
        s.close()
"""


def parse_probe(output: str) -> dict[str, str]:
    """``{target: outcome}`` from the probe's output (an outcome with details keeps them:
    ``"error 113"``, ``"silent -"``)."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found[parts[0]] = " ".join(parts[1:])
    return found


class _Hello(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"hello\n")


@contextmanager
def tcp_server(address: str) -> Iterator[int]:
    """A server on ``address`` (a free port) that says ``hello``; yields its port."""
    server = socketserver.ThreadingTCPServer((address, 0), _Hello)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    )
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


class DnsServer:
    """Answers ``A`` queries for the names in :attr:`answers` (``{name: address}``), on UDP
    ``address``:``port``; every other name is NXDOMAIN. A test changes :attr:`answers` to move
    a name."""

    def __init__(self, address: str, port: int = 53) -> None:
        self.answers: dict[str, str] = {}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, port))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(512)
            except OSError:
                continue
            try:
                self._sock.sendto(self._answer(data), peer)
            except (OSError, IndexError, struct.error):
                pass

    def _answer(self, data: bytes) -> bytes:
        ident, _flags = struct.unpack(">HH", data[:4])
        offset, labels = 12, []
        while data[offset]:
            length = data[offset]
            labels.append(data[offset + 1 : offset + 1 + length].decode())
            offset += length + 1
        question = data[12 : offset + 5]
        qtype = struct.unpack(">H", data[offset + 1 : offset + 3])[0]
        address = self.answers.get(".".join(labels).lower())
        if address is None:
            return struct.pack(">HHHHHH", ident, 0x8183, 1, 0, 0, 0) + question
        if qtype != 1:  # AAAA and others: no such record, the name exists
            return struct.pack(">HHHHHH", ident, 0x8180, 1, 0, 0, 0) + question
        answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 1, 4) + socket.inet_aton(address)
        return struct.pack(">HHHHHH", ident, 0x8180, 1, 1, 0, 0) + question + answer

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def host_rules_of(unit_id: str) -> list[str]:
    """The lines of the host's filter table that belong to container ``unit_id``."""
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    key = unit_id[:16]
    return [line for line in saved.splitlines() if key in line]


# -- fixtures ------------------------------------------------------------------------------------


def _gateway(docker_client: Any) -> str:
    """The gateway of the network ``network: bridge`` sandboxes join here (Docker's default
    bridge: rock's dockerd runs with ``icc: false``)."""
    options = docker_client.api.inspect_network("bridge")
    assert (options.get("Options") or {}).get("com.docker.network.bridge.enable_icc") == "false"
    return bridge_gateway(docker_client)


def _host_address(docker_client: Any) -> str:
    """An address of the host that is no Docker network's gateway (its own, e.g. eth0's)."""
    gateways = {
        bridge_gateway(docker_client, network["Id"])
        for network in docker_client.api.networks()
        if network.get("Driver") == "bridge"
    }
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return next(a for a in found if "." in a and a not in gateways and not a.startswith("127."))


class World:
    """What the tests reach: the admin, the servers' ``host:port`` and the DNS server."""

    def __init__(self, admin: Any, gateway: str, host: str, dns: DnsServer) -> None:
        self.admin, self.gateway, self.host, self.dns = admin, gateway, host, dns
        self.allowed = self.denied = self.elsewhere = ""

    async def start(self, policy: EgressPolicy | None, **kw: Any) -> Sandbox:
        sandbox = Sandbox(
            SandboxConfig(
                image="python:3.11",
                memory="256m",
                cpus=0.5,
                base_url=self.admin.url,
                egress=policy,
                **kw,
            )
        )
        await sandbox.start()
        return sandbox


@pytest.fixture(scope="module")
def world(tmp_path_factory: Any, docker_client: Any, admin_launcher: Any) -> Iterator[World]:
    launch_admin, stop_admin = admin_launcher
    gateway, host = _gateway(docker_client), _host_address(docker_client)
    dns = DnsServer(gateway)
    state = tmp_path_factory.mktemp("rock-egress-admin")
    config = (
        "[admin]\nper_sandbox_metrics = true\n"
        "[engine]\nreconcile_interval = 1.0\nstats_interval = 0.5\n"
        f'[plugins.docker]\negress_dns = "{gateway}"\negress_resolve_interval = 1.0\n'
    )
    admin = launch_admin(state, config=config)
    with tcp_server(gateway) as allowed, tcp_server(gateway) as denied, tcp_server(host) as other:
        w = World(admin, gateway, host, dns)
        w.allowed, w.denied, w.elsewhere = (
            f"{gateway}:{allowed}",
            f"{gateway}:{denied}",
            (f"{host}:{other}"),
        )
        w.config = config  # type: ignore[attr-defined]
        w.launch, w.stop_admin = launch_admin, stop_admin  # type: ignore[attr-defined]
        try:
            yield w
        finally:
            stop_admin(w.admin, docker_client)
            dns.close()


async def probe(sandbox: Sandbox, *targets: str) -> dict[str, str]:
    """What each ``host:port`` does to a connection from inside ``sandbox``."""
    done = await sandbox.execute(Command(command=["python3", "-c", PROBE, *targets], timeout=120))
    return parse_probe(done.stdout)


def unit_of(docker_client: Any, sandbox: Sandbox) -> str:
    (container,) = docker_client.containers.list(
        all=True, filters={"label": f"rock.sandbox_id={sandbox.sandbox_id}"}
    )
    return str(container.id)


async def rules_left(units: list[str]) -> dict[str, list[str]]:
    """The rules of ``units`` still on the host once their removals are done (a stopped
    sandbox's container leaves through the engine's removal queue, its rules with it)."""

    def left() -> dict[str, list[str]]:
        return {unit[:12]: rules for unit in units if (rules := host_rules_of(unit))}

    return await eventually_async(
        left, until=lambda found: found == {}, what="no rule left", timeout=120, interval=0.5
    )


def _port(target: str) -> int:
    return int(target.rsplit(":", 1)[1])


# -- tests -----------------------------------------------------------------------------------------


async def test_an_allowed_destination_answers_and_a_denied_one_and_the_metadata_address_are_refused(
    world: World, docker_client: Any
):
    policy = EgressPolicy.deny_all([EgressRule.allow(world.gateway, [_port(world.allowed)], "tcp")])
    sandbox = await world.start(policy)
    try:
        seen = await probe(
            sandbox, world.allowed, world.denied, world.elsewhere, "169.254.169.254:80"
        )
        assert seen == {
            world.allowed: "answered",
            world.denied: "refused",
            world.elsewhere: "refused",
            "169.254.169.254:80": "refused",
        }
        status = await sandbox.get_status()
        assert status.egress == policy.to_dict()
        unit = unit_of(docker_client, sandbox)
        assert any("-j REJECT" in line for line in host_rules_of(unit))
    finally:
        await sandbox.stop()
    assert await rules_left([unit]) == {}


async def test_an_allowing_policy_still_refuses_the_metadata_address_and_the_hosts_own(
    world: World,
):
    sandbox = await world.start(EgressPolicy(default="allow"))
    try:
        seen = await probe(sandbox, world.allowed, world.elsewhere, "169.254.169.254:80")
        assert seen == {
            world.allowed: "refused",
            world.elsewhere: "refused",
            "169.254.169.254:80": "refused",
        }
    finally:
        await sandbox.stop()


async def test_a_sandbox_without_a_policy_reaches_the_host_as_before(world: World):
    sandbox = await world.start(None)
    try:
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "answered"}
    finally:
        await sandbox.stop()


#: A server saying ``hello`` on every address of its network namespace; prints its port.
_OUTSIDE_SERVER = r"""
import socketserver
class Hello(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"hello\n")
server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), Hello)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def outside() -> Iterator[tuple[str, str, int]]:
    """A host beyond this one, as the internet is to a sandbox (this machine has none): a network
    namespace behind a veth pair, routed by the host, with two addresses and a ``hello`` server;
    yields ``(first address, second address, port)``. Its packets cross ``FORWARD``, not the
    host's ``INPUT``."""
    tag = f"{abs(hash(Path.cwd())) % 10000:04d}{threading.get_native_id() % 1000:03d}"
    ns, near, far = f"rock-out-{tag}", f"rko{tag}h", f"rko{tag}n"

    def ip(*args: str, where: str | None = None) -> None:
        prefix = ["ip", "netns", "exec", where] if where else []
        subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)

    ip("netns", "add", ns)
    server = None
    try:
        ip("link", "add", near, "type", "veth", "peer", "name", far)
        ip("link", "set", far, "netns", ns)
        ip("addr", "add", "198.18.7.1/29", "dev", near)
        ip("link", "set", near, "up")
        for address in ("198.18.7.2/29", "198.18.7.3/29"):
            ip("addr", "add", address, "dev", far, where=ns)
        ip("link", "set", far, "up", where=ns)
        ip("link", "set", "lo", "up", where=ns)
        ip("route", "add", "default", "via", "198.18.7.1", where=ns)
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", _OUTSIDE_SERVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield "198.18.7.2", "198.18.7.3", port
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", near], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


async def test_a_domain_on_the_allow_list_connects_one_off_it_does_not_and_a_moved_name_is_followed(
    world: World, outside: tuple[str, str, int]
):
    first, second, port = outside
    world.dns.answers.update({"allowed.test": first, "other.test": world.host})
    allowed, other = f"allowed.test:{port}", f"other.test:{_port(world.elsewhere)}"
    sandbox = await world.start(EgressPolicy.deny_all(domains=["allowed.test"]))
    try:
        assert (await probe(sandbox, allowed, other)) == {allowed: "answered", other: "refused"}
        # The name moves: the new address is allowed at the next resolution, the old refused.
        world.dns.answers["allowed.test"] = second
        await eventually_async(
            lambda: probe(sandbox, allowed, f"{first}:{port}"),
            until=lambda seen: seen == {allowed: "answered", f"{first}:{port}": "refused"},
            what="the moved name followed",
            timeout=60,
            interval=0.5,
        )
        # A name answering the host's own address (the gateway) opens nothing of the host: a DNS
        # answer is not the operator's word, only a rule is (the old address refused once the
        # name is resolved again).
        world.dns.answers["allowed.test"] = world.gateway
        moved = f"allowed.test:{_port(world.allowed)}"
        await eventually_async(
            lambda: probe(sandbox, moved, f"{second}:{port}"),
            until=lambda seen: seen == {moved: "refused", f"{second}:{port}": "refused"},
            what="the name moved to the host, refused",
            timeout=60,
            interval=0.5,
        )
    finally:
        await sandbox.stop()
        world.dns.answers.clear()


async def test_root_in_the_sandbox_cannot_lift_the_rules(world: World, tmp_path: Path):
    policy = EgressPolicy.deny_all([EgressRule.allow(world.gateway, [_port(world.allowed)], "tcp")])
    sandbox = await world.start(policy)
    try:
        # The host's own iptables and its libraries (the same Debian as python:3.11's), run as
        # root inside the sandbox.
        program = Path(shutil.which("xtables-nft-multi") or "/usr/sbin/xtables-nft-multi")
        for path in [program.resolve()] + [
            Path(f"/lib/x86_64-linux-gnu/{lib}")
            for lib in ("libxtables.so.12", "libmnl.so.0", "libnftnl.so.11")
        ]:
            await sandbox.upload_by_path(path, f"/tmp/ipt/{path.name}")
        tries = (
            "chmod +x /tmp/ipt/*; export LD_LIBRARY_PATH=/tmp/ipt; X=/tmp/ipt/"
            + program.resolve().name
            + "; id -u; $X iptables -F; $X iptables -P OUTPUT ACCEPT; $X iptables -t nat -F; "
            "python3 -c 'import fcntl,socket,struct; s=socket.socket(); "
            'fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"eth0", 0, b""))\' 2>&1; true'
        )
        done = await sandbox.execute(Command(command=["bash", "-c", tries], timeout=60))
        assert done.stdout.splitlines()[0] == "0"  # root
        assert "Permission denied" in done.stdout or "Operation not permitted" in done.stdout
        seen = await probe(sandbox, world.allowed, world.denied, "169.254.169.254:80")
        assert seen == {
            world.allowed: "answered",
            world.denied: "refused",
            "169.254.169.254:80": "refused",
        }
    finally:
        await sandbox.stop()


async def test_update_egress_opens_the_network_for_set_up_then_closes_it_before_returning(
    world: World,
):
    sandbox = await world.start(EgressPolicy.deny_all())
    try:
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "refused"}
        opened = EgressPolicy.deny_all([world.gateway])
        status = await sandbox.update_egress(opened)
        assert status.egress == opened.to_dict()
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "answered"}
        await sandbox.update_egress(EgressPolicy.deny_all())
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "refused"}
    finally:
        await sandbox.stop()


async def test_a_policy_survives_an_admin_restart_and_a_flushed_firewall(
    world: World, docker_client: Any
):
    policy = EgressPolicy.deny_all([EgressRule.allow(world.gateway, [_port(world.allowed)], "tcp")])
    sandbox = await world.start(policy)
    unit = unit_of(docker_client, sandbox)
    process = world.admin.process
    process.send_signal(signal.SIGTERM)  # the admin leaves its sandboxes running
    process.wait(60)
    world.admin = world.launch(world.admin.state_dir, config=world.config, port=world.admin.port)
    try:
        seen = await probe(sandbox, world.allowed, world.denied)
        assert seen == {world.allowed: "answered", world.denied: "refused"}
        # The host's rules flushed behind rock's back (a firewall reload): reconcile puts them back.
        chains = [line.split()[0][1:] for line in host_rules_of(unit) if line.startswith(":")]
        for chain in chains:
            subprocess.run(["iptables", "-w", "-F", chain], check=True)
        assert (await probe(sandbox, world.denied)) == {world.denied: "answered"}
        await eventually_async(
            lambda: probe(sandbox, world.allowed, world.denied),
            until=lambda seen: seen == {world.allowed: "answered", world.denied: "refused"},
            what="the rules put back",
            timeout=60,
            interval=0.5,
        )
    finally:
        await sandbox.stop()
    assert await rules_left([unit]) == {}


async def test_sixteen_sandboxes_with_policies_come_and_go_8_at_once_and_leave_no_rule(
    world: World, docker_client: Any
):
    policy = EgressPolicy.deny_all(
        [EgressRule.allow(world.gateway, [_port(world.allowed)], "tcp")], domains=["allowed.test"]
    )
    gate = asyncio.Semaphore(8)

    async def one(index: int) -> str:
        async with gate:
            sandbox = await world.start(policy if index % 2 else EgressPolicy(default="allow"))
            try:
                unit = unit_of(docker_client, sandbox)
                assert host_rules_of(unit) != []
                return unit
            finally:
                await sandbox.stop()

    units = await asyncio.gather(*(one(i) for i in range(16)))  # two waves of 8 at once
    assert await rules_left(units) == {}


async def test_the_swe_bench_case_pip_through_its_mirror_and_everything_else_denied(world: World):
    from rock.sdk.sandbox.speedup import SpeedupType

    mirror = f"http://{world.allowed}/simple"
    sandbox = await world.start(EgressPolicy.deny_all())
    try:
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "refused"}
        done = await sandbox.network.speedup(SpeedupType.PIP, mirror)
        assert done.exit_code == 0, done.output
        seen = await probe(sandbox, world.allowed, world.denied, world.elsewhere)
        assert seen == {
            world.allowed: "answered",
            world.denied: "refused",
            world.elsewhere: "refused",
        }
        config = await sandbox.execute(Command(command=["pip", "config", "list"]))
        assert mirror in config.stdout
    finally:
        await sandbox.stop()


@pytest.mark.driver_independent  # the module's other tests cover the admin
async def test_an_embedded_sandboxs_policy_is_enforced_and_updated(engine: Any, world: World):
    sandbox = Sandbox(
        SandboxConfig(image="python:3.11", memory="256m", cpus=0.5, egress=EgressPolicy.deny_all())
    )
    await sandbox.start()
    try:
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "refused"}
        await sandbox.update_egress(
            {"default": "deny", "rules": [{"action": "allow", "cidr": world.gateway}]}
        )
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "answered"}
        await sandbox.update_egress(None)
        assert (await probe(sandbox, world.allowed)) == {world.allowed: "answered"}
        assert (await sandbox.get_status()).egress is None
    finally:
        await sandbox.stop()


async def test_rock_sandbox_egress_shows_and_replaces_the_policy(world: World):
    rock = str(Path(sys.executable).with_name("rock"))

    def cli(*args: str) -> str:
        done = subprocess.run(
            [rock, "sandbox", "egress", sandbox.sandbox_id, "--base-url", world.admin.url, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    sandbox = await world.start(EgressPolicy.deny_all())
    try:
        shown = await asyncio.to_thread(cli)
        assert shown == f"{sandbox.sandbox_id}: deny by default"
        rule = f"{world.gateway}:{_port(world.allowed)}:tcp"
        changed = await asyncio.to_thread(cli, "--default", "deny", "--allow", rule)
        assert changed == (
            f"{sandbox.sandbox_id}: deny by default; allow {world.gateway}/32 tcp {_port(world.allowed)}"
        )
        assert (await probe(sandbox, world.allowed, world.denied)) == {
            world.allowed: "answered",
            world.denied: "refused",
        }
        assert await asyncio.to_thread(cli, "--none") == f"{sandbox.sandbox_id}: no egress policy"
    finally:
        await sandbox.stop()


async def test_refused_connections_are_counted_in_the_status_metrics_and_top(world: World):
    import httpx

    sandbox = await world.start(EgressPolicy.deny_all())
    try:
        targets = [world.denied] * 3 + ["169.254.169.254:80"]
        assert set((await probe(sandbox, *targets)).values()) == {"refused"}

        async def counted() -> int:
            usage = (await sandbox.get_status()).usage or {}
            return int(usage.get("egress_refused") or 0)

        assert await eventually_async(
            counted, until=lambda n: n >= 4, what="4 refusals", timeout=60
        )
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{world.admin.url}/metrics")).text
        line = f'rock_sandbox_egress_refused{{sandbox_id="{sandbox.sandbox_id}"}}'
        assert any(
            row.startswith(line) and float(row.split()[-1]) >= 4 for row in text.splitlines()
        )
        rock = str(Path(sys.executable).with_name("rock"))
        done = await asyncio.to_thread(
            subprocess.run,
            [rock, "sandbox", "top", "--json", "--base-url", world.admin.url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        rows = {row["sandbox_id"]: row for row in json.loads(done.stdout)["items"]}
        assert rows[sandbox.sandbox_id]["egress_refused"] >= 4
    finally:
        await sandbox.stop()


async def test_a_reset_sandbox_keeps_its_policy(world: World):
    policy = EgressPolicy.deny_all([EgressRule.allow(world.gateway, [_port(world.allowed)], "tcp")])
    sandbox = await world.start(policy)
    try:
        for _ in range(2):  # the first reset makes a new unit, the second takes its spare
            await sandbox.reset()
            seen = await probe(sandbox, world.allowed, world.denied)
            assert seen == {world.allowed: "answered", world.denied: "refused"}
    finally:
        await sandbox.stop()
