"""The Nomad runtime's settings are read by rock-core's converters (``rock_nomad._options``):
a bad value of ``[plugins.nomad]``, ``[engine.runtime_options]`` or a ``ROCK_PLUGIN_NOMAD_*``
variable stops the engine's construction naming ``plugins.nomad.<key>`` and the value."""

from __future__ import annotations

from typing import Any

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter
from rock_nomad.runtime import NomadRuntime


def _engine(options: dict[str, Any]) -> SandboxManager:
    return SandboxManager(EngineConfig(runtime="nomad", plugin_options={"nomad": options}))


@pytest.mark.parametrize(
    ("options", "key", "value", "said"),
    [
        ({"priority": 101}, "priority", 101, "expected a whole number 1..100, got 101"),
        ({"mhz_per_cpu": 0}, "mhz_per_cpu", 0, "expected a whole number >= 1, got 0"),
        ({"api_timeout": "soon"}, "api_timeout", "soon", "expected a number, got 'soon'"),
        ({"event_stream": "maybe"}, "event_stream", "maybe", "expected true or false, got 'maybe'"),
        ({"datacenters": 5}, "datacenters", 5, "expected a list, got 5"),
        (
            {"job_prefix": "a b"},
            "job_prefix",
            "a b",
            "expected 1 to 32 letters, digits, '-', '_' or '~'",
        ),
        (
            {"sandbox_network": "bridge"},
            "sandbox_network",
            "bridge",
            "not Docker's own bridge, host or none, got 'bridge'",
        ),
        ({"namespace": 7}, "namespace", 7, "expected a string, got 7"),
    ],
)
def test_a_bad_setting_is_refused_by_the_engine_naming_it(
    options: dict[str, Any], key: str, value: object, said: str
) -> None:
    with pytest.raises(InvalidParameter) as info:
        _engine(options)
    assert info.value.message.startswith(f"plugins.nomad.{key}: ")
    assert said in info.value.message
    assert (info.value.field, info.value.value) == (f"plugins.nomad.{key}", value)


def test_every_bad_setting_is_named_at_once() -> None:
    with pytest.raises(InvalidParameter) as info:
        _engine({"priority": "high", "kill_timeout": "late"})
    assert info.value.field == "plugins.nomad.priority, plugins.nomad.kill_timeout"


def test_settings_given_as_text_are_read_as_their_types(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, text in {
        "PRIORITY": "70",
        "DATACENTERS": "dc1, dc2",
        "EVENT_STREAM": "off",
        "NOFILE_LIMIT": "4096",
        "KILL_TIMEOUT": "2.5",
        "TLS_SKIP_VERIFY": "yes",
    }.items():
        monkeypatch.setenv(f"ROCK_PLUGIN_NOMAD_{key}", text)
    runtime = _engine({}).runtime
    assert isinstance(runtime, NomadRuntime)
    assert (
        runtime.options.priority,
        runtime.options.datacenters,
        runtime.options.event_stream,
        runtime.options.nofile_limit,
        runtime.options.kill_timeout,
        runtime.options.tls_skip_verify,
    ) == (70, ("dc1", "dc2"), False, 4096, 2.5, True)
