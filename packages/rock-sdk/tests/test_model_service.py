"""The model service in ``local`` mode and RockAgent, on real sandboxes (``python:3.11``, no
network): a small real agent (``rock.sdk.sandbox.agent.shell_agent``, installed from its file)
asks "which command next?", the trainer answers from a scripted policy, and the recorded
trajectory is checked call by call. Embedded, and through a real admin over its socket.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from rock.sdk.sandbox import agent as agent_module
from rock.sdk.sandbox.agent import AgentInstallError, RockAgentConfig
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock.sdk.sandbox.model_service import ModelCallHub, ModelService, ModelServiceConfig

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SHELL_AGENT = Path(agent_module.__file__).parent / "shell_agent.py"


def completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "policy",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    work = tmp_path / "agent"
    work.mkdir()
    shutil.copy(SHELL_AGENT, work / "shell_agent.py")
    return work


def agent_config(agent_dir: Path, **extra: Any) -> RockAgentConfig:
    return RockAgentConfig(
        working_dir=str(agent_dir),
        run_cmd="python3 ${working_dir}/shell_agent.py ${prompt}",
        model_service_config={"enabled": True},
        agent_run_timeout=120,
        agent_run_check_interval=5,
        **extra,
    )


async def _episode(sandbox: Sandbox, agent_dir: Path) -> None:
    agent = sandbox.agent
    await agent.install(agent_config(agent_dir))
    service = agent.model_service
    assert service is not None and service.is_started
    script = ["echo hello > /tmp/greeting", "cat /tmp/greeting", "done"]

    async def policy() -> list[dict[str, Any]]:
        seen = []
        for command in script:
            call = await service.next_call(timeout=60)
            assert not call.session_end, call
            seen.append(call.request)
            await call.answer(completion(command))
        end = await service.next_call(timeout=60)
        assert end.session_end and "exited" in (end.reason or ""), end
        return seen

    trainer = asyncio.create_task(policy())
    observation = await agent.run("greet the world")
    requests = await asyncio.wait_for(trainer, 60)

    assert observation.exit_code == 0, observation
    assert agent.result is not None and agent.result.reason == "exited"
    assert agent.result.exit_code == 0
    assert "done after 2 commands" in observation.output
    # What the agent asked: the task first, then each command's output, as it ran them.
    assert requests[0]["messages"][-1]["content"] == "greet the world"
    assert requests[2]["messages"][-1]["content"] == "exit 0\nhello\n"

    trajectory = await service.trajectory()
    calls = trajectory["calls"]
    assert [c["index"] for c in calls] == [1, 2, 3]
    assert [c["response"]["choices"][0]["message"]["content"] for c in calls] == script
    assert [c["request"] for c in calls] == requests
    assert all(c["status"] == "success" and c["usage"]["total_tokens"] == 4 for c in calls)
    assert trajectory["session_end"] and trajectory["agent_exit"] is not None

    # ROCK's file protocol, line for line, and its JSONL trajectory beside it.
    log = (await sandbox.download("/data/logs/LLMService.log")).decode().splitlines()
    assert log[0].startswith("LLM_REQUEST_START{") and '"index": 1}' in log[0]
    assert "LLM_REQUEST_END" in log[0]
    assert log[1].startswith("LLM_RESPONSE_START{") and "LLM_RESPONSE_END" in log[1]
    assert log[-1] == "SESSION_END"
    lines = (await sandbox.download("/data/logs/LLMTraj.jsonl")).decode().splitlines()
    assert [json.loads(line)["response"] for line in lines] == [completion(c) for c in script]


async def test_an_agent_installed_by_rock_agent_is_answered_call_by_call_and_recorded(
    engine: Any, small: dict[str, Any], agent_dir: Path
) -> None:
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        await _episode(sandbox, agent_dir)


@pytest.mark.driver_independent  # on the admin in both passes
async def test_the_same_loop_runs_through_a_real_admin(
    engine: Any, admin: Any, agent_dir: Path
) -> None:
    config = SandboxConfig(image="python:3.11", memory="512m", cpus=0.5, base_url=admin.url)
    async with Sandbox(config) as sandbox:
        await _episode(sandbox, agent_dir)


async def test_rocks_own_trainer_code_answers_through_the_file_protocol(
    engine: Any, small: dict[str, Any], agent_dir: Path
) -> None:
    """ROCK's trainer runs ``rock model-service anti-call-llm`` in the sandbox; and rock's
    ``ModelService.anti_call_llm`` keeps its contract (index 0 waits, SESSION_END at the end)."""
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        await sandbox.agent.install(agent_config(agent_dir))
        service = sandbox.agent.model_service
        assert sandbox.model_service is service

        async def rock_cli_policy() -> list[str]:
            got = []
            index, payload = 0, None
            answers = iter(["echo one", "done"])
            while True:
                cmd = f"rock model-service anti-call-llm --index {index}"
                if payload is not None:
                    cmd += f" --response {shlex.quote(payload)}"
                obs = await sandbox.arun(cmd, mode="nohup", wait_timeout=60)
                assert obs.exit_code == 0, (obs, got)
                text = obs.output.strip()
                got.append(text)
                if text == "SESSION_END":
                    return got
                payload = json.dumps(completion(next(answers)))
                index += 1

        trainer = asyncio.create_task(rock_cli_policy())
        observation = await sandbox.agent.run("count")
        got = await asyncio.wait_for(trainer, 60)
        assert observation.exit_code == 0, observation
        assert json.loads(got[0])["messages"][-1]["content"] == "count"
        assert json.loads(got[1])["messages"][-1]["content"] == "exit 0\none\n"
        assert got[-1] == "SESSION_END"

        # rock's SDK with ROCK's call: a second episode in the same sandbox.
        await service.start()

        async def sdk_policy() -> str:
            request = await service.anti_call_llm(0)
            assert json.loads(request)["messages"][-1]["content"] == "again"
            return await service.anti_call_llm(1, json.dumps(completion("done")))

        trainer2 = asyncio.create_task(sdk_policy())
        await sandbox.agent.run("again")
        assert await asyncio.wait_for(trainer2, 60) == "SESSION_END"


async def test_one_wait_serves_the_calls_of_many_sandboxes(
    engine: Any, small: dict[str, Any], agent_dir: Path
) -> None:
    sandboxes = [Sandbox(SandboxConfig(**small)) for _ in range(3)]
    await asyncio.gather(*(s.start() for s in sandboxes))
    try:
        await asyncio.gather(*(s.agent.install(agent_config(agent_dir)) for s in sandboxes))
        runs = [asyncio.create_task(s.agent.run(f"task {i}")) for i, s in enumerate(sandboxes)]
        hub = ModelCallHub()
        for s in sandboxes:
            hub.add(s.agent.model_service)
        script = {s.sandbox_id: iter([f"echo {i}", "done"]) for i, s in enumerate(sandboxes)}
        ended = set()
        async with hub:
            while len(ended) < len(sandboxes):
                call = await hub.next_call(timeout=60)
                assert call.error is None, call
                if call.session_end:
                    ended.add(call.sandbox_id)
                    continue
                await call.answer(completion(next(script[call.sandbox_id])))
        results = await asyncio.gather(*runs)
        assert [r.exit_code for r in results] == [0, 0, 0]
        for i, s in enumerate(sandboxes):
            calls = (await s.agent.model_service.trajectory())["calls"]
            assert calls[0]["request"]["messages"][-1]["content"] == f"task {i}"
            assert calls[1]["request"]["messages"][-1]["content"] == f"exit 0\n{i}\n"
    finally:
        await asyncio.gather(*(s.stop() for s in sandboxes))


def build_wheel(dest: Path) -> Path:
    """A wheel of the test agent (module ``shell_agent``, command ``shell-agent``)."""
    import base64
    import hashlib
    import zipfile

    name = "rock_shell_agent-0.1-py3-none-any.whl"
    info = "rock_shell_agent-0.1.dist-info"
    files = {
        "shell_agent.py": SHELL_AGENT.read_bytes(),
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: rock-shell-agent\nVersion: 0.1\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[console_scripts]\nshell-agent = shell_agent:main\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(dest / name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return dest / name


async def test_an_agent_installed_from_a_local_wheel_runs_offline(
    engine: Any, small: dict[str, Any], tmp_path: Path
) -> None:
    work = tmp_path / "wheelhouse"
    work.mkdir()
    wheel = build_wheel(work)
    config = RockAgentConfig(
        working_dir=str(work),
        runtime_env_config={"pip": [f"${{working_dir}}/{wheel.name}"]},
        run_cmd="shell-agent ${prompt}",
        model_service_config={"enabled": True},
        agent_run_timeout=120,
        agent_run_check_interval=5,
    )
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        await sandbox.agent.install(config)
        service = sandbox.agent.model_service

        async def policy() -> None:
            call = await service.next_call(timeout=60)
            await call.answer(completion("done"))

        trainer = asyncio.create_task(policy())
        observation = await sandbox.agent.run("from a wheel")
        await asyncio.wait_for(trainer, 60)
        assert observation.exit_code == 0, observation
        assert "done after 0 commands" in observation.output


async def test_a_failed_install_step_is_named_with_its_output(
    engine: Any, small: dict[str, Any], agent_dir: Path
) -> None:
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        config = agent_config(
            agent_dir,
            runtime_env_config={"custom_install_cmd": "echo fetching the agent; exit 3"},
        )
        with pytest.raises(AgentInstallError) as caught:
            await sandbox.agent.install(config)
        assert caught.value.step == "runtime_env (custom_install_cmd)"
        assert caught.value.exit_code == 3
        assert "fetching the agent" in str(caught.value)

        with pytest.raises(AgentInstallError) as caught:
            await sandbox.agent.install(
                agent_config(
                    agent_dir, pre_init_cmds=[{"command": "apt-get install -y nothing-here"}]
                )
            )
        assert caught.value.step == "pre_init_cmds[1]"
        assert "nothing-here" in str(caught.value)


async def test_an_agent_past_its_run_timeout_is_killed_and_its_session_ended(
    engine: Any, small: dict[str, Any], agent_dir: Path
) -> None:
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        config = agent_config(agent_dir)
        config.agent_run_timeout = 6
        config.agent_run_check_interval = 5
        await sandbox.agent.install(config)
        service: ModelService = sandbox.agent.model_service
        observation = await sandbox.agent.run("never answered")
        assert observation.exit_code == 1
        assert sandbox.agent.result.reason == "timeout"
        assert "agent_run_timeout=6s" in sandbox.agent.result.message
        trajectory = await service.trajectory()
        assert trajectory["session_end"], trajectory
        assert trajectory["calls"][0]["status"] == "session_end"


async def test_model_service_config_names_unknown_keys() -> None:
    with pytest.raises(ValueError, match="unknown keys \\['enabeld'\\]"):
        ModelServiceConfig.from_dict({"enabeld": True})


def test_agents_bench_prints_its_figures() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rock.cli import main; main()",
            "bench",
            "agents",
            "-n",
            "2",
            "-k",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)["figures"]
    assert figures["model_calls"] == 10
    assert figures["call_ms"]["p50"] > 0 and figures["bare_call_ms"]["p50"] > 0
    assert figures["service_rss_mb"]["max"] > 0
