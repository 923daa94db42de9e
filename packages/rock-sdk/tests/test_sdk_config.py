"""ROCK's configs, exception names, constants and import paths, as a ROCK user reaches them."""

from __future__ import annotations

import re

import pytest

from rock.sdk.common.constants import PID_PREFIX, PID_SUFFIX, RunModeType
from rock.sdk.common.exceptions import (
    BadRequestRockError,
    CommandRockError,
    InternalServerRockError,
    InvalidParameterRockException,
    RockException,
    SandboxNotFoundRockError,
    from_rock_exception,
    raise_for_code,
)
from rock.sdk.sandbox.client import RunMode, Sandbox, SandboxGroup
from rock.sdk.sandbox.config import BaseConfig, InvalidConfig, SandboxConfig, SandboxGroupConfig
from rock_core import errors as core_errors


def test_sandbox_config_has_rocks_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ROCK_BASE_URL", "ROCK_DEFAULT_CLUSTER", "ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    cfg = SandboxConfig()
    assert (cfg.image, cfg.image_os, cfg.auto_clear_seconds, cfg.startup_timeout) == (
        "python:3.11",
        "linux",
        300,
        180,
    )
    assert (cfg.memory, cfg.cpus, cfg.limit_cpus, cfg.disk) == ("8g", 2, None, "50G")
    assert (cfg.cluster, cfg.sandbox_id, cfg.auto_archive_seconds, cfg.auto_delete_seconds) == (
        "vpc-nt-a",
        None,
        None,
        None,
    )
    assert (cfg.num_gpus, cfg.accelerator_type, cfg.use_kata_runtime) == (None, None, False)
    assert (cfg.user_id, cfg.experiment_id, cfg.namespace) == (None, None, None)
    assert (cfg.registry_username, cfg.registry_password) == (None, None)
    assert cfg.base_url is None  # embedded mode
    assert (cfg.xrl_authorization, cfg.extra_headers) == (None, {})


def test_environment_variables_set_the_config_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCK_BASE_URL", "http://admin:8080")
    monkeypatch.setenv("ROCK_DEFAULT_CLUSTER", "local")
    monkeypatch.setenv("ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS", "42")
    cfg = SandboxConfig()
    assert (cfg.base_url, cfg.cluster, cfg.startup_timeout) == ("http://admin:8080", "local", 42.0)
    assert BaseConfig().base_url == "http://admin:8080"


@pytest.mark.parametrize(
    "field", ["auto_archive_seconds", "auto_delete_seconds", "auto_clear_seconds"]
)
def test_a_negative_lifetime_is_refused_naming_the_field_and_value(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field}.*-5") as info:
        SandboxConfig(**{field: -5})
    assert isinstance(info.value, BadRequestRockError)
    assert (info.value.field, info.value.value) == (field, -5)


def test_archive_and_delete_together_are_refused() -> None:
    with pytest.raises(
        ValueError, match="auto_archive_seconds and auto_delete_seconds cannot both be set"
    ):
        SandboxConfig(auto_archive_seconds=10, auto_delete_seconds=20)


def test_the_config_is_mutable_and_checks_what_is_assigned() -> None:
    cfg = SandboxConfig()
    cfg.image = "ubuntu:22.04"
    cfg.auto_delete_seconds = 300
    assert (cfg.image, cfg.auto_delete_seconds) == ("ubuntu:22.04", 300)
    with pytest.raises(ValueError, match="startup_timeout: expected a number > 0, got 0"):
        cfg.startup_timeout = 0
    with pytest.raises(ValueError, match="extra_headers"):
        cfg.extra_headers = {"X-Key": 1}  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        SandboxConfig(no_such_field=1)  # type: ignore[call-arg]


def test_group_config_defaults_and_checks() -> None:
    cfg = SandboxGroupConfig(image="python:3.11")
    assert (cfg.size, cfg.start_concurrency, cfg.start_retry_times) == (2, 2, 3)
    assert isinstance(cfg, SandboxConfig)
    with pytest.raises(ValueError, match="start_concurrency: expected an integer > 0, got 0"):
        SandboxGroupConfig(start_concurrency=0)
    group = SandboxGroup(SandboxGroupConfig(size=3))
    assert len(group.sandbox_list) == 3 and all(isinstance(s, Sandbox) for s in group.sandbox_list)


def test_exception_names_are_rocks_error_tree() -> None:
    assert RockException is core_errors.RockError
    assert BadRequestRockError is core_errors.BadRequestRockError
    assert SandboxNotFoundRockError is core_errors.SandboxNotFound
    assert InternalServerRockError is core_errors.InternalServerRockError
    assert CommandRockError is core_errors.CommandRockError
    assert issubclass(InvalidParameterRockException, BadRequestRockError)
    assert issubclass(SandboxNotFoundRockError, BadRequestRockError)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (4000, BadRequestRockError),
        (4004, SandboxNotFoundRockError),
        (5000, InternalServerRockError),
        (6000, CommandRockError),
    ],
)
def test_raise_for_code_raises_the_class_of_the_code(code: int, expected: type[Exception]) -> None:
    with pytest.raises(expected, match="boom") as info:
        raise_for_code(code, "boom")
    assert info.value.code == code


def test_raise_for_code_returns_for_success_and_none() -> None:
    assert raise_for_code(2000, "fine") is None
    assert raise_for_code(None, "fine") is None


def test_from_rock_exception_builds_rocks_error_payload() -> None:
    payload = from_rock_exception(BadRequestRockError("bad"))
    assert (payload.code, payload.failure_reason) == (4000, "bad")


def test_run_modes() -> None:
    assert RunMode.NORMAL == "normal" and RunMode.NOHUP == "nohup"
    assert RunModeType.__args__ == ("normal", "nohup")  # type: ignore[attr-defined]
    assert (PID_PREFIX, PID_SUFFIX) == ("PIDSTART", "PIDEND")


def test_rocks_import_paths_work() -> None:
    from rock.actions import (  # noqa: F401
        Action,
        BashAction,
        CloseBashSessionRequest,
        Command,
        CommandResponse,
        CreateBashSessionRequest,
        IsAliveResponse,
        Observation,
        ReadFileRequest,
        SandboxStatusResponse,
        UploadRequest,
        WriteFileRequest,
    )
    from rock.actions.sandbox.request import ChmodRequest, ChownRequest  # noqa: F401
    from rock.actions.sandbox.response import State  # noqa: F401

    assert Action is BashAction
    assert Command(command="pwd").timeout == 1200
    assert CreateBashSessionRequest().session == "default"
    assert Observation().exit_code is None


@pytest.mark.anyio
async def test_remote_mode_says_what_is_missing() -> None:
    sandbox = Sandbox(SandboxConfig(base_url="http://127.0.0.1:9"))  # nothing listens on port 9
    with pytest.raises(
        InternalServerRockError, match=r"127.0.0.1:9 is unreachable: is `rock admin start` running"
    ):
        await sandbox.start()
    await sandbox.stop()  # never raises, as ROCK


@pytest.mark.anyio
@pytest.mark.parametrize("call", ["arun", "get_status", "read_file_by_line_range"])
async def test_a_sandbox_that_was_never_started_says_so(call: str) -> None:
    sandbox = Sandbox(SandboxConfig())
    with pytest.raises(BadRequestRockError, match=r"call `await sandbox.start\(\)`"):
        await getattr(sandbox, call)("x") if call != "get_status" else await sandbox.get_status()
    assert sandbox.sandbox_id is None and sandbox.url is None


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"pids_limit": 0}, "pids_limit"),
        ({"pids_limit": True}, "pids_limit"),
        ({"cap_add": "NET_RAW"}, "cap_add"),
        ({"cap_add": [1]}, "cap_add[0]"),
        ({"network_group": 7}, "network_group"),
        ({"priority": 10}, "priority"),
        ({"priority": -1}, "priority"),
    ],
)
def test_hardening_fields_are_checked_naming_the_field(fields, field) -> None:
    with pytest.raises(InvalidConfig, match=rf"^{re.escape(field)}: ") as info:
        SandboxConfig(**fields)
    assert info.value.field == field


def test_hardening_fields_reach_the_start_request() -> None:
    config = SandboxConfig(pids_limit=64, cap_add=["NET_RAW"], network_group="pair", priority=8)
    request = Sandbox(config)._start_request()
    assert (request.pids_limit, request.cap_add, request.network_group, request.priority) == (
        64,
        ["NET_RAW"],
        "pair",
        8,
    )


@pytest.mark.parametrize(
    ("cls", "fields", "message", "field", "value"),
    [
        (SandboxConfig, {"image": 5}, "image: expected a string, got 5", "image", 5),
        (
            SandboxConfig,
            {"use_kata_runtime": "perhaps"},
            "use_kata_runtime: expected true or false, got 'perhaps'",
            "use_kata_runtime",
            "perhaps",
        ),
        (
            SandboxConfig,
            {"num_gpus": -1},
            "num_gpus: expected an integer >= 0, got -1",
            "num_gpus",
            -1,
        ),
        (
            SandboxConfig,
            {"startup_timeout": "soon"},
            "startup_timeout: expected a number, got 'soon'",
            "startup_timeout",
            "soon",
        ),
        (
            SandboxConfig,
            {"env": {"HOME": 1}},
            "env['HOME']: expected a string, got 1",
            "env['HOME']",
            1,
        ),
        (
            BaseConfig,
            {"extra_headers": ["X-Key"]},
            "extra_headers: expected an object, got ['X-Key']",
            "extra_headers",
            ["X-Key"],
        ),
        (SandboxGroupConfig, {"size": 0}, "size: expected an integer > 0, got 0", "size", 0),
        (
            SandboxGroupConfig,
            {"start_retry_times": 1.5},
            "start_retry_times: expected an integer, got 1.5",
            "start_retry_times",
            1.5,
        ),
    ],
)
def test_a_bad_config_value_names_the_field_and_the_value(
    cls, fields, message, field, value
) -> None:
    with pytest.raises(InvalidConfig) as info:
        cls(**fields)
    assert isinstance(info.value, ValueError)
    assert (info.value.message, info.value.field, info.value.value) == (message, field, value)


def test_config_values_are_read_as_a_start_request_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = SandboxGroupConfig(
        auto_clear_seconds="600", pids_limit="64", size="3", cap_add=("NET_RAW",)
    )
    assert (config.auto_clear_seconds, config.pids_limit, config.size, config.cap_add) == (
        600,
        64,
        3,
        ["NET_RAW"],
    )
    monkeypatch.setenv("ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS", "never")
    with pytest.raises(InvalidConfig) as info:
        SandboxConfig()
    assert (
        info.value.message == "ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS: expected a number, got 'never'"
    )
    assert (info.value.field, info.value.value) == ("ROCK_SANDBOX_STARTUP_TIMEOUT_SECONDS", "never")
