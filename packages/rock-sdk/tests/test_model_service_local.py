"""``rock model-service`` in ``local`` mode as its own process on this machine (what the sandbox
runs from its zipapp), driven by ROCK's commands: ``start``, ``anti-call-llm``, ``watch-agent``,
``stop``; and answered by a line another process appends to the communication file, as ROCK's
``ModelClient`` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.ports import listen_port


class Local:
    def __init__(self, tmp: Path) -> None:
        self.port = listen_port()
        self.data = tmp / "data"
        self.env = {
            **os.environ,
            "ROCK_MODEL_SERVICE_DATA_DIR": str(self.data),
            "ROCK_MODEL_SERVICE_RUN_DIR": str(tmp / "run"),
            "ROCK_MODEL_SERVICE_PORT": str(self.port),
        }
        self.url = f"http://127.0.0.1:{self.port}"

    def rock(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rock.sdk.model", "model-service", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def log(self) -> list[str]:
        return (self.data / "LLMService.log").read_text().splitlines()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    service = Local(tmp_path)
    started = service.rock("start", "--type", "local", "--port", str(service.port))
    assert started.returncode == 0, started.stderr + started.stdout
    yield service
    service.rock("stop")


def agent_call(url: str, content: str, out: list[Any]) -> threading.Thread:
    def call() -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": content}]}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        out.append((answer.status_code, answer.json()))

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def completion(text: str) -> str:
    return json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    )


def test_rocks_commands_answer_calls_through_the_file_and_end_the_session(local: Local) -> None:
    got: list[Any] = []
    thread = agent_call(local.url, "first", got)
    first = local.rock("anti-call-llm", "--index", "0")
    assert json.loads(first.stdout)["messages"][0]["content"] == "first"

    # Answer call 1 (and wait for call 2, made once the agent has its answer).
    answering = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rock.sdk.model",
            "model-service",
            "anti-call-llm",
            "--index",
            "1",
            "--response",
            completion("ls"),
        ],
        env=local.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    thread.join(60)
    assert got == [(200, json.loads(completion("ls")))]
    thread = agent_call(local.url, "second", got)
    second, _ = answering.communicate(timeout=60)
    assert json.loads(second)["messages"][0]["content"] == "second"

    # A line appended by another process answers too (ROCK's ModelClient writes it so).
    meta = json.dumps({"timestamp": 0, "index": 2})
    with (local.data / "LLMService.log").open("a") as f:
        f.write(f"LLM_RESPONSE_START{completion('pwd')}LLM_RESPONSE_END{meta}\n")
    thread.join(60)
    assert got[1] == (200, json.loads(completion("pwd")))

    # watch-agent: the agent's process ends, SESSION_END follows; a waiting call fails.
    agent = subprocess.Popen(["sleep", "600"])
    try:
        watched = local.rock("watch-agent", "--pid", str(agent.pid), "--port", str(local.port))
        assert watched.returncode == 0, watched.stderr
        thread = agent_call(local.url, "third", got)
        waiting = local.rock("anti-call-llm", "--index", "2", "--response", completion("x"))
        assert json.loads(waiting.stdout)["messages"][0]["content"] == "third"
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)
        thread.join(60)
    finally:
        agent.kill()
    assert got[2][0] == 500 and "No response received" in json.dumps(got[2][1])
    assert local.log()[-1] == "SESSION_END"
    ended = local.rock("anti-call-llm", "--index", "3", "--response", completion("y"))
    assert ended.stdout.strip() == "SESSION_END"

    trajectory = httpx.get(f"{local.url}/v1/rock/trajectory").json()
    assert [c["status"] for c in trajectory["calls"]] == ["success", "success", "session_end"]
    assert trajectory["agent_exit"]["pid"] == agent.pid


def test_start_twice_is_refused_and_stop_ends_the_service(local: Local) -> None:
    again = local.rock("start", "--type", "local", "--port", str(local.port))
    assert again.returncode == 1 and "already exist" in again.stdout
    stopped = local.rock("stop")
    assert "model service stopped" in stopped.stdout
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{local.url}/health", timeout=5)
    assert "not exist" in local.rock("stop").stdout


def test_the_sandbox_side_imports_only_the_standard_library_of_python_3_9() -> None:
    """``rock.sdk.model`` runs in the sandbox from a zipapp on the image's own python."""
    import ast

    import rock.sdk.model

    root = Path(rock.sdk.model.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 9))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or name.startswith("rock.sdk.model")
                if not ok and top != "yaml":  # PyYAML: used when the image has it
                    wrong.append(f"{path.relative_to(root)}: {name}")
    assert wrong == []
