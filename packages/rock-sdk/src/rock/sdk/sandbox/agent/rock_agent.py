"""ROCK's ``RockAgent``: install an agent in a sandbox, wire it to the model service, run it,
watch it, end the session when it exits.

``install(config)``: upload ``working_dir`` (to ``/tmp/rock_agent_workdir_<name>``), open the
agent's bash session with ``env``, run ``pre_init_cmds``, set up the runtime (the image's
``python3`` or ``node``, ``pip``, ``custom_install_cmd``) and the model service (installed and
started, when ``model_service_config.enabled``), run ``post_init_cmds``. Each step that fails
raises :class:`AgentInstallError`, which names the step and shows its output.

``run(prompt)``: ``run_cmd`` with ``${prompt}`` (shell-quoted), ``${working_dir}`` and
``${bin_dir}`` replaced, run under nohup in the agent's session in ``project_path`` (else the
uploaded working directory), the model service told to watch its pid (``SESSION_END`` the moment
it exits), waited for up to ``agent_run_timeout`` seconds (killed past it). Returns ROCK's
:class:`~rock.actions.Observation` with the agent's real exit code; :attr:`RockAgent.result`
says how it ended (:class:`AgentRunResult`).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from rock.sdk.sandbox.agent.config import AgentBashCommand, RockAgentConfig
from rock.sdk.sandbox.model_service.base import ModelService, ModelServiceError
from rock_core.actions import Command, CreateBashSessionRequest, Observation

if TYPE_CHECKING:
    from rock.sdk.sandbox.client import Sandbox

__all__ = ["AgentInstallError", "AgentRunResult", "RockAgent"]

_FIND_PYTHON = (
    "p=$(command -v python3 || command -v python) || { echo 'no python3 in the image'; exit 127; }"
    '; "$p" -c \'import sys; print("%d.%d" % sys.version_info[:2])\' && echo "$p"'
)


class AgentInstallError(RuntimeError):
    """An install step failed: ``step`` names it, ``output`` is what it printed."""

    def __init__(
        self, step: str, message: str, output: str = "", exit_code: int | None = None
    ) -> None:
        text = f"agent install step {step!r} failed: {message}"
        if output.strip():
            text += f"\n--- output of {step} ---\n{output.strip()[-4000:]}"
        super().__init__(text)
        self.step = step
        self.output = output
        self.exit_code = exit_code


@attrs.frozen
class AgentRunResult:
    """How a run ended: ``reason`` is ``"exited"`` (with ``exit_code``), ``"timeout"`` (killed
    after ``agent_run_timeout``) or ``"failed"`` (it could not be started: ``message``)."""

    pid: int | None
    exit_code: int | None
    reason: str
    message: str
    elapsed: float
    output: str


class RockAgent:
    """An agent installed in ``sandbox`` (ROCK's ``sandbox.agent``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self.config: RockAgentConfig | None = None
        self.model_service: ModelService | None = None
        self.agent_session: str | None = None
        self.working_dir: str | None = None
        self.bin_dir: str = ""
        self.result: AgentRunResult | None = None

    # -- install ---------------------------------------------------------------------------------

    async def install(
        self, config: str | Path | RockAgentConfig = "rock_agent_config.yaml"
    ) -> None:
        """Install the agent (see the module's text); :class:`AgentInstallError` names a failed
        step."""
        if not isinstance(config, RockAgentConfig):
            config = RockAgentConfig.from_file(config)
        self.config = config
        self.agent_session = config.agent_session
        if config.working_dir:
            target = f"/tmp/rock_agent_workdir_{config.agent_name}"
            uploaded = await self._sandbox.fs.upload_dir(config.working_dir, target)
            if uploaded.exit_code != 0:
                raise AgentInstallError("deploy working_dir", uploaded.failure_reason)
            self.working_dir = target
        try:
            await self._sandbox.create_session(
                CreateBashSessionRequest(
                    session=config.agent_session, env_enable=True, env=dict(config.env) or None
                )
            )
        except Exception as exc:
            raise AgentInstallError("create the agent session", str(exc)) from exc
        for i, cmd in enumerate(config.pre_init_cmds, 1):
            await self._step(f"pre_init_cmds[{i}]", cmd)
        await self._runtime_env()
        if config.model_service_config.enabled:
            self.model_service = ModelService(self._sandbox, config.model_service_config)
            try:
                await self.model_service.install()
                await self.model_service.start()
            except ModelServiceError as exc:
                raise AgentInstallError(exc.step, str(exc), exc.output) from exc
            self._sandbox.model_service = self.model_service
        for i, cmd in enumerate(config.post_init_cmds, 1):
            await self._step(f"post_init_cmds[{i}]", cmd)

    def format(self, text: str, **values: str) -> str:
        """``text`` with ``${working_dir}``, ``${bin_dir}`` and ``values`` replaced."""
        from string import Template

        fill = {"working_dir": self.working_dir or "", "bin_dir": self.bin_dir, **values}
        return Template(text).safe_substitute(fill)

    async def _sh(self, script: str, timeout: float) -> tuple[int | None, str]:
        result = await self._sandbox.execute(
            Command(command=["bash", "-c", script], timeout=timeout)
        )
        return result.exit_code, (result.stdout or "") + (result.stderr or "")

    async def _step(self, step: str, cmd: AgentBashCommand) -> str:
        command = self.format(cmd.command)
        code, output = await self._sh(command, cmd.timeout_seconds)
        if code != 0:
            what = "timed out" if code == -1 else f"exit code {code}"
            raise AgentInstallError(step, f"{what}: {command}", output, code)
        return output

    async def _runtime_env(self) -> None:
        assert self.config is not None
        runtime = self.config.runtime_env_config
        if runtime is None:
            return
        timeout = runtime.install_timeout
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in runtime.env.items())
        if runtime.type == "python":
            step = "runtime_env (python)"
            found = await self._step(step, AgentBashCommand(command=_FIND_PYTHON))
            where = found.strip().splitlines()[-1]
            have = found.strip().splitlines()[0]
            if runtime.version not in ("default", "") and not have.startswith(runtime.version):
                raise AgentInstallError(
                    step,
                    f"python {runtime.version} was asked, the image has {have} (rock installs no"
                    " runtime from the network: use an image that has it)",
                )
            self.bin_dir = str(Path(where).parent)
            if runtime.pip:
                if isinstance(runtime.pip, str):
                    items = f"-r {shlex.quote(self.format(runtime.pip))}"
                else:
                    items = " ".join(shlex.quote(self.format(p)) for p in runtime.pip)
                index = (
                    f" --index-url {shlex.quote(runtime.pip_index_url)}"
                    if runtime.pip_index_url
                    else ""
                )
                cmd = f"{exports}{where} -m pip install --no-input --disable-pip-version-check{index} {items}"
                await self._step(
                    "runtime_env (pip)", AgentBashCommand(command=cmd, timeout_seconds=timeout)
                )
        elif runtime.type == "node":
            find = "command -v node || { echo 'no node in the image'; exit 127; }"
            out = await self._step("runtime_env (node)", AgentBashCommand(command=find))
            self.bin_dir = str(Path(out.strip()).parent)
        else:
            raise AgentInstallError("runtime_env", f"unknown runtime type {runtime.type!r}")
        if runtime.custom_install_cmd:
            path = f"export PATH={shlex.quote(self.bin_dir)}:$PATH; "
            await self._step(
                "runtime_env (custom_install_cmd)",
                AgentBashCommand(
                    command=exports + path + self.format(runtime.custom_install_cmd),
                    timeout_seconds=timeout,
                ),
            )

    # -- run -------------------------------------------------------------------------------------

    def _run_command(self, prompt: str) -> str:
        assert self.config is not None
        if not self.config.run_cmd:
            raise ValueError("RockAgentConfig.run_cmd is not set")
        run_cmd = self.format(self.config.run_cmd, prompt=shlex.quote(prompt))
        parts = []
        path = self.config.project_path
        if path is None and self.config.use_deploy_working_dir_as_fallback:
            path = self.working_dir
        if path is not None:
            parts += [f"mkdir -p {shlex.quote(path)}", f"cd {shlex.quote(path)}"]
        if not self.config.skip_wrap_run_cmd and self.bin_dir:
            parts.append(f"export PATH={shlex.quote(self.bin_dir)}:$PATH")
        # One command, so that nohup's status file holds the agent's own exit code.
        return f"bash -c {shlex.quote(' && '.join([*parts, run_cmd]))}"

    async def run(self, prompt: str) -> Observation:
        """Run the agent on ``prompt`` until it exits or ``agent_run_timeout`` passes."""
        if self.config is None or self.agent_session is None:
            raise RuntimeError("RockAgent.run before install(): install the agent first")
        from rock.sdk.sandbox import _nohup

        started = time.monotonic()
        stamp = str(time.time_ns())
        out_file, status_file = f"/tmp/rock_agent_{stamp}.out", f"/tmp/.rock_agent_{stamp}.status"
        cmd = self._run_command(prompt)
        pid, error = await self._sandbox.start_nohup_process(
            cmd=cmd, tmp_file=out_file, session=self.agent_session, status_file=status_file
        )
        if error is not None or pid is None:
            message = error.failure_reason if error else "nohup gave no PID"
            self.result = AgentRunResult(None, None, "failed", message, 0.0, "")
            return error or Observation(output=message, exit_code=1, failure_reason=message)
        if self.model_service is not None and self.model_service.is_started:
            await self.model_service.watch_agent(pid)
        success, message = await self._sandbox.wait_for_process_completion(
            pid=pid,
            session=self.agent_session,
            wait_timeout=self.config.agent_run_timeout,
            wait_interval=self.config.agent_run_check_interval,
            status_file=status_file,
        )
        if success:
            exit_code = await _nohup.collect_exit_status(self._sandbox, status_file)
            reason = "exited"
            message = f"the agent (pid {pid}) exited with code {exit_code}"
        else:
            await self._kill(pid)
            exit_code, reason = None, "timeout"
            message = f"the agent (pid {pid}) ran past agent_run_timeout={self.config.agent_run_timeout}s and was killed"
        observation = await self._sandbox.handle_nohup_output(
            tmp_file=out_file,
            session=self.agent_session,
            success=success and not exit_code,
            message=message,
            ignore_output=False,
            response_limited_bytes_in_nohup=None,
            exit_code=exit_code if success else 1,
        )
        elapsed = time.monotonic() - started
        self.result = AgentRunResult(pid, exit_code, reason, message, elapsed, observation.output)
        return observation

    async def _kill(self, pid: int) -> None:
        script = f"kill -TERM -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; sleep 1; kill -KILL -{pid} 2>/dev/null || kill -KILL {pid} 2>/dev/null; true"
        await self._sh(script, 30)

    async def stop(self) -> None:
        """Stop the model service (the agent's session stays)."""
        if self.model_service is not None:
            await self.model_service.stop()

    def __repr__(self) -> str:
        name = self.config.agent_name if self.config else None
        return f"RockAgent(sandbox={self._sandbox.sandbox_id!r}, agent={name!r})"
