"""rock-e2b's parts that need no sandbox: its settings, the data plane's tokens, what a watched
directory's two listings say changed, a command's kept output, and its routes on the admin."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from rock_core.errors import InvalidParameter
from rock_core.models import SandboxRecord, SandboxSpec
from rock_e2b import access, control, plugin, process, watching
from rock_e2b.envd.filesystem import filesystem_pb as fs_pb
from rock_e2b.envd.process import process_pb as pb


def _record(sandbox_id: str, tenant: str | None) -> SandboxRecord:
    metadata = {} if tenant is None else {access.TENANT_KEY: tenant}
    return SandboxRecord(
        sandbox_id=sandbox_id,
        spec=SandboxSpec(image="python:3.11", metadata=metadata),
        create_time=datetime.now(UTC),
    )


def test_settings_name_templates_and_refuse_unknown_keys() -> None:
    plugin.rock_configure({"templates": {"base": "python:3.11"}})
    try:
        assert control.templates.image("base") == "python:3.11"
        assert control.templates.image("ubuntu:24.04") == "ubuntu:24.04"
        with pytest.raises(InvalidParameter, match=r"plugins\.e2b\.template: unknown setting"):
            plugin.rock_configure({"template": {}})
        with pytest.raises(InvalidParameter, match="a table of template name = image"):
            plugin.rock_configure({"templates": {"base": 3}})
    finally:
        plugin.rock_configure({})


def test_a_sandbox_token_opens_only_that_sandbox_of_that_tenant() -> None:
    access.configure_secret("shared-by-the-cluster")
    try:
        mine = _record("sbx-1", "a")
        token = access.access_token(mine)
        assert access.token_matches(mine, token)
        assert not access.token_matches(_record("sbx-2", "a"), token)
        assert not access.token_matches(_record("sbx-1", "b"), token)
        assert not access.token_matches(mine, None)
        # Admins sharing the secret answer the same token; another secret does not take it.
        access.configure_secret("another")
        assert not access.token_matches(mine, token)
    finally:
        access.configure_secret(None)


def test_two_listings_of_a_watched_directory_say_what_was_created_written_removed() -> None:
    old = {
        "a": ("f", "1", "644", "10.0"),
        "b": ("f", "1", "644", "10.0"),
        "c": ("d", "4", "755", "1"),
    }
    new = {
        "a": ("f", "2", "644", "11.0"),
        "c": ("d", "4", "700", "1"),
        "d": ("f", "0", "644", "12"),
    }
    assert [(e.name, e.type) for e in watching.changes(old, new)] == [
        ("a", fs_pb.EventType.WRITE),
        ("b", fs_pb.EventType.REMOVE),
        ("c", fs_pb.EventType.CHMOD),
        ("d", fs_pb.EventType.CREATE),
    ]
    assert watching.changes(new, new) == []


def test_a_command_keeps_its_last_output_for_slow_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "KEPT_OUTPUT", 10)

    async def scenario() -> list[bytes]:
        proc = process.Running(pb.ProcessConfig(cmd="x"), None)
        for chunk in (b"12345", b"67890", b"abcde"):
            data = pb.ProcessEvent.DataEvent(output=process._oneof("stdout", chunk))
            proc.add(pb.ProcessEvent(event=process._oneof("data", data)), len(chunk))
        proc.add(process._end(0))
        got = []
        async for event in proc.follow(0):
            if event.event.field == "data":
                got.append(event.event.value.output.value)
        return got

    assert asyncio.run(scenario()) == [b"67890", b"abcde"]


def test_every_route_is_under_e2b_and_only_the_data_plane_is_open() -> None:
    routes = plugin.rock_admin_routes()
    assert all(r.path.startswith("/e2b/") for r in routes)
    assert {r.path for r in routes if r.open} == {
        r.path for r in routes if r.path.startswith("/e2b/envd/")
    }
    paths = {(r.method, r.path) for r in routes}
    assert ("POST", "/e2b/envd/process.Process/Start") in paths
    assert ("POST", "/e2b/envd/filesystem.Filesystem/ListDir") in paths
    assert ("POST", "/e2b/v2/sandboxes") in paths and ("GET", "/e2b/v2/sandboxes") in paths


def test_e2b_network_settings_become_rock_egress_policies() -> None:
    from rock_e2b.network import egress_of

    assert egress_of(None) is None and egress_of({}) is None
    assert egress_of(None, False) == {"default": "deny", "rules": [], "domains": []}
    assert egress_of(
        {
            "denyOut": ["0.0.0.0/0", "198.51.100.3"],
            "allowOut": ["203.0.113.1", "packages.example.org"],
        }
    ) == {
        "default": "deny",
        "rules": [
            {"action": "allow", "cidr": "203.0.113.1/32"},
            {"action": "deny", "cidr": "198.51.100.3/32"},
        ],
        "domains": ["packages.example.org"],
    }
    with pytest.raises(access.E2BError, match="rock denies addresses and CIDRs, not domain"):
        egress_of({"denyOut": ["example.com"]})
    with pytest.raises(access.E2BError, match="rock does not serve DNS servers"):
        egress_of({"dnsServers": ["203.0.113.53"]})


def test_a_command_writing_tiny_chunks_keeps_a_bounded_number_of_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each event costs the admin far more than its bytes: a command writing a byte at a time
    # must not keep millions of them within KEPT_OUTPUT.
    monkeypatch.setattr(process, "KEPT_EVENTS", 3)
    proc = process.Running(pb.ProcessConfig(cmd="x"), None)
    for chunk in (b"1", b"2", b"3", b"4", b"5"):
        data = pb.ProcessEvent.DataEvent(output=process._oneof("stdout", chunk))
        proc.add(pb.ProcessEvent(event=process._oneof("data", data)), len(chunk))
    assert [e.event.value.output.value for e in proc.events] == [b"3", b"4", b"5"]
    assert proc.next_index == 5


def test_a_commands_stdin_pipe_ends_only_when_closed(tmp_path) -> None:
    """The stdin wrapper, run by the local shell as a sandbox's would: a write that comes
    before anything else is read, the command sees no end of input between writes, and reads
    the end once closed. The shell opens the pipe before the holder is forked, so the holder's
    write end exists before the command opens it (it opened it itself in the background before:
    a first write could then be the pipe's only writer, and the command ended after it)."""
    import base64
    import subprocess

    from rock_e2b import stdin

    pipe = str(tmp_path / "in")
    command = subprocess.Popen(
        stdin.wrap(["cat"], pipe), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def run(script: str, *args: str) -> None:
        subprocess.run(["/bin/sh", "-c", script, "sh", *args], check=True, timeout=30)

    try:
        for _ in range(100):  # the wrapper makes the pipe
            if (tmp_path / "in").exists():
                break
            subprocess.run(["sleep", "0.02"])
        for text in ("first\n", "second\n"):
            run(stdin._SEND, pipe, base64.b64encode(text.encode()).decode())
            assert command.poll() is None  # still reading
        run(stdin._CLOSE, pipe)
        out, err = command.communicate(timeout=30)
    finally:
        command.kill()
    assert (out, command.returncode) == (b"first\nsecond\n", 0), err
    assert not (tmp_path / "in").exists()
