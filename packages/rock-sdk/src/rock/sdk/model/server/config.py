"""The model service's settings: ROCK's file names, markers and :class:`ModelServiceConfig`.

ROCK's names and defaults (``rock/sdk/model/server/config.py`` of rl-rock 1.11): the
communication file ``$ROCK_MODEL_SERVICE_DATA_DIR/LLMService.log`` (default ``/data/logs``), the
trajectory ``LLMTraj.jsonl`` beside it, the markers, a 0.1 s look at the file while a call waits.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Optional

LOG_DIR = os.environ.get("ROCK_MODEL_SERVICE_DATA_DIR", "/data/logs")
LOG_FILE = LOG_DIR + "/LLMService.log"
TRAJ_FILE = LOG_DIR + "/LLMTraj.jsonl"

POLLING_INTERVAL_SECONDS = 0.1
REQUEST_TIMEOUT = None

REQUEST_START_MARKER = "LLM_REQUEST_START"
REQUEST_END_MARKER = "LLM_REQUEST_END"
RESPONSE_START_MARKER = "LLM_RESPONSE_START"
RESPONSE_END_MARKER = "LLM_RESPONSE_END"
SESSION_END_MARKER = "SESSION_END"

#: Where ``start`` keeps the server's pid (ROCK: ``data/cli/model/pid.txt`` under the cwd).
RUN_DIR = os.environ.get("ROCK_MODEL_SERVICE_RUN_DIR", "/tmp/rock-model-service")


def traj_append_mode() -> bool:
    """``ROCK_MODEL_SERVICE_TRAJ_APPEND_MODE=true``: keep the trajectory file across starts."""
    return os.environ.get("ROCK_MODEL_SERVICE_TRAJ_APPEND_MODE", "false").lower() == "true"


@dataclasses.dataclass
class ModelServiceConfig:
    """The server's settings (ROCK's fields; ``retry_*`` are rock's)."""

    host: str = "0.0.0.0"
    port: int = 8080
    proxy_base_url: Optional[str] = None
    proxy_rules: dict[str, str] = dataclasses.field(default_factory=dict)
    retryable_status_codes: list[int] = dataclasses.field(default_factory=lambda: [429, 500])
    request_timeout: float = 120
    recording_file: Optional[str] = None
    replay_file: Optional[str] = None
    #: (rock) attempts per call, the first included (ROCK: 6).
    retry_attempts: int = 6
    #: (rock) seconds before the first retry, doubling (ROCK: 2).
    retry_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.recording_file and self.replay_file:
            raise ValueError(
                "recording_file and replay_file are mutually exclusive: set one (recording "
                "mode) or the other (replay mode), not both"
            )

    @classmethod
    def from_file(cls, config_path: Optional[str] = None) -> ModelServiceConfig:
        """Settings from a JSON or YAML file (YAML needs PyYAML, or the flat ``key: value``
        form, which is read without it); none: the defaults."""
        if not config_path:
            return cls()
        path = Path(config_path)
        if not path.exists():
            raise FileNotFoundError(f"Config file {path} not found")
        text = path.read_text(encoding="utf-8")
        data = _parse(text)
        if not data:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{path}: unknown settings {unknown} (known: {sorted(names)})")
        return cls(**data)


def _parse(text: str) -> dict[str, Any]:
    stripped = text.strip()
    if not stripped:
        return {}
    if stripped.startswith("{"):
        return dict(json.loads(stripped))
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        return _flat_yaml(stripped)
    loaded = yaml.safe_load(stripped)
    return dict(loaded or {})


def _flat_yaml(text: str) -> dict[str, Any]:
    """``key: value`` lines whose values are JSON scalars or lists, else strings."""
    out: dict[str, Any] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"cannot read config line {raw!r} (install PyYAML, or use JSON)")
        value = value.strip()
        try:
            out[key.strip()] = json.loads(value) if value else None
        except ValueError:
            out[key.strip()] = value.strip("'\"")
    return out
