"""What the abstract base classes plugins implement give them for free, and nothing more."""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest

from rock_core.archive import ArchiveStore
from rock_core.errors import BadRequestRockError, InvalidParameter, RockError, error_for_code
from rock_core.models import SandboxSpec
from rock_core.runtime import NotSupported, UnitHandle
from rock_core.speedup import SpeedupStrategy
from rock_core.testing import NullRuntime


class PlainRuntime(NullRuntime):
    """Implements only the required methods (as NullRuntime does), and counts its closes."""

    name = "plain"

    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_a_runtime_without_snapshots_says_so_clearly() -> None:
    handle = UnitHandle("plain", "c-1", "sb-1")

    async def main() -> None:
        with pytest.raises(NotSupported) as info:
            await PlainRuntime().snapshot(handle)
        err = info.value
        assert "runtime 'plain' cannot snapshot sandboxes" in str(err)
        assert (err.sandbox_id, err.attempted, err.code) == ("sb-1", "snapshot", 4005)
        # Callers probing optional operations may catch either family.
        assert isinstance(err, NotImplementedError) and isinstance(err, BadRequestRockError)

        spec = SandboxSpec(image="python:3.11", sandbox_id="sb-2")
        with pytest.raises(NotSupported, match="runtime 'plain' cannot restore") as restore:
            await PlainRuntime().restore(spec, _chunks(), labels={}, rocklet_token="t")
        assert (restore.value.sandbox_id, restore.value.attempted) == ("sb-2", "restore")

    anyio.run(main)


def test_the_logs_part_defaults_to_the_units_logs() -> None:
    class Talkative(PlainRuntime):
        async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
            return "rocklet listening \u2713\n"

    async def main() -> bytes:
        stream = await Talkative().snapshot_logs(UnitHandle("plain", "c-1", "sb-1"))
        return b"".join([chunk async for chunk in stream])

    assert anyio.run(main) == "rocklet listening \u2713\n".encode()


async def _chunks() -> Any:
    yield b"never read"


def test_not_supported_has_its_own_code() -> None:
    # error_for_code maps a code back to the most specific class: the code must be unique.
    assert type(error_for_code(4005, "no snapshots")) is NotSupported
    codes = [cls for cls in _subclasses(RockError) if cls.code == 4005]
    assert codes == [NotSupported]


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


def test_a_runtime_is_an_async_context_manager_that_closes() -> None:
    async def main() -> PlainRuntime:
        async with PlainRuntime() as runtime:
            assert runtime.closed == 0
        return runtime

    assert anyio.run(main).closed == 1


def test_an_archive_store_is_an_async_context_manager() -> None:
    class Store(ArchiveStore):
        name = "mem"
        closed = False

        async def put(self, sandbox_id: str, part: str, data: Any) -> None:
            pass

        async def get(self, sandbox_id: str, part: str) -> Any:
            return _chunks()

        async def exists(self, sandbox_id: str, part: str) -> bool:
            return False

        async def delete(self, sandbox_id: str) -> None:
            pass

        async def aclose(self) -> None:
            self.closed = True

    async def main() -> Store:
        async with Store() as store:
            assert not await store.exists("sb", "rootfs")
        return store

    assert anyio.run(main).closed


def test_unit_handles_are_immutable_values() -> None:
    handle = UnitHandle("docker", "abc123", "sb-1")
    assert handle == UnitHandle("docker", "abc123", "sb-1")
    assert {handle: 1}[UnitHandle("docker", "abc123", "sb-1")] == 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        handle.unit_id = "other"  # type: ignore[misc]


class Github(SpeedupStrategy):
    name = "github"

    def precheck_command(self) -> str:
        return "test -w /etc/hosts"

    def script(self, value: str) -> str:
        return f"echo '{value} github.com' >> /etc/hosts"


def test_speedup_validation_strips_the_value() -> None:
    assert Github().validate("  127.0.0.21\n") == "127.0.0.21"


@pytest.mark.parametrize("value", ["", "   ", None])
def test_speedup_validation_rejects_an_empty_value_naming_the_field(value: Any) -> None:
    with pytest.raises(InvalidParameter) as info:
        Github().validate(value)
    assert info.value.field == "speedup_value" and info.value.value == value
    assert "'github'" in str(info.value)
