"""The Docker runtime's settings are read by rock-core's converters (``rock_docker._options``):
from ``[engine.runtime_options]``, ``[plugins.docker]`` or ``ROCK_PLUGIN_DOCKER_<KEY>`` text, a
value is read as its type and a bad one is refused by the engine naming the setting and value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter
from rock_docker.runtime import DockerRuntime


@pytest.mark.parametrize(
    ("options", "field", "value", "said"),
    [
        (
            {"stop_timeout": "soon"},
            "stop_timeout",
            "soon",
            "stop_timeout: expected a number, got 'soon'",
        ),
        ({"api_timeout": 0}, "api_timeout", 0, "api_timeout: expected a number > 0, got 0"),
        (
            {"max_concurrency": "many"},
            "max_concurrency",
            "many",
            "max_concurrency: expected an integer, got 'many'",
        ),
        ({"rocklet_dir": 5}, "rocklet_dir", 5, "rocklet_dir: expected a string, got 5"),
        ({"init": "perhaps"}, "init", "perhaps", "init: expected true or false, got 'perhaps'"),
        (
            {"nofile_limit": True},
            "nofile_limit",
            True,
            "nofile_limit: expected an integer, got True",
        ),
    ],
)
def test_a_bad_option_is_refused_by_the_engine_naming_it(
    options: dict[str, Any], field: str, value: object, said: str
) -> None:
    with pytest.raises(InvalidParameter) as info:
        SandboxManager(EngineConfig(runtime_options=options))
    assert info.value.message.endswith(said)
    assert (info.value.field, info.value.value) == (field, value)


def test_options_given_as_text_are_read_as_their_types(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``ROCK_PLUGIN_DOCKER_*`` variables are text: ``"8"`` is the count 8, not a string to compare."""
    monkeypatch.setenv("ROCK_PLUGIN_DOCKER_MAX_CONCURRENCY", "8")
    monkeypatch.setenv("ROCK_PLUGIN_DOCKER_STOP_TIMEOUT", "2.5")
    monkeypatch.setenv("ROCK_PLUGIN_DOCKER_INIT", "false")
    monkeypatch.setenv("ROCK_PLUGIN_DOCKER_ROCKLET_DIR", str(tmp_path))
    runtime = SandboxManager(EngineConfig()).runtime
    assert isinstance(runtime, DockerRuntime)
    options = runtime.options
    assert (options.max_concurrency, options.stop_timeout, options.init, runtime.rocklet_dir) == (
        8,
        2.5,
        False,
        tmp_path,
    )
