"""``[plugins.gem]`` is read by rock-core's converters (:class:`rock_gem.options.GemOptions`):
a bad value is named ``plugins.gem.<key>`` with the value, whether the admin's table, a
``ROCK_PLUGIN_GEM_*`` variable or the provider's keyword arguments hold it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rock_core.errors import InvalidParameter
from rock_core.plugins import Plugins, plugin_tables
from rock_gem import envhub
from rock_gem.options import GemOptions
from rock_gem.provider import GemProvider

BAD = [
    ({"cpus": 0}, "plugins.gem.cpus", 0, "expected a number > 0, got 0"),
    (
        {"envs_per_sandbox": True},
        "plugins.gem.envs_per_sandbox",
        True,
        "expected an integer, got True",
    ),
    ({"timeout": "soon"}, "plugins.gem.timeout", "soon", "expected a number, got 'soon'"),
    ({"warm_sandboxes": -1}, "plugins.gem.warm_sandboxes", -1, "expected an integer >= 0, got -1"),
    ({"memory": "4q"}, "plugins.gem.memory", "4q", "invalid size '4q'"),
    (
        {"colour": "red"},
        "plugins.gem.colour",
        "red",
        "not a known key (known: cpus, envhub_db, envs_per_sandbox",
    ),
]


@pytest.fixture
def plugins() -> Iterator[Plugins]:
    """The installed plugins (rock-gem among them); EnvHub's settings back to defaults after."""
    loaded = Plugins.load()
    assert "gem" in loaded.names()
    yield loaded
    envhub.configured = GemOptions()


def _refused(call: Any) -> InvalidParameter:
    with pytest.raises(InvalidParameter) as info:
        call()
    return info.value


@pytest.mark.parametrize(("table", "field", "value", "says"), BAD)
def test_a_bad_table_is_refused_when_the_engine_configures_the_plugin(
    plugins: Plugins, table: dict[str, Any], field: str, value: object, says: str
) -> None:
    error = _refused(lambda: plugins.configure({"gem": table}))
    assert error.message.startswith(f"{field}: {says}")
    assert (error.field, error.value) == (field, value)


@pytest.mark.parametrize(("table", "field", "value", "says"), BAD)
def test_the_provider_refuses_the_same_values_the_same_way(
    table: dict[str, Any], field: str, value: object, says: str
) -> None:
    class Engine:
        pass

    error = _refused(lambda: GemProvider(Engine(), **table))  # type: ignore[arg-type]
    assert error.message.startswith(f"{field}: {says}")
    assert (error.field, error.value) == (field, value)


def test_variables_are_read_as_the_file_would_hold_them(plugins: Plugins) -> None:
    environ = {
        "ROCK_PLUGIN_GEM_ENVS_PER_SANDBOX": "4",
        "ROCK_PLUGIN_GEM_CPUS": "0.5",
        "ROCK_PLUGIN_GEM_IMAGE": "gem:1",
    }
    plugins.configure(plugin_tables({}, environ, plugins.names()))
    assert envhub.configured == GemOptions(envs_per_sandbox=4, cpus=0.5, image="gem:1")

    bad = plugin_tables({}, {"ROCK_PLUGIN_GEM_ENVS_PER_SANDBOX": "0"}, plugins.names())
    error = _refused(lambda: plugins.configure(bad))
    assert (error.message, error.field, error.value) == (
        "plugins.gem.envs_per_sandbox: expected an integer > 0, got '0'",
        "plugins.gem.envs_per_sandbox",
        "0",
    )


def test_every_key_has_its_documented_default() -> None:
    assert GemOptions.from_table({}) == GemOptions(
        image=None,
        envs_per_sandbox=32,
        memory="4g",
        cpus=2.0,
        timeout=300.0,
        start_timeout=300.0,
        warm_sandboxes=0,
        envhub_db=None,
    )
