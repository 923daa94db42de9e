"""rock-speedup as a distribution: its ``rock`` entry point registers the three strategies."""

from __future__ import annotations

from importlib.metadata import distribution

import rock_speedup
import rock_speedup.plugin
from rock_core.plugins import Plugins, get_plugin_manager
from rock_core.speedup import SpeedupStrategy


def test_version_matches_distribution() -> None:
    assert rock_speedup.__version__ == distribution("rock-speedup").version


def test_the_rock_entry_point_is_the_plugin_module() -> None:
    eps = [
        (ep.name, ep.value)
        for ep in distribution("rock-speedup").entry_points
        if ep.group == "rock"
    ]
    assert eps == [("speedup", "rock_speedup.plugin")]


def test_the_plugin_registers_apt_pip_and_github() -> None:
    plugins = Plugins(get_plugin_manager(load_entrypoints=False, plugins=[rock_speedup.plugin]))
    strategies = plugins.speedups()
    assert strategies == {
        "apt": rock_speedup.AptSpeedup,
        "pip": rock_speedup.PipSpeedup,
        "github": rock_speedup.GitHubSpeedup,
    }
    for name, cls in strategies.items():
        assert issubclass(cls, SpeedupStrategy) and cls.name == name
        assert cls().precheck_command().strip()


def test_the_entry_point_loads_through_rocks_plugin_manager(monkeypatch) -> None:
    for var in ("ROCK_DISABLE_PLUGINS", "ROCK_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    info = {i.name: i for i in Plugins.load().describe()}["speedup"]
    assert (info.distribution, info.hooks, info.blocked) == (
        "rock-speedup",
        ("rock_register_speedups",),
        False,
    )
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "rock-speedup")
    assert Plugins.load().speedups() == {}
