"""Runtimes declare what they can do; the engine refuses what its runtime cannot serve, naming both."""

from __future__ import annotations

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import (
    BadRequestRockError,
    InternalServerRockError,
    InvalidParameter,
)
from rock_core.runtime import RuntimeCapabilities
from rock_core.states import State
from rock_core.testing import NullRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_runtime_declares_its_capabilities() -> None:
    assert NullRuntime().capabilities == RuntimeCapabilities(
        assign=False,
        snapshot=False,
        keeps_files_across_stop=False,
        watch=False,
        disk_usage=False,
        network_modes=("bridge",),
    )


async def test_the_engine_refuses_what_its_runtime_cannot_do_naming_both() -> None:
    async with SandboxManager(EngineConfig(timer_interval=0.05), runtime=NullRuntime()) as engine:
        with pytest.raises(
            InvalidParameter,
            match=r"network: expected one of bridge, got 'host' \(what runtime 'null' offers\)",
        ) as info:
            await engine.start_async(SandboxStartRequest(image="python:3.11", network="host"))
        assert info.value.field == "network"
        # A start on a runtime that holds nothing fails and leaves the sandbox stopped; restarting
        # it would need its files, which this runtime does not keep.
        started = await engine.start_async(
            SandboxStartRequest(image="python:3.11", auto_delete_seconds=600)
        )
        with pytest.raises(
            InternalServerRockError, match="Failed to start sandbox because docker_run"
        ):
            await engine.wait_until_running(started.sandbox_id, timeout=30)
        assert engine.get_record(started.sandbox_id).state is State.STOPPED
        with pytest.raises(
            BadRequestRockError,
            match=r"cannot be restarted: runtime 'null' cannot keep a sandbox's files across a stop",
        ):
            await engine.restart(started.sandbox_id)


async def test_the_runtime_says_which_sandbox_ids_it_can_carry() -> None:
    class Narrow(NullRuntime):
        name = "narrow"

        def sandbox_id_problem(self, sandbox_id: str) -> str | None:
            return None if sandbox_id.islower() else "job ids are lower case here"

    assert NullRuntime().sandbox_id_problem("ok-1.2_3") is None
    assert "at most 128" in (NullRuntime().sandbox_id_problem("has space") or "")
    async with SandboxManager(EngineConfig(), runtime=Narrow()) as engine:
        with pytest.raises(
            InvalidParameter,
            match=r"sandbox_id: 'Upper' is not a valid id \(job ids are lower case here\)",
        ):
            await engine.start_async(SandboxStartRequest(image="python:3.11", sandbox_id="Upper"))


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"default_pids_limit": 0}, "default_pids_limit", "expected an integer > 0, got 0"),
        ({"max_pids_limit": "many"}, "max_pids_limit", "expected an integer, got 'many'"),
        (
            {"default_pids_limit": 9000, "max_pids_limit": 8000},
            "default_pids_limit",
            "above max_pids_limit 8000",
        ),
        ({"disk_check_interval": 0}, "disk_check_interval", "expected a number > 0, got 0"),
        ({"disk_keep_seconds": -1}, "disk_keep_seconds", "expected an integer >= 0, got -1"),
        ({"max_concurrent_starts": 0}, "max_concurrent_starts", "expected an integer > 0, got 0"),
        ({"max_memory": "lots"}, "max_memory", "invalid size 'lots'"),
        ({"remove_on_close": "maybe"}, "remove_on_close", "expected true or false, got 'maybe'"),
        ({"allowed_cap_add": ["NET_RAW", "FLY"]}, "allowed_cap_add", "unknown capability 'FLY'"),
    ],
)
def test_the_hardening_settings_of_an_engine_are_checked_naming_the_field(
    fields, field, said
) -> None:
    with pytest.raises(InvalidParameter, match=said) as info:
        EngineConfig(**fields)
    assert info.value.field == field


def test_allowed_capabilities_are_written_as_docker_takes_them() -> None:
    assert EngineConfig(allowed_cap_add=["net_raw", "CAP_SYS_PTRACE"]).allowed_cap_add == (
        "NET_RAW",
        "SYS_PTRACE",
    )


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            {"runtime_options": {"netwrok": "bridge"}},
            "runtime_options: got an unexpected keyword argument 'netwrok'",
        ),
        (
            {"archive_store": "fs", "plugin_options": {"archive-fs": {"rooot": "/tmp/x"}}},
            "plugins.archive-fs: got an unexpected keyword argument 'rooot'",
        ),
    ],
)
def test_a_misspelt_plugin_setting_is_named_with_its_table(config, said) -> None:
    """A runtime option or plugin table key the plugin's class does not take is refused naming
    the table, not as a bare TypeError from deep inside the engine."""
    from rock_core.engine.config import EngineConfig
    from rock_core.engine.manager import SandboxManager

    with pytest.raises(InvalidParameter, match=said):
        SandboxManager(EngineConfig(**config))


async def test_a_network_group_is_refused_on_a_runtime_that_declares_it_cannot() -> None:
    """``network_group`` on a runtime without the capability (Nomad's) is refused before any
    unit is made, naming the field, the runtime and the capability."""

    class NoGroups(NullRuntime):
        name = "no-groups"
        network_groups = False

    assert NullRuntime().capabilities.network_groups and not NoGroups().capabilities.network_groups
    async with SandboxManager(EngineConfig(), runtime=NoGroups()) as engine:
        with pytest.raises(
            InvalidParameter,
            match=(
                r"network_group: runtime 'no-groups' cannot put sandboxes in a network group "
                r"\(capability network_groups\); got 'team-a'"
            ),
        ) as info:
            await engine.start_async(
                SandboxStartRequest(image="python:3.11", network_group="team-a")
            )
        assert info.value.field == "network_group"
        assert engine.list_records() == []
