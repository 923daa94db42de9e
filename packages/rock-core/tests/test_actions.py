"""ROCK's wire models: names, defaults and the bodies ROCK's own clients send."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from rock_core import actions
from rock_core.actions import (
    Action,
    BashAction,
    BashObservation,
    ChmodRequest,
    ChownRequest,
    CloseBashSessionRequest,
    CloseSessionRequest,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    DownloadFileResponse,
    DownloadResponse,
    EnvStepResponse,
    FileUploadResponse,
    IsAliveResponse,
    Observation,
    ReadFileRequest,
    RockResponse,
    SandboxBashAction,
    SandboxCommand,
    SandboxCreateBashSessionRequest,
    SandboxStartRequest,
    SandboxStatusResponse,
    StateHistoryEntry,
    UploadMode,
    UploadRequest,
    UploadResponse,
    WriteFileResponse,
)
from rock_core.converters import structure_wire
from rock_core.errors import InvalidParameter
from rock_core.models import PullPolicy
from rock_core.states import Event, State, StateChange

# (model, required keyword arguments, expected defaults) — rock-spec §2.6 and §4.2.
DEFAULTS: list[tuple[type, dict[str, Any], dict[str, Any]]] = [
    (
        Command,
        {"command": "ls"},
        {"session_type": "bash", "timeout": 1200, "env": None, "cwd": None},
    ),
    (
        SandboxCommand,
        {"command": "ls", "sandbox_id": "s1"},
        {"shell": False, "check": False, "error_msg": "", "timeout": 1200},
    ),
    (
        CreateBashSessionRequest,
        {},
        {
            "session_type": "bash",
            "session": "default",
            "startup_source": [],
            "env_enable": False,
            "env": None,
            "remote_user": None,
        },
    ),
    (
        SandboxCreateBashSessionRequest,
        {"sandbox_id": "s1"},
        {"startup_timeout": 1.0, "max_read_size": 2000, "session": "default"},
    ),
    (
        BashAction,
        {"command": "ls"},
        {"action_type": "bash", "session": "default", "timeout": None, "check": "raise"},
    ),
    (
        SandboxBashAction,
        {"command": "ls", "sandbox_id": "s1"},
        {
            "is_interactive_command": False,
            "is_interactive_quit": False,
            "error_msg": "",
            "expect": [],
            "check": "raise",
        },
    ),
    (CloseBashSessionRequest, {}, {"session_type": "bash", "session": "default"}),
    (ReadFileRequest, {"path": "/a"}, {"encoding": None, "errors": None}),
    (UploadRequest, {"source_path": "a", "target_path": "b"}, {"upload_mode": UploadMode.AUTO}),
    (ChownRequest, {"remote_user": "u"}, {"paths": [], "recursive": False}),
    (ChmodRequest, {}, {"paths": [], "mode": "755", "recursive": False}),
    (
        SandboxStartRequest,
        {"image": "python:3.11"},
        {
            "image_os": "linux",
            "pull": PullPolicy.MISSING,
            "memory": "8g",
            "cpus": 2,
            "limit_cpus": None,
            "sandbox_id": None,
            "registry_username": None,
            "registry_password": None,
            "startup_timeout": None,
            "use_kata_runtime": False,
            "auto_archive_seconds": None,
            "auto_delete_seconds": None,
            "disk": "50G",
            "num_gpus": None,
            "accelerator_type": None,
            # None = the server's configured default, as ROCK does when the field is not sent
            "auto_clear_time_minutes": None,
        },
    ),
    (RockResponse, {}, {"status": "Success", "message": None, "error": None, "result": None}),
    (CommandResponse, {}, {"stdout": "", "stderr": "", "exit_code": None}),
    (
        BashObservation,
        {},
        {
            "session_type": "bash",
            "output": "",
            "exit_code": None,
            "failure_reason": "",
            "expect_string": "",
        },
    ),
    (CreateBashSessionResponse, {}, {"output": "", "session_type": "bash"}),
    (WriteFileResponse, {}, {"success": False, "message": ""}),
    (UploadResponse, {}, {"success": False, "message": "", "file_name": ""}),
    (DownloadFileResponse, {}, {"success": False, "message": ""}),
    (IsAliveResponse, {"is_alive": True}, {"message": ""}),
    (
        SandboxStatusResponse,
        {},
        {"is_alive": True, "state_history": [], "status": None, "port_mapping": None},
    ),
    (
        EnvStepResponse,
        {"observation": "o", "reward": 1.0, "terminated": False, "truncated": False},
        {"info": {}},
    ),
]


@pytest.mark.parametrize(
    ("cls", "required", "defaults"), DEFAULTS, ids=lambda v: getattr(v, "__name__", "")
)
def test_rock_defaults(cls: type, required: dict[str, Any], defaults: dict[str, Any]) -> None:
    obj = cls(**required)
    for name, expected in defaults.items():
        assert getattr(obj, name) == expected, name


def test_rock_aliases() -> None:
    assert Action is BashAction
    assert Observation is BashObservation
    assert CloseSessionRequest is CloseBashSessionRequest
    assert FileUploadResponse is UploadResponse
    assert DownloadResponse is DownloadFileResponse


def test_everything_exported_exists() -> None:
    missing = [name for name in actions.__all__ if not hasattr(actions, name)]
    assert missing == []


def test_construction_is_keyword_only_like_pydantic() -> None:
    with pytest.raises(TypeError):
        Command("ls")  # type: ignore[misc]
    assert Command(command=["ls", "-l"]).command == ["ls", "-l"]


@pytest.mark.parametrize(
    "cls",
    [SandboxCommand, SandboxBashAction, SandboxCreateBashSessionRequest],
    ids=lambda c: c.__name__,
)
def test_server_variants_need_a_sandbox_id(cls: type) -> None:
    kwargs = {"command": "ls"} if cls is not SandboxCreateBashSessionRequest else {}
    with pytest.raises(TypeError, match="sandbox_id"):
        cls(**kwargs)
    with pytest.raises(InvalidParameter) as info:
        cls(sandbox_id="  ", **kwargs)
    assert info.value.field == "sandbox_id"
    assert cls(sandbox_id=" s1 ", **kwargs).sandbox_id == "s1"  # stripped, as ROCK's NonBlankStr


def test_server_variants_are_the_client_models_plus_fields() -> None:
    assert issubclass(SandboxCommand, Command)
    assert issubclass(SandboxBashAction, BashAction)
    client = {f.name for f in attrs.fields(BashAction)}
    server = {f.name for f in attrs.fields(SandboxBashAction)}
    assert server - client == {
        "sandbox_id",
        "is_interactive_command",
        "is_interactive_quit",
        "error_msg",
        "expect",
    }


def test_is_alive_response_is_truthy_when_alive() -> None:
    assert IsAliveResponse(is_alive=True)
    assert not IsAliveResponse(is_alive=False, message="connection refused")


def test_upload_mode_accepts_text() -> None:
    assert (
        UploadRequest(source_path="a", target_path="b", upload_mode="oss").upload_mode
        is UploadMode.OSS
    )  # type: ignore[arg-type]
    assert [m.value for m in UploadMode] == ["auto", "oss", "direct"]


def test_start_request_hides_the_registry_password() -> None:
    assert "s3cret" not in repr(SandboxStartRequest(image="x", registry_password="s3cret"))


def test_state_history_entry_from_a_state_change() -> None:
    at = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    change = StateChange(
        from_state=State.RUNNING, to_state=State.STOPPED, event=Event.STOP, timestamp=at
    )
    entry = StateHistoryEntry.from_change(change)
    assert entry == StateHistoryEntry(
        from_state=State.RUNNING, to_state=State.STOPPED, event="stop", timestamp=at
    )


# --- bodies a real ROCK client sends (rock-spec §2.3) -----------------------------------------


def test_rock_sdk_start_body_is_accepted() -> None:
    # Sandbox.start() of rl-rock 1.11 sends exactly these keys, auto_clear_time included.
    body = {
        "image": "python:3.11",
        "image_os": "linux",
        "auto_clear_time": 5,
        "auto_clear_time_minutes": 5,
        "startup_timeout": 180,
        "memory": "8g",
        "cpus": 2,
        "num_gpus": None,
        "accelerator_type": None,
        "registry_username": None,
        "registry_password": None,
        "use_kata_runtime": False,
        "limit_cpus": None,
        "sandbox_id": None,
        "auto_archive_seconds": None,
        "auto_delete_seconds": 300,
        "disk": "50G",
    }
    req = structure_wire(body, SandboxStartRequest)
    assert (
        req.auto_clear_time == 5 and req.auto_delete_seconds == 300 and req.startup_timeout == 180.0
    )


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (
            SandboxCommand,
            {"command": ["pwd"], "sandbox_id": "s1", "timeout": 1200, "cwd": "/root", "env": None},
        ),
        (
            SandboxBashAction,
            {
                "action_type": "bash",
                "session": "default",
                "command": "echo hi",
                "sandbox_id": "s1",
                "check": "raise",
                "timeout": None,
            },
        ),
        (
            SandboxCreateBashSessionRequest,
            {
                "sandbox_id": "s1",
                "session_type": "bash",
                "session": "bash-1",
                "startup_source": [],
                "env_enable": False,
                "env": None,
                "remote_user": None,
            },
        ),
        (
            actions.SandboxCloseBashSessionRequest,
            {"session_type": "bash", "session": "bash-1", "sandbox_id": "s1"},
        ),
        (
            actions.SandboxReadFileRequest,
            {"path": "/tmp/a", "encoding": None, "errors": None, "sandbox_id": "s1"},
        ),
        (
            actions.SandboxWriteFileRequest,
            {"content": "hello world", "path": "/tmp/a", "sandbox_id": "s1"},
        ),
        (actions.SandboxIdRequest, {"sandbox_id": "s1"}),
        (actions.EnvMakeRequest, {"env_id": "game:Sokoban-v0-easy"}),
        (actions.EnvResetRequest, {"sandbox_id": "s1", "seed": 42}),
        (actions.EnvStepRequest, {"sandbox_id": "s1", "action": "\\boxed{up}"}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_rock_sdk_bodies_are_accepted(cls: type, body: dict[str, Any]) -> None:
    obj = structure_wire(body, cls)
    for key, value in body.items():
        assert getattr(obj, key) == value
