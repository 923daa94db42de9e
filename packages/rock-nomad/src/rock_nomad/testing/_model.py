"""The stand-in's view of Nomad's job JSON: defaults, validation, durations and coded errors.

Written from Nomad's documented HTTP API (the job JSON reference and the API pages), not from
its source. Durations are integer nanoseconds, keys are PascalCase, driver ``Config`` keys are
the driver's own (snake_case).
"""

from __future__ import annotations

import json
import pickle
import re
from typing import Any

import orjson

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

#: Job types the stand-in schedules. ``system`` and ``sysbatch`` run on every node in Nomad;
#: the stand-in refuses them at register (a validation error) instead of scheduling them wrongly.
JOB_TYPES = ("service", "batch")
ALL_JOB_TYPES = ("service", "batch", "system", "sysbatch")

# Per job type defaults of a group's restart and reschedule policies (documented in the
# ``restart`` and ``reschedule`` blocks of the job specification).
RESTART_DEFAULTS = {
    "service": {
        "Attempts": 2,
        "Interval": 30 * MINUTE,
        "Delay": 15 * SECOND,
        "Mode": "fail",
        "RenderTemplates": False,
    },
    "batch": {
        "Attempts": 3,
        "Interval": 24 * HOUR,
        "Delay": 15 * SECOND,
        "Mode": "fail",
        "RenderTemplates": False,
    },
}
RESCHEDULE_DEFAULTS = {
    "service": {
        "Attempts": 0,
        "Interval": 0,
        "Delay": 30 * SECOND,
        "DelayFunction": "exponential",
        "MaxDelay": HOUR,
        "Unlimited": True,
    },
    "batch": {
        "Attempts": 1,
        "Interval": 24 * HOUR,
        "Delay": 5 * SECOND,
        "DelayFunction": "constant",
        "MaxDelay": 0,
        "Unlimited": False,
    },
}


class NomadError(Exception):
    """An API error as Nomad answers it: a status code and a plain-text body."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def multierror(errors: list[str]) -> str:
    """Several validation errors joined the way Nomad's multierror text reads."""
    head = "1 error occurred:" if len(errors) == 1 else f"{len(errors)} errors occurred:"
    return head + "\n" + "".join(f"\t* {e}\n" for e in errors) + "\n"


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": SECOND, "m": MINUTE, "h": HOUR}


def parse_duration(text: str) -> float:
    """A Go duration (``"10s"``, ``"1m30s"``, ``"300000ms"``, ``"0"``) in seconds.

    :raises ValueError: not a Go duration.
    """
    s = text.strip()
    sign = 1
    if s[:1] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(text)
    pos, total = 0, 0.0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        if match is None:
            raise ValueError(text)
        total += float(match.group(1)) * _UNIT_NS[match.group(2)]
        pos = match.end()
    return sign * total / SECOND


def parse_bool(value: str | None) -> bool | None:
    """Go's ``strconv.ParseBool``: ``None`` when absent, :class:`ValueError` when not a bool."""
    if value is None:
        return None
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(value)


def _merge(defaults: dict[str, Any], given: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in (given or {}).items():
        if value is not None:
            out[key] = value
    return out


def _default(obj: dict[str, Any], key: str, value: Any) -> None:
    if obj.get(key) is None:
        obj[key] = value


def _canonical_port(port: dict[str, Any]) -> dict[str, Any]:
    return {
        "Label": port.get("Label") or "",
        "Value": int(port.get("Value") or 0),
        "To": int(port.get("To") or 0),
        "HostNetwork": port.get("HostNetwork") or "default",
    }


def _canonical_network(net: dict[str, Any]) -> dict[str, Any]:
    out = dict(net)
    _default(out, "Mode", "host")
    if out["Mode"] == "":
        out["Mode"] = "host"
    for key in ("Device", "CIDR", "IP", "Hostname"):
        _default(out, key, "")
    _default(out, "MBits", 0)
    out.setdefault("DNS", None)
    for key in ("ReservedPorts", "DynamicPorts"):
        ports = out.get(key)
        out[key] = [_canonical_port(p) for p in ports] if ports else None
    return out


#: The standard library's compact encoder, for what orjson does not take.
_compact_encoder = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def compact_json(value: Any) -> str:
    """Compact JSON, as Nomad writes it (UTF-8 as it is, as Go's encoder leaves it), encoded
    by orjson: a start's answers and event frames in about a tenth of the CPU of the standard
    library's encoder (a quarter of the stand-in's CPU in a burst of starts). A value orjson
    does not take (a key that is no string, a number past 64 bits) is encoded by that one."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return _compact_encoder(value)


def json_copy(obj: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, strings, numbers, booleans, ``None``), as
    ``copy.deepcopy`` makes it, at a fifth of its cost (a job given by a caller is copied before
    it is filled in, an allocation's job when the job changed since its version was kept)."""
    return pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))  # noqa: S301 - our own bytes


def canonicalize_job(job: dict[str, Any], namespace: str, *, copy: bool = True) -> dict[str, Any]:
    """``job`` with Nomad's defaults filled in (a new object, ``job`` unchanged; with ``copy``
    false, ``job`` itself, for a caller whose ``job`` is its own: a request's parsed body)."""
    if copy:
        job = json_copy(job)
    job["Namespace"] = namespace
    _default(job, "Name", job.get("ID"))
    _default(job, "Region", "global")
    _default(job, "Type", "service")
    _default(job, "Priority", 50)
    _default(job, "AllAtOnce", False)
    if not job.get("Datacenters"):
        job["Datacenters"] = ["*"]
    _default(job, "NodePool", "default")
    for key in (
        "Constraints",
        "Affinities",
        "Spreads",
        "Periodic",
        "ParameterizedJob",
        "Meta",
        "Payload",
        "Multiregion",
        "Update",
        "Migrate",
        "UI",
    ):
        job.setdefault(key, None)  # as _default(..., None): null if absent
    job_type = job["Type"] if job["Type"] in RESTART_DEFAULTS else "service"
    job_reschedule = job.get("Reschedule")
    for group in job.get("TaskGroups") or []:
        _default(group, "Count", 1)
        for key in ("Constraints", "Affinities", "Spreads", "Meta", "Services", "Volumes"):
            group.setdefault(key, None)  # as _default(..., None): null if absent
        group["RestartPolicy"] = _merge(RESTART_DEFAULTS[job_type], group.get("RestartPolicy"))
        reschedule = _merge(RESCHEDULE_DEFAULTS[job_type], job_reschedule)
        group["ReschedulePolicy"] = _merge(reschedule, group.get("ReschedulePolicy"))
        group["EphemeralDisk"] = _merge(
            {"Sticky": False, "SizeMB": 300, "Migrate": False}, group.get("EphemeralDisk")
        )
        _default(group, "PreventRescheduleOnLost", False)
        group["Networks"] = (
            [_canonical_network(n) for n in group["Networks"]] if group.get("Networks") else None
        )
        for task in group.get("Tasks") or []:
            _default(task, "Driver", "")
            _default(task, "User", "")
            for key in (
                "Config",
                "Env",
                "Meta",
                "Services",
                "Artifacts",
                "Templates",
                "Constraints",
                "Lifecycle",
            ):
                task.setdefault(key, None)  # as _default(..., None): null if absent
            resources = dict(task.get("Resources") or {})
            cores = int(resources.get("Cores") or 0)
            _default(resources, "Cores", 0)
            if not cores:
                _default(resources, "CPU", 100)
            else:
                _default(resources, "CPU", 0)
            _default(resources, "MemoryMB", 300)
            _default(resources, "MemoryMaxMB", 0)
            _default(resources, "DiskMB", 0)
            resources.setdefault("Networks", None)
            resources.setdefault("Devices", None)
            task["Resources"] = resources
            _default(task, "KillTimeout", 5 * SECOND)
            _default(task, "KillSignal", "")
            _default(task, "ShutdownDelay", 0)
            _default(task, "Leader", False)
            task["LogConfig"] = _merge(
                {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False}, task.get("LogConfig")
            )
            templates = task.get("Templates")
            if templates:
                task["Templates"] = [
                    _merge(
                        {
                            "SourcePath": "",
                            "DestPath": "",
                            "EmbeddedTmpl": "",
                            "ChangeMode": "restart",
                            "ChangeSignal": "",
                            "Splay": 5 * SECOND,
                            "Perms": "0644",
                            "LeftDelim": "{{",
                            "RightDelim": "}}",
                            "Envvars": False,
                        },
                        t,
                    )
                    for t in templates
                ]
            arts = task.get("Artifacts")
            if arts:
                task["Artifacts"] = [
                    _merge(
                        {
                            "GetterSource": "",
                            "GetterOptions": None,
                            "GetterHeaders": None,
                            "GetterMode": "any",
                            "RelativeDest": "local/",
                        },
                        a,
                    )
                    for a in arts
                ]
    return job


def validate_job(job: dict[str, Any]) -> list[str]:
    """What is wrong with a canonical job; ``[]`` when it may be registered."""
    errors: list[str] = []
    job_id = job.get("ID") or ""
    if " " in job_id:
        errors.append("Job ID contains a space")
    if "\x00" in job_id:
        errors.append("Job ID contains a null character")
    if job.get("Type") not in ALL_JOB_TYPES:
        errors.append(f"Invalid job type: {job.get('Type')!r}")
    elif job["Type"] not in JOB_TYPES:
        errors.append(
            f"Job type {job['Type']!r} is not supported by the stand-in Nomad server (service and batch are)"
        )
    priority = job.get("Priority")
    if not isinstance(priority, int) or not 1 <= priority <= 100:
        errors.append("Job priority must be between [1, 100]")
    if any(not isinstance(dc, str) or not dc for dc in job.get("Datacenters") or []):
        errors.append("Job datacenters must not be empty strings")
    groups = job.get("TaskGroups") or []
    if not groups:
        errors.append("Missing job task groups")
    seen_groups: set[str] = set()
    for number, group in enumerate(groups, 1):
        name = group.get("Name") or ""
        where = f"Task group {name or number}"
        if not name:
            errors.append(f"{where}: missing name")
        elif name in seen_groups:
            errors.append(f"{where}: name repeats an earlier group's")
        seen_groups.add(name)
        if not isinstance(group.get("Count"), int) or group["Count"] < 0:
            errors.append(f"{where}: count must be a non-negative integer")
        errors.extend(f"{where}: {e}" for e in _restart_errors(group["RestartPolicy"]))
        errors.extend(f"{where}: {e}" for e in _reschedule_errors(group["ReschedulePolicy"]))
        labels: set[str] = set()
        for net in group.get("Networks") or []:
            if net.get("Mode") not in ("host", "bridge"):
                errors.append(
                    f"{where}: network mode {net.get('Mode')!r} is not supported by the stand-in (host and bridge are)"
                )
            for port in (net.get("ReservedPorts") or []) + (net.get("DynamicPorts") or []):
                if not port["Label"]:
                    errors.append(f"{where}: a port has no label")
                elif port["Label"] in labels:
                    errors.append(f"{where}: port label {port['Label']!r} is used twice")
                labels.add(port["Label"])
            for port in net.get("ReservedPorts") or []:
                if not 0 < port["Value"] < 65536:
                    errors.append(
                        f"{where}: reserved port {port['Label']!r} needs a Value between 1 and 65535"
                    )
        tasks = group.get("Tasks") or []
        if not tasks:
            errors.append(f"{where}: missing tasks for task group")
        seen_tasks: set[str] = set()
        for task in tasks:
            tname = task.get("Name") or ""
            twhere = f"{where}, task {tname or '?'}"
            if not tname:
                errors.append(f"{where}: a task has no name")
            elif tname in seen_tasks:
                errors.append(f"{twhere}: name repeats an earlier task's")
            seen_tasks.add(tname)
            if not task.get("Driver"):
                errors.append(f"{twhere}: missing task driver")
            res = task["Resources"]
            if res.get("Cores") and res.get("CPU"):
                errors.append(
                    f"{twhere}: task can only ask for 'cpu' or 'cores' resource, not both"
                )
            if not res.get("Cores") and int(res.get("CPU") or 0) < 1:
                errors.append(f"{twhere}: minimum CPU value is 1; got {res.get('CPU')}")
            if int(res.get("MemoryMB") or 0) < 10:
                errors.append(f"{twhere}: minimum MemoryMB value is 10; got {res.get('MemoryMB')}")
            for tmpl in task.get("Templates") or []:
                if not tmpl.get("DestPath"):
                    errors.append(f"{twhere}: a template has no destination")
                if not tmpl.get("EmbeddedTmpl") and not tmpl.get("SourcePath"):
                    errors.append(f"{twhere}: a template needs a source or an embedded template")
            for art in task.get("Artifacts") or []:
                if not art.get("GetterSource"):
                    errors.append(f"{twhere}: an artifact has no source")
                if art.get("GetterMode") not in ("any", "file", "dir"):
                    errors.append(f"{twhere}: artifact mode must be one of any, file or dir")
    return errors


def _restart_errors(policy: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    mode = policy.get("Mode")
    if mode not in ("delay", "fail"):
        errors.append(f"restart mode {mode!r} is not one of delay or fail")
    attempts, interval, delay = (
        int(policy.get("Attempts") or 0),
        int(policy.get("Interval") or 0),
        int(policy.get("Delay") or 0),
    )
    if attempts == 0 and mode != "fail":
        errors.append(f"restart policy with 0 attempts must use mode 'fail', not {mode!r}")
    if attempts < 0:
        errors.append("restart attempts must not be negative")
    if interval < 5 * SECOND:
        errors.append(f"restart interval must be at least 5s; got {interval / SECOND:g}s")
    if attempts * delay > interval:
        errors.append(
            f"restart attempts ({attempts}) times delay ({delay / SECOND:g}s) exceeds the interval ({interval / SECOND:g}s)"
        )
    return errors


def _reschedule_errors(policy: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    attempts, interval = int(policy.get("Attempts") or 0), int(policy.get("Interval") or 0)
    unlimited = bool(policy.get("Unlimited"))
    if attempts == 0 and not unlimited:
        return errors
    if unlimited and attempts > 0:
        errors.append(f"reschedule policy with attempts {attempts} and unlimited true is ambiguous")
    if attempts > 0 and interval <= 0:
        errors.append("reschedule policy with attempts needs a positive interval")
    if policy.get("DelayFunction") not in ("constant", "exponential", "fibonacci"):
        errors.append(
            f"reschedule delay function {policy.get('DelayFunction')!r} is not one of constant, exponential or fibonacci"
        )
    # Nomad also asks for a delay of at least 5 s; the stand-in accepts shorter ones, so that
    # tests of rescheduling need not wait.
    return errors


#: The fields that are the job's specification (what a re-register compares to decide whether
#: the job changed and its Version goes up); the rest are set by the server.
SERVER_JOB_FIELDS = (
    "Stop",
    "Status",
    "StatusDescription",
    "Stable",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "ParentID",
    "Dispatched",
)


def job_spec(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k not in SERVER_JOB_FIELDS}
