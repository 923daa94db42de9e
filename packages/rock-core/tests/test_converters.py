"""The wire and store converters: round trips of every model, and one clear error for bad input."""

from __future__ import annotations

import enum
import functools
import json
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal, Union, get_args, get_origin

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rock_core import actions, models
from rock_core.actions import (
    BashAction,
    Command,
    CommandResponse,
    IsAliveResponse,
    RockResponse,
    SandboxCommand,
    SandboxStartRequest,
    SandboxStatusResponse,
)
from rock_core.converters import (
    spec_from_start_request,
    structure_store,
    structure_wire,
    unstructure_store,
    unstructure_wire,
)
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.models import Phase, PhaseStatus, PullPolicy, SandboxRecord, SandboxSpec
from rock_core.sizes import GiB, MiB
from rock_core.states import Event, State, StateChange

# ---------------------------------------------------------------------------------------------
# A hypothesis strategy for any annotated attrs class, built from its fields' types. An unknown
# type is an error rather than a skipped field, so a new field type cannot go untested.

_ZONES = st.sampled_from(
    [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]
)

_NEWTYPES: dict[Any, st.SearchStrategy[Any]] = {
    models.NonBlankStr: st.text(min_size=1, max_size=12).map(str.strip).filter(bool),
    models.SizeStr: st.builds(
        lambda n, unit: f"{n}{unit}",
        st.integers(min_value=1, max_value=4096),
        st.sampled_from(
            ["", "b", "k", "K", "kb", "Ki", "KiB", "m", "M", "mb", "g", "G", "Gi", "GB", "t"]
        ),
    ),
    models.NonNegativeInt: st.integers(min_value=0, max_value=10**7),
    models.PositiveInt: st.integers(min_value=1, max_value=2**42),
    models.PositiveFloat: st.floats(min_value=0.001, max_value=1e5, allow_nan=False),
    models.Port: st.integers(min_value=1, max_value=65535),
    models.NonNegativeFloat: st.floats(min_value=0, max_value=1e5, allow_nan=False),
    models.Priority: st.integers(min_value=models.PRIORITY_MIN, max_value=models.PRIORITY_MAX),
}

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


# Strategies are built once per type (cached): the same strategies, not rebuilt for each example.
@functools.cache
def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy producing valid values of the annotated type ``tp``."""
    if tp is Any:
        return _JSON
    if tp in _NEWTYPES:
        return _NEWTYPES[tp]
    simple = {
        str: st.text(max_size=12),
        int: st.integers(min_value=-(2**53), max_value=2**53),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        type(None): st.none(),
        # Real timestamps: far-off years overflow when shifted to UTC, which no sandbox meets.
        datetime: st.datetimes(
            min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=_ZONES
        ),
    }
    if tp in simple:
        return simple[tp]
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in args])
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin is tuple and len(args) == 2 and args[1] is ...:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin is tuple:  # a fixed length: (host, port)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=3)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if attrs.has(tp):
        return instances_of(tp)
    raise TypeError(f"no strategy for {tp!r}: teach strategy_for about it")


@functools.cache
def instances_of(cls: type) -> st.SearchStrategy[Any]:
    """Instances of the attrs class ``cls``; fields with defaults are sometimes left out."""
    hints = typing.get_type_hints(cls)
    required, optional = {}, {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        target = required if field.default is attrs.NOTHING else optional
        target[field.alias] = strategy_for(hints[field.name])

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        kwargs = draw(st.fixed_dictionaries(required, optional=optional))
        try:
            return cls(**kwargs)
        except InvalidParameter:
            # Cross-field rules (e.g. not both post-stop policies) that types cannot express.
            assume(False)

    return build()


# Every attrs class exported by rock_core.actions; test_every_wire_model_is_round_tripped keeps
# this list complete.
WIRE_MODELS = [
    actions.InterruptSessionRequest,
    actions.InterruptSessionResponse,
    actions.ListDirRequest,
    actions.StatRequest,
    actions.StatResponse,
    actions.ProcessInfo,
    actions.DirEntry,
    actions.ListDirResponse,
    actions.Command,
    actions.SandboxCommand,
    actions.CreateBashSessionRequest,
    actions.SandboxCreateBashSessionRequest,
    actions.BashAction,
    actions.SandboxBashAction,
    actions.CloseBashSessionRequest,
    actions.SandboxCloseBashSessionRequest,
    actions.ReadFileRequest,
    actions.SandboxReadFileRequest,
    actions.WriteFileRequest,
    actions.SandboxWriteFileRequest,
    actions.UploadRequest,
    actions.ChownRequest,
    actions.ChmodRequest,
    actions.SandboxStartRequest,
    actions.WarmupRequest,
    actions.WarmPoolStatus,
    actions.WarmPoolsResponse,
    actions.SandboxIdRequest,
    actions.BatchSandboxStatusRequest,
    actions.WaitAnyRequest,
    actions.StartBatchItem,
    actions.StartBatchRequest,
    actions.EnvMakeRequest,
    actions.EnvResetRequest,
    actions.EnvStepRequest,
    actions.EnvCloseRequest,
    actions.EnvListRequest,
    actions.RockResponse,
    actions.SandboxResponse,
    actions.CommandResponse,
    actions.BashObservation,
    actions.CreateBashSessionResponse,
    actions.CloseBashSessionResponse,
    actions.ReadFileResponse,
    actions.WriteFileResponse,
    actions.UploadResponse,
    actions.IsAliveResponse,
    actions.ExecuteBashSessionResponse,
    actions.ChownResponse,
    actions.ChmodResponse,
    actions.DownloadFileResponse,
    actions.CloseResponse,
    actions.SandboxStartResponse,
    actions.StateHistoryEntry,
    actions.SandboxStatusResponse,
    actions.BatchSandboxStatusResponse,
    actions.WaitAnyResponse,
    actions.StartBatchOutcome,
    actions.StartBatchResponse,
    actions.SandboxListResponse,
    actions.EnvMakeResponse,
    actions.EnvResetResponse,
    actions.EnvStepResponse,
    actions.EnvCloseResponse,
    actions.EnvListResponse,
    actions.SnapshotRequest,
    actions.SnapshotNameRequest,
    actions.SnapshotInfo,
    actions.SnapshotListResponse,
    actions.CommitRequest,
    actions.CommitStatusResponse,
    actions.ForkRequest,
    actions.ResetRequest,
    actions.EgressRequest,
    actions.ForkResponse,
]


def test_every_wire_model_is_round_tripped() -> None:
    exported = {getattr(actions, name) for name in actions.__all__}
    attrs_classes = {obj for obj in exported if isinstance(obj, type) and attrs.has(obj)}
    assert attrs_classes == set(WIRE_MODELS)


def assert_plain_json(value: Any, path: str = "$") -> None:
    """``value`` is made only of JSON's own types (no enum members, tuples or datetimes)."""
    assert type(value) in (dict, list, str, int, float, bool, type(None)), (
        f"{path}: {type(value).__name__}"
    )
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str, f"{path}: key {key!r}"
            assert_plain_json(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            assert_plain_json(item, f"{path}[{index}]")


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("cls", WIRE_MODELS, ids=lambda c: c.__name__)
@_SETTINGS
@given(data=st.data())
def test_wire_round_trip(cls: type, data: st.DataObject) -> None:
    obj = data.draw(instances_of(cls))
    raw = unstructure_wire(obj)
    assert_plain_json(raw)
    assert structure_wire(raw, cls) == obj


@_SETTINGS
@given(record=instances_of(SandboxRecord))
def test_store_round_trip_of_records(record: SandboxRecord) -> None:
    raw = unstructure_store(record)
    assert_plain_json(raw)
    assert structure_store(json.loads(json.dumps(raw)), SandboxRecord) == record


@_SETTINGS
@given(status=instances_of(models.RuntimeStatus))
def test_store_round_trip_of_runtime_status(status: models.RuntimeStatus) -> None:
    assert structure_store(unstructure_store(status), models.RuntimeStatus) == status


# ---------------------------------------------------------------------------------------------
# The store: a record with history, exactly; unknown keys skipped; a bad blob is rock's fault

T0 = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


def _record_with_history() -> SandboxRecord:
    spec = SandboxSpec(
        image="python:3.11",
        memory=2 * GiB,
        cpus=0.5,
        disk=None,
        auto_delete_seconds=300,
        env={"A": "1"},
        metadata={"team": "rl"},
        user_id="u1",
        runtime_options={"use_kata_runtime": True, "docker_args": ["--init"]},
    )
    history = (
        StateChange(
            from_state=State.PENDING, to_state=State.RUNNING, event=Event.ALIVE, timestamp=T0
        ),
        StateChange(
            from_state=State.RUNNING,
            to_state=State.STOPPED,
            event=Event.STOP,
            timestamp=T0 + timedelta(minutes=5),
        ),
    )
    return SandboxRecord(
        sandbox_id="0123abcd",
        spec=spec,
        create_time=T0 - timedelta(seconds=3),
        state=State.STOPPED,
        phases={
            "image_pull": Phase(PhaseStatus.SUCCESS, "use cached image, skip image pull", T0, T0),
            "docker_run": Phase(PhaseStatus.SUCCESS, "docker run success"),
        },
        port_mapping={22555: 32768, 8080: 32769, 22: 32770},
        host_name="worker-1",
        host_ip="127.0.0.1",
        runtime="docker",
        start_time=T0,
        stop_time=T0 + timedelta(minutes=5),
        auto_transition_state=State.DELETED,
        auto_transition_time=T0 + timedelta(minutes=10),
        state_history=history,
        reason="container exited with code 137 (OOM killed)",
        notes=("disk limit not enforced: storage driver overlay2 lacks project quota",),
    )


def test_store_round_trip_of_a_record_with_history() -> None:
    record = _record_with_history()
    raw = unstructure_store(record)
    assert_plain_json(raw)
    assert raw["state"] == "stopped"
    assert raw["port_mapping"] == {"22555": 32768, "8080": 32769, "22": 32770}
    assert raw["state_history"][1] == {
        "from_state": "running",
        "to_state": "stopped",
        "event": "stop",
        "timestamp": "2025-03-04T05:11:07.891011+00:00",
    }
    assert raw["phases"]["docker_run"] == {
        "status": "success",
        "message": "docker run success",
        "started_at": None,
        "completed_at": None,
    }
    back = structure_store(json.loads(json.dumps(raw)), SandboxRecord)
    assert back == record
    assert back.state_history[1].event is Event.STOP
    assert isinstance(back.state_history, tuple) and isinstance(back.notes, tuple)


def test_store_skips_keys_it_does_not_know() -> None:
    raw = unstructure_store(_record_with_history())
    raw["added_by_a_newer_rock"] = {"x": 1}
    raw["spec"]["gpu_profile"] = "a100"
    raw["phases"]["image_pull"]["progress"] = 0.5
    del raw["notes"]  # written by an older rock: the default applies
    back = structure_store(raw, SandboxRecord)
    assert back.spec.image == "python:3.11"
    assert back.notes == ()


def test_an_unreadable_stored_blob_is_an_internal_error_naming_the_path() -> None:
    raw = unstructure_store(_record_with_history())
    raw["state"] = "exploded"
    raw["spec"]["memory"] = "lots"
    with pytest.raises(InternalServerRockError) as info:
        structure_store(raw, SandboxRecord)
    message = str(info.value)
    assert message.startswith("stored SandboxRecord is unreadable: ")
    assert "spec.memory: expected an integer, got 'lots'" in message
    assert (
        "state: expected one of 'pending', 'running', 'stopped', 'archiving', 'archived', 'deleted'"
        in message
    )


# ---------------------------------------------------------------------------------------------
# The wire: JSON shapes


def test_wire_writes_json_shapes() -> None:
    status = SandboxStatusResponse(
        sandbox_id="s1",
        state=State.RUNNING,
        status={"image_pull": Phase(PhaseStatus.SUCCESS, "ok")},
        port_mapping={22555: 40001},
        start_time=T0,
    )
    raw = unstructure_wire(status)
    assert_plain_json(raw)
    assert raw["state"] == "running"
    assert raw["status"] == {
        "image_pull": {
            "status": "success",
            "message": "ok",
            "started_at": None,
            "completed_at": None,
        }
    }
    assert raw["port_mapping"] == {"22555": 40001}
    assert raw["start_time"] == "2025-03-04T05:06:07.891011+00:00"


def test_wire_reads_port_maps_with_string_keys() -> None:
    status = structure_wire(
        {"port_mapping": {"22555": 40001, "8080": "40002"}}, SandboxStatusResponse
    )
    assert status.port_mapping == {22555: 40001, 8080: 40002}


def test_envelope_carries_a_model_as_json() -> None:
    raw = unstructure_wire(RockResponse(result=CommandResponse(stdout="/root\n", exit_code=0)))
    assert raw == {
        "status": "Success",
        "message": None,
        "error": None,
        "result": {
            "stdout": "/root\n",
            "stderr": "",
            "exit_code": 0,
            "wall_time": None,
            "cpu_time": None,
            "max_rss_bytes": None,
            "timed_out": False,
        },
    }
    envelope = structure_wire(raw, RockResponse)
    assert structure_wire(envelope.result, CommandResponse) == CommandResponse(
        stdout="/root\n", exit_code=0
    )


def test_wire_accepts_numbers_and_booleans_written_as_text() -> None:
    # pydantic (ROCK's server) accepts these; ROCK's SDK sends booleans as "True"/"False" in queries.
    req = structure_wire(
        {"image": "x", "cpus": "1.5", "auto_delete_seconds": "60"}, SandboxStartRequest
    )
    assert (req.cpus, req.auto_delete_seconds) == (1.5, 60)
    assert structure_wire({"is_alive": "True"}, IsAliveResponse).is_alive is True
    assert structure_wire({"is_alive": "false"}, IsAliveResponse).is_alive is False


@pytest.mark.parametrize(
    ("cls", "body", "expected"),
    [
        (Command, {"command": 5}, "command: expected a string or a list of strings, got 5"),
        (
            Command,
            {"command": ["ls", 3]},
            "command: expected a string or a list of strings, got ['ls', 3]",
        ),
        (BashAction, {"command": "ls", "session": 5}, "session: expected a string, got 5"),
        (
            BashAction,
            {"command": "ls", "check": "maybe"},
            "check: expected one of 'silent', 'raise', 'ignore', got 'maybe'",
        ),
        (
            BashAction,
            {"command": "ls", "timeout": "soon"},
            "timeout: expected a number, got 'soon'",
        ),
        (IsAliveResponse, {"is_alive": "no"}, "is_alive: expected true or false, got 'no'"),
        (IsAliveResponse, {"is_alive": 2}, "is_alive: expected true or false, got 2"),
        (
            SandboxStartRequest,
            {"image": "x", "pull": "sometimes"},
            "pull: expected one of 'missing', 'always', 'never', got 'sometimes'",
        ),
        (
            SandboxStartRequest,
            {"image": "x", "num_gpus": True},
            "num_gpus: expected an integer, got True",
        ),
        (SandboxStartRequest, {"image": "x", "cpus": 0}, "cpus: expected a number > 0, got 0"),
        (
            SandboxStartRequest,
            {"image": "x", "startup_timeout": "inf"},
            "startup_timeout: expected a number, got 'inf'",
        ),
        (
            SandboxStartRequest,
            {"image": "x", "limit_cpus": "-1"},
            "limit_cpus: expected a number > 0, got '-1'",
        ),
        (
            actions.BatchSandboxStatusRequest,
            {"sandbox_ids": "s1"},
            "sandbox_ids: expected a list, got 's1'",
        ),
        (
            actions.CreateBashSessionRequest,
            {"env": ["A=1"]},
            "env: expected an object, got ['A=1']",
        ),
        (Command, "ls", "expected an object, got 'ls'"),
    ],
)
def test_wire_is_strict_about_types(cls: type, body: Any, expected: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        structure_wire(body, cls)
    assert str(info.value) == f"invalid parameter: {expected}"


def test_one_bad_field_sets_field_and_value() -> None:
    with pytest.raises(InvalidParameter) as info:
        structure_wire({"image": "x", "memory": "8x"}, SandboxStartRequest)
    err = info.value
    assert str(err) == (
        "invalid parameter: memory: invalid size '8x' "
        "(expected a number with an optional unit b, k, m, g, t, like '8g')"
    )
    assert (err.field, err.value) == ("memory", "8x")


def test_every_bad_field_is_named_in_one_error() -> None:
    body = {
        "image": "python:3.11",
        "memory": "8x",
        "cpus": "abc",
        "sandbox_id": "   ",
        "auto_delete_seconds": -1,
        "env": {"A": 1},
        "foo": 1,
        "bar": None,
    }
    with pytest.raises(InvalidParameter) as info:
        structure_wire(body, SandboxStartRequest)
    err = info.value
    assert str(err) == (
        "invalid parameter: "
        "memory: invalid size '8x' (expected a number with an optional unit b, k, m, g, t, like '8g'); "
        "cpus: expected a number, got 'abc'; "
        "sandbox_id: must not be blank; "
        "auto_delete_seconds: expected an integer >= 0, got -1; "
        "env['A']: expected a string, got 1; "
        "extra field 'bar' not allowed; "
        "extra field 'foo' not allowed"
    )
    assert err.field == "memory, cpus, sandbox_id, auto_delete_seconds, env['A']"
    assert err.code == InvalidParameter.code


def test_missing_fields_and_blank_ids_on_a_server_variant() -> None:
    with pytest.raises(InvalidParameter) as info:
        structure_wire({"sandbox_id": "", "shell": "yes"}, SandboxCommand)
    assert str(info.value) == (
        "invalid parameter: command: required field missing; "
        "shell: expected true or false, got 'yes'; sandbox_id: must not be blank"
    )


def test_nested_errors_carry_their_path() -> None:
    body = {
        "status": {"docker_run": {"status": "bogus", "message": "x", "extra": 1}},
        "port_mapping": {"ssh": 22, "22555": 70000},
        "state_history": [
            {
                "from_state": "pending",
                "to_state": "running",
                "event": "alive",
                "timestamp": "2025-01-01T00:00:00Z",
            },
            {
                "from_state": "running",
                "to_state": "gone",
                "event": "stop",
                "timestamp": "yesterday",
            },
        ],
    }
    with pytest.raises(InvalidParameter) as info:
        structure_wire(body, SandboxStatusResponse)
    assert str(info.value) == (
        "invalid parameter: "
        "status['docker_run'].status: expected one of 'waiting', 'running', 'success', 'failed', 'timeout', "
        "got 'bogus'; "
        "status['docker_run']: extra field 'extra' not allowed; "
        "port_mapping['ssh']: invalid key: expected an integer, got 'ssh'; "
        "port_mapping['22555']: expected a port number 1..65535, got 70000; "
        "state_history[1].to_state: expected one of 'pending', 'running', 'stopped', 'archiving', 'archived', "
        "'deleted', got 'gone'; "
        "state_history[1].timestamp: expected an ISO 8601 timestamp, got 'yesterday'"
    )


def test_a_client_can_read_a_newer_servers_responses() -> None:
    body = {"is_alive": True, "message": "", "code": 2000, "added_later": [1]}
    with pytest.raises(InvalidParameter, match="extra field 'added_later' not allowed"):
        structure_wire(body, IsAliveResponse)
    assert structure_wire(body, IsAliveResponse, forbid_extra_keys=False) == IsAliveResponse(
        is_alive=True
    )


def test_start_request_with_both_policies_passes_the_wire_but_not_the_spec() -> None:
    req = structure_wire(
        {"image": "x", "auto_archive_seconds": 60, "auto_delete_seconds": 0}, SandboxStartRequest
    )
    with pytest.raises(InvalidParameter) as info:
        spec_from_start_request(req)
    assert str(info.value) == (
        "invalid parameter: auto_archive_seconds, auto_delete_seconds: cannot both be set (got 60 and 0); choose one"
    )


# ---------------------------------------------------------------------------------------------
# From a start request to a spec


def test_spec_from_a_rock_sdk_start_request() -> None:
    req = structure_wire(
        {
            "image": " python:3.11 ",
            "auto_clear_time": 5,
            "auto_clear_time_minutes": 5,
            "startup_timeout": 180,
            "memory": "512m",
            "cpus": 0.5,
            "limit_cpus": 1,
            "disk": "20G",
            "pull": "never",
            "sandbox_id": "my-box",
            "registry_username": "me",
            "registry_password": "pw",
            "auto_delete_seconds": 300,
            "num_gpus": 1,
            "accelerator_type": "T4",
        },
        SandboxStartRequest,
    )
    spec = spec_from_start_request(
        req, user_id="u1", experiment_id="e1", namespace="ns", cluster="c1"
    )
    assert spec == SandboxSpec(
        image="python:3.11",
        memory=512 * MiB,
        cpus=0.5,
        limit_cpus=1.0,
        disk=20 * GiB,
        num_gpus=1,
        accelerator_type="T4",
        pull=PullPolicy.NEVER,
        startup_timeout=180.0,
        auto_clear_seconds=300,
        auto_delete_seconds=300,
        registry_username="me",
        registry_password="pw",
        user_id="u1",
        experiment_id="e1",
        namespace="ns",
        cluster="c1",
        sandbox_id="my-box",
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"auto_clear_time": 7}, 420),
        ({"auto_clear_time_minutes": 3, "auto_clear_time": 7}, 180),
        ({"auto_clear_seconds": 90, "auto_clear_time_minutes": 3}, 90),
        ({"auto_clear_time_minutes": 0}, 0),
    ],
)
def test_idle_timeout_precedence(fields: dict[str, int], expected: int | None) -> None:
    spec = spec_from_start_request(SandboxStartRequest(image="x", **fields))
    assert spec.auto_clear_seconds == expected


def test_spec_defaults_from_an_empty_request() -> None:
    spec = spec_from_start_request(structure_wire({"image": "python:3.11"}, SandboxStartRequest))
    assert (spec.memory, spec.cpus, spec.disk) == (8 * GiB, 2.0, 50 * GiB)
    assert spec.env == {} and spec.runtime_options == {}


def test_spec_keeps_env_metadata_and_kata() -> None:
    req = SandboxStartRequest(
        image="x", env={"A": "1"}, metadata={"k": "v"}, use_kata_runtime=True, disk=None
    )
    spec = spec_from_start_request(req)
    assert spec.env == {"A": "1"} and spec.metadata == {"k": "v"}
    assert spec.runtime_options == {"use_kata_runtime": True}
    assert spec.disk is None


def test_spec_lists_every_problem() -> None:
    req = SandboxStartRequest(
        image="x", memory="0", disk="0k", auto_archive_seconds=1, auto_delete_seconds=2
    )
    with pytest.raises(InvalidParameter) as info:
        spec_from_start_request(req)
    assert str(info.value) == (
        "invalid parameter: memory: invalid size '0' (must be greater than zero); "
        "disk: invalid size '0k' (must be greater than zero); "
        "auto_archive_seconds, auto_delete_seconds: cannot both be set (got 1 and 2); choose one"
    )
    assert info.value.field == "memory, disk, auto_archive_seconds, auto_delete_seconds"


# -- hardening fields of a start request ---------------------------------------------------------


def test_pids_limit_capabilities_and_network_group_reach_the_spec() -> None:
    request = SandboxStartRequest(
        image="python:3.11",
        pids_limit=128,
        cap_add=["net_raw", "CAP_SYS_PTRACE", "NET_RAW"],
        network_group="g-1",
    )
    spec = spec_from_start_request(request)
    assert spec.pids_limit == 128
    assert spec.cap_add == ("NET_RAW", "SYS_PTRACE")  # upper case, without CAP_, each once
    assert spec.runtime_options == {"network_group": "g-1"}
    assert structure_wire(unstructure_wire(request), SandboxStartRequest) == request


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cap_add": ["FLY"]}, "cap_add", "unknown capability 'FLY'"),
        ({"cap_add": "NET_RAW"}, "cap_add", "expected a list of capability names"),
        ({"network_group": "bad name!"}, "network_group", "expected a name of letters"),
        (
            {"network_group": "g", "network": "host"},
            "network_group",
            "on network 'host' cannot join a network group",
        ),
    ],
)
def test_bad_hardening_fields_are_refused_naming_the_field(
    fields: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidParameter, match=says) as info:
        spec_from_start_request(SandboxStartRequest(image="python:3.11", **fields))
    assert field in str(info.value.field)


def test_a_pids_limit_below_one_is_refused_on_the_wire() -> None:
    with pytest.raises(InvalidParameter, match="pids_limit"):
        structure_wire({"image": "python:3.11", "pids_limit": 0}, SandboxStartRequest)


def test_the_rocklet_secret_is_stored_but_never_shown() -> None:
    record = SandboxRecord(
        sandbox_id="s",
        spec=SandboxSpec(image="python:3.11"),
        create_time=datetime.now(UTC),
        rocklet_token="very-secret",
        security={"pids_limit": 4096},
    )
    assert "very-secret" not in repr(record)
    assert structure_store(unstructure_store(record), SandboxRecord) == record


# ---------------------------------------------------------------------------------------------
# The status's hand-written wire form (rock_core._status_wire) is the generated one's JSON


@_SETTINGS
@given(status=instances_of(SandboxStatusResponse))
def test_a_status_answers_the_same_json_as_the_generated_form(
    status: SandboxStatusResponse,
) -> None:
    from rock_core.converters import make_converter

    generated = make_converter(forbid_extra_keys=True)  # without the hand-written hook
    assert unstructure_wire(status) == generated.unstructure(status)
    assert json.dumps(unstructure_wire(status)) == json.dumps(generated.unstructure(status))
    many = actions.WaitAnyResponse(statuses=[status, status], unknown=["x"], watch="w")
    assert unstructure_wire(many) == generated.unstructure(many)


def test_a_status_with_values_beyond_plain_json_answers_the_generated_form() -> None:
    from rock_core.converters import make_converter

    generated = make_converter(forbid_extra_keys=True)
    status = SandboxStatusResponse(
        sandbox_id="s",
        status={"image_pull": Phase(status=PhaseStatus.SUCCESS, started_at=T0)},
        state=State.RUNNING,
        port_mapping={22555: 40000},
        metadata={"team": "rl"},
        security={"capabilities": ("CHOWN",), "pull": PullPolicy.ALWAYS, "n": {"a": [T0]}},
        usage={"sampled_at": T0, "cpu_percent": 1.5},
        egress={"allow": [{"host": "example.org", "ports": (443,)}]},
        notes=["a"],
        warnings=["b"],
        state_history=[
            actions.StateHistoryEntry(
                from_state=State.PENDING, to_state=State.RUNNING, event="alive", timestamp=T0
            )
        ],
    )
    assert unstructure_wire(status) == generated.unstructure(status)
    assert_plain_json(unstructure_wire(status))


# -- rock_core._evolve: attrs.evolve for the hot path ----------------------------------------


@pytest.mark.parametrize("cls", [SandboxRecord, SandboxSpec], ids=lambda c: c.__name__)
@_SETTINGS
@given(data=st.data())
def test_a_quick_evolve_makes_what_attrs_evolve_makes(cls: type, data: st.DataObject) -> None:
    """Any instance, changed in any of its fields to another instance's values (given as the
    stored form, so each converter has work): the same instance as attrs.evolve, or the same
    refusal."""
    from rock_core._evolve import evolve

    old, other = data.draw(instances_of(cls)), data.draw(instances_of(cls))
    names = data.draw(st.sets(st.sampled_from([f.name for f in attrs.fields(cls)])))
    changes = {name: getattr(other, name) for name in names}
    if "state_history" in changes:  # a converter's work: plain lists instead of tuples
        changes["state_history"] = list(changes["state_history"])
    if "notes" in changes:
        changes["notes"] = list(changes["notes"])
    try:
        expected = attrs.evolve(old, **changes)
    except Exception as exc:  # noqa: BLE001 - the same refusal, whatever it is
        with pytest.raises(type(exc)) as refused:
            evolve(old, **changes)
        assert str(refused.value) == str(exc)
        return
    made = evolve(old, **changes)
    assert made == expected
    assert type(made) is cls
    assert [type(getattr(made, f.name)) for f in attrs.fields(cls)] == [
        type(getattr(expected, f.name)) for f in attrs.fields(cls)
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"sandbox_id": " "},
        {"state": "no-such-state"},
        {"notes": 5},
        {"no_such_field": 1},
    ],
    ids=["blank id", "unknown state", "notes not strings", "unknown field"],
)
def test_a_quick_evolve_refuses_what_attrs_evolve_refuses(changes: dict[str, Any]) -> None:
    from rock_core._evolve import evolve

    record = SandboxRecord(
        sandbox_id="s1", spec=SandboxSpec(image="python:3.11"), create_time=datetime.now(UTC)
    )
    with pytest.raises(Exception) as expected:  # noqa: PT011 - compared with evolve's below
        attrs.evolve(record, **changes)
    with pytest.raises(type(expected.value)):
        evolve(record, **changes)


def test_a_quick_evolve_checks_fields_against_each_other() -> None:
    """SandboxSpec's check across fields (__attrs_post_init__) runs on a changed copy."""
    from rock_core._evolve import evolve

    spec = SandboxSpec(image="python:3.11", auto_archive_seconds=60)
    with pytest.raises(InvalidParameter, match="cannot both be set"):
        evolve(spec, auto_delete_seconds=60)
    assert evolve(spec, auto_archive_seconds=None, auto_delete_seconds=60).auto_delete_seconds == 60


# -- rock_core._start_wire: a start's body read, and its spec made, checking each value once --

#: Values of every kind a field may be sent, good for some fields and bad for others.
_ODD_VALUES = st.sampled_from(
    [
        None, "", "  ", " x ", "x", "0", "8g", " 512m ", "0.5b", "-1", "7", "1e3", "nan", "true",
        "never", "missing", "on-failure", "NET_RAW", "host", 0, 1, -1, 5, 9, 10, 2**53 + 1, 2**70,
        10**400, 0.0, 0.5, 2.0, 3.0, -2.5, float("inf"), float("nan"), True, False, [], ["x"],
        ["NET_RAW", 1], ("x",), {}, {"a": "b"}, {"a": 1}, {1: "a"}, {"default": "deny"},
    ]
)  # fmt: skip


@st.composite
def _bodies(draw: st.DrawFn, cls: type, base: st.SearchStrategy[Any]) -> Any:
    """``cls``'s wire form (from ``base``, or an instance of ``cls``), with some keys left out,
    some set to odd values and maybe an unknown key; now and then no object at all."""
    if draw(st.integers(0, 20)) == 0:
        return draw(_ODD_VALUES)
    body = unstructure_wire(draw(base))
    names = [f.name for f in attrs.fields(cls)]
    for name in draw(st.sets(st.sampled_from(names), max_size=2)):
        del body[name]
    for name in draw(st.sets(st.sampled_from(names), max_size=3)):
        body[name] = draw(_ODD_VALUES)
    if draw(st.integers(0, 5)) == 0:
        body[draw(st.sampled_from(["x", "Image", "size", ""]))] = draw(_ODD_VALUES)
    return body


@functools.cache
def _generated_converter() -> Any:
    from rock_core.converters import make_converter

    return make_converter(forbid_extra_keys=True)  # without the hand-written hooks


def _generated_read(body: Any, cls: type) -> Any:
    """``cls`` read by the wire converter's generated hooks alone (no hand-written hook), its
    refusal as structure_wire words it."""
    from rock_core._converter_errors import BAD_DATA, invalid_error, problems_of

    try:
        return _generated_converter().structure(body, cls)
    except BAD_DATA as exc:
        raise invalid_error(problems_of(exc, "")) from exc


def _same_outcome(new: Any, old: Any) -> None:
    """Both calls (no-argument callables) make the same instance, with the same types in every
    field, or raise the same refusal (type, message, field, value)."""
    try:
        expected = old()
    except Exception as exc:  # noqa: BLE001 - the same refusal, whatever it is
        with pytest.raises(type(exc)) as refused:
            new()
        assert str(refused.value) == str(exc)
        if isinstance(exc, InvalidParameter):
            assert isinstance(refused.value, InvalidParameter)
            assert refused.value.field == exc.field
            assert repr(refused.value.value) == repr(exc.value)
        return
    made = new()
    assert made == expected
    assert type(made) is type(expected)
    assert [type(getattr(made, f.name)) for f in attrs.fields(type(made))] == [
        type(getattr(expected, f.name)) for f in attrs.fields(type(expected))
    ]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies(SandboxStartRequest, instances_of(SandboxStartRequest)))
def test_a_start_body_is_read_as_the_generated_hook_reads_it_or_refused_alike(body: Any) -> None:
    """/start, /start_async and each start_batch item: any body, good or bad, gives the same
    request as the converter's generated hook, or the same refusal naming the same field."""
    _same_outcome(
        lambda: structure_wire(body, SandboxStartRequest),
        lambda: _generated_read(body, SandboxStartRequest),
    )


@pytest.mark.parametrize("cls", [SandboxStartRequest, actions.StartBatchItem])
def test_every_field_set_to_every_odd_value_is_read_or_refused_alike(cls: type) -> None:
    """Each field of an SDK's body (and of a start_batch item) in turn set to each odd value:
    the same request, or the same refusal, as the generated hook's."""
    sdk = unstructure_wire(SandboxStartRequest(image="python:3.11", memory="128m", cpus=0.1))
    base = sdk if cls is SandboxStartRequest else {"request": sdk, "idempotency_key": "k"}
    for field in attrs.fields(cls):
        for value in [*_ODD_VALUES.elements, "8G", " 1.5k ", "2Gi", 2**53, -(2**53) - 1]:  # type: ignore[attr-defined]
            body = {**base, field.name: value}
            _same_outcome(lambda: structure_wire(body, cls), lambda: _generated_read(body, cls))  # noqa: B023
        absent = {k: v for k, v in base.items() if k != field.name}
        _same_outcome(lambda: structure_wire(absent, cls), lambda: _generated_read(absent, cls))  # noqa: B023


@st.composite
def _batch_bodies(draw: st.DrawFn) -> Any:
    """A start_batch body: items as ``_bodies`` makes them (some with a start request's body),
    maybe an unknown key; now and then no object at all."""
    if draw(st.integers(0, 10)) == 0:
        return draw(_ODD_VALUES)
    item = instances_of(actions.StartBatchItem)
    with_request = st.builds(
        lambda i, r: attrs.evolve(i, request=unstructure_wire(r)),
        item,
        instances_of(SandboxStartRequest),
    )
    items = draw(st.lists(_bodies(actions.StartBatchItem, item | with_request), max_size=3))
    body: dict[str, Any] = {"items": items}
    if draw(st.integers(0, 5)) == 0:
        body["x"] = draw(_ODD_VALUES)
    return body


@_SETTINGS
@given(body=_batch_bodies())
def test_a_start_batch_is_read_as_the_generated_hook_reads_it_or_refused_alike(body: Any) -> None:
    _same_outcome(
        lambda: structure_wire(body, actions.StartBatchRequest),
        lambda: _generated_read(body, actions.StartBatchRequest),
    )


def test_the_usual_bodies_are_read_by_hand() -> None:
    """What the SDKs send (every field, most of them null) takes the hand-written pass; a
    warmup (a subclass of the start request) keeps the generated hook's, and its ``size``."""
    from rock_core._start_wire import read_quickly

    sdk = unstructure_wire(SandboxStartRequest(image="python:3.11", memory="128m", cpus=0.1))
    assert read_quickly(SandboxStartRequest, sdk) == structure_wire(sdk, SandboxStartRequest)
    assert read_quickly(SandboxStartRequest, {"image": " rock "}) == SandboxStartRequest(
        image="rock"
    )
    item = {"request": sdk, "idempotency_key": "k", "user_id": None}
    assert read_quickly(actions.StartBatchItem, item) == actions.StartBatchItem(
        request=sdk, idempotency_key="k"
    )
    assert read_quickly(SandboxStartRequest, {**sdk, "cpus": "2"}) is None  # the generated hook's
    warmup = structure_wire({"image": "python:3.11", "size": 2}, actions.WarmupRequest)
    assert warmup.size == 2


_IDENTITIES = st.fixed_dictionaries(
    {}, optional={k: st.none() | st.text(max_size=5) for k in ("user_id", "namespace", "cluster")}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    request=instances_of(SandboxStartRequest)
    | instances_of(SandboxStartRequest).map(
        lambda r: attrs.evolve(r, cap_add=["net_raw"], egress=None, network=None)
    )
    | instances_of(SandboxStartRequest).map(
        lambda r: attrs.evolve(
            r, cap_add=None, egress={"default": "deny"}, network="bridge", network_group="g"
        )
    ),
    identity=_IDENTITIES,
)
def test_a_spec_is_made_from_a_request_as_its_init_makes_it(
    request: SandboxStartRequest, identity: dict[str, Any]
) -> None:
    """spec_from_start_request, which sets the spec's checked values without checking them
    again: the same spec as ``SandboxSpec(...)`` made, or the same refusal."""
    from unittest import mock

    from rock_core import _start_spec

    def by_init() -> SandboxSpec:
        with mock.patch.object(_start_spec, "_make_spec", None):
            return spec_from_start_request(request, **identity)

    _same_outcome(lambda: spec_from_start_request(request, **identity), by_init)


def test_a_quickly_made_spec_has_the_defaults_and_the_cross_field_check() -> None:
    from rock_core._start_wire import trusted_maker

    make = trusted_maker(SandboxSpec)
    assert make is not None
    assert make(image="python:3.11") == SandboxSpec(image="python:3.11")
    assert make(image="i").env is not make(image="i").env  # a fresh dict each
    with pytest.raises(InvalidParameter, match="cannot both be set"):
        make(image="i", auto_archive_seconds=1, auto_delete_seconds=2)
    with pytest.raises(TypeError):
        make()  # the image is required
