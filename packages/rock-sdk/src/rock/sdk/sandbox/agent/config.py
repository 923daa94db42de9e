"""ROCK's agent configs: :class:`RockAgentConfig`, :class:`AgentBashCommand`,
:class:`RuntimeEnvConfig` (ROCK's python / node runtime settings)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import attrs

from rock.sdk.sandbox.model_service.base import ModelServiceConfig

__all__ = ["AgentBashCommand", "AgentConfig", "RockAgentConfig", "RuntimeEnvConfig"]


def _known(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    known = {f.name for f in attrs.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (known: {sorted(known)})")
    return data


@attrs.define(kw_only=True)
class AgentBashCommand:
    """A command with its time limit (ROCK's)."""

    command: str
    timeout_seconds: int = 300


def _commands(value: Any) -> list[AgentBashCommand]:
    out = []
    for item in value or []:
        if isinstance(item, AgentBashCommand):
            out.append(item)
        elif isinstance(item, str):
            out.append(AgentBashCommand(command=item))
        else:
            out.append(AgentBashCommand(**_known(AgentBashCommand, dict(item), "init command")))
    return out


@attrs.define(kw_only=True)
class RuntimeEnvConfig:
    """ROCK's runtime settings (its python and node configs in one). rock installs no runtime
    from the network: ``python`` is the image's ``python3`` (a ``version`` other than
    ``"default"`` must match its ``major.minor``), ``node`` the image's ``node``. Then ``pip``
    (a list of requirements, ``${working_dir}`` replaced, so a wheel uploaded with the working
    directory installs offline; a string is a requirements file), with ``pip_index_url``, and
    ``custom_install_cmd`` run in the sandbox with ``env`` exported, each within
    ``install_timeout`` seconds. ``extra_symlink_*`` are accepted and unused (the image's
    executables are on the PATH already)."""

    type: str = "python"
    version: str = "default"
    env: dict[str, str] = attrs.field(factory=dict)
    install_timeout: int = 600
    pip: list[str] | str | None = None
    pip_index_url: str | None = None
    custom_install_cmd: str | None = None
    npm_registry: str | None = None
    extra_symlink_dir: str | None = None
    extra_symlink_executables: list[str] = attrs.field(factory=list)


def _runtime(value: Any) -> RuntimeEnvConfig | None:
    if value is None or isinstance(value, RuntimeEnvConfig):
        return value
    return RuntimeEnvConfig(**_known(RuntimeEnvConfig, dict(value), "runtime_env_config"))


def _model_service(value: Any) -> ModelServiceConfig:
    if isinstance(value, ModelServiceConfig):
        return value
    return ModelServiceConfig.from_dict(value)


@attrs.define(kw_only=True)
class AgentConfig:
    agent_type: str = "default"
    version: str = "default"


@attrs.define(kw_only=True)
class RockAgentConfig(AgentConfig):
    """ROCK's ``RockAgentConfig``: what to install and how to run the agent (fields and defaults
    as ROCK's; see ROCK's rock-agent reference)."""

    agent_name: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    agent_installed_dir: str = "/tmp/installed_agent"
    instance_id: str = attrs.field(factory=lambda: f"instance-id-{uuid.uuid4().hex}")
    project_path: str | None = None
    use_deploy_working_dir_as_fallback: bool = True
    agent_session: str = attrs.field(factory=lambda: f"agent-session-{uuid.uuid4().hex}")
    env: dict[str, str] = attrs.field(factory=dict)
    pre_init_cmds: list[AgentBashCommand] = attrs.field(factory=list, converter=_commands)
    post_init_cmds: list[AgentBashCommand] = attrs.field(factory=list, converter=_commands)
    agent_install_timeout: int = 600
    agent_run_timeout: int = 1800
    agent_run_check_interval: int = 30
    working_dir: str | None = None
    run_cmd: str | None = None
    skip_wrap_run_cmd: bool = False
    runtime_env_config: RuntimeEnvConfig | None = attrs.field(
        factory=RuntimeEnvConfig, converter=_runtime
    )
    model_service_config: ModelServiceConfig = attrs.field(
        factory=ModelServiceConfig, converter=_model_service
    )

    def __attrs_post_init__(self) -> None:
        if self.agent_run_check_interval >= self.agent_run_timeout:
            raise ValueError(
                f"agent_run_check_interval ({self.agent_run_check_interval}s) must be less than "
                f"agent_run_timeout ({self.agent_run_timeout}s)"
            )
        if self.working_dir is not None:
            path = Path(self.working_dir)
            if not path.exists():
                raise ValueError(f"working_dir does not exist: {self.working_dir}")
            if not path.is_dir():
                raise ValueError(f"working_dir is not a directory: {self.working_dir}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RockAgentConfig:
        """From a mapping (ROCK's YAML); an unknown key is a :class:`ValueError` naming it."""
        return cls(**_known(cls, dict(data), "RockAgentConfig"))

    @classmethod
    def from_file(cls, path: str | Path) -> RockAgentConfig:
        """From ROCK's YAML file (``rock_agent_config.yaml``)."""
        file = Path(path)
        if not file.exists():
            raise FileNotFoundError(f"Agent config file not found: {path}")
        if file.suffix.lower() not in (".yaml", ".yml"):
            raise ValueError(
                f"Unsupported config file format: {file.suffix}. Only .yaml is supported."
            )
        import yaml  # type: ignore[import-untyped]

        return cls.from_dict(yaml.safe_load(file.read_text(encoding="utf-8")) or {})
