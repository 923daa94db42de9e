"""The engine builds its runtime from the table of the plugin that registered it
(``[plugins.<name>]``, ``ROCK_PLUGIN_<NAME>_*``), with ``[engine.runtime_options]`` on top:
how ``[engine] runtime = "nomad"`` gets its address and token from ``[plugins.nomad]``."""

from __future__ import annotations

import types

import pytest

from rock_core import hookimpl
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter
from rock_core.plugins import Plugins
from rock_core.testing import NullRuntime


class TabledRuntime(NullRuntime):
    name = "tabled"

    def __init__(self, *, address: str = "default", token: str | None = None) -> None:
        super().__init__()
        self.address = address
        self.token = token


def _plugins() -> Plugins:
    module = types.ModuleType("tabled-plugin")

    @hookimpl
    def rock_register_runtimes(register) -> None:
        register("tabled", TabledRuntime)

    module.rock_register_runtimes = rock_register_runtimes
    return Plugins.load(load_entrypoints=False, plugins=[module])


def test_the_runtime_takes_its_plugins_table_with_runtime_options_on_top(monkeypatch) -> None:
    monkeypatch.setenv("ROCK_PLUGIN_TABLED_PLUGIN_TOKEN", "from-the-environment")
    engine = SandboxManager(
        EngineConfig(
            runtime="tabled",
            plugin_options={"tabled-plugin": {"address": "http://table:4646", "token": "t"}},
        ),
        plugins=_plugins(),
    )
    assert isinstance(engine.runtime, TabledRuntime)
    assert (engine.runtime.address, engine.runtime.token) == (
        "http://table:4646",
        "from-the-environment",
    )

    engine = SandboxManager(
        EngineConfig(
            runtime="tabled",
            plugin_options={"tabled-plugin": {"address": "http://table:4646"}},
            runtime_options={"address": "http://options:4646"},
        ),
        plugins=_plugins(),
    )
    assert engine.runtime.address == "http://options:4646"


def test_a_misspelt_key_of_the_runtimes_table_is_named_with_the_table() -> None:
    with pytest.raises(
        InvalidParameter, match=r"plugins\.tabled-plugin .*unexpected keyword argument 'adress'"
    ):
        SandboxManager(
            EngineConfig(runtime="tabled", plugin_options={"tabled-plugin": {"adress": "x"}}),
            plugins=_plugins(),
        )
