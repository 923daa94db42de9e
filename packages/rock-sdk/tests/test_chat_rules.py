"""The Chat protocol's parts that need no sandbox: the rule-based interpreter, the action set's
checks and previews, the settings, and the LLM backend's errors. No Docker here; the chat
against real sandboxes is ``test_chat.py``.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rock.sdk.chat import (
    ACTIONS,
    ChatConfig,
    LLMConfig,
    LLMError,
    detect_language,
    interpret,
    is_destructive_command,
)
from rock.sdk.chat.actions import plan
from rock.sdk.chat.llm import tool_call_arguments
from rock.sdk.sandbox.client import Sandbox
from rock_core.errors import InvalidParameter

pytestmark = pytest.mark.anyio

# (prompt, action, arguments): what the rules make of each.
READINGS: list[tuple[str, str, dict[str, Any]]] = [
    ("run `ls -la /tmp`", "run_command", {"command": "ls -la /tmp"}),
    (
        "execute: python3 -c 'import sys; sys.exit(3)'",
        "run_command",
        {"command": "python3 -c 'import sys; sys.exit(3)'"},
    ),
    ('run "echo a; echo b"', "run_command", {"command": "echo a; echo b"}),
    ("Please run the command: uname -a", "run_command", {"command": "uname -a"}),
    ("运行 echo hi", "run_command", {"command": "echo hi"}),
    ("执行命令 `df -h`", "run_command", {"command": "df -h"}),
    ("run pip install numpy", "run_command", {"command": "pip install numpy"}),
    ("install numpy", "install_python_packages", {"packages": ["numpy"]}),
    (
        "pip install requests==2.32.3 numpy",
        "install_python_packages",
        {"packages": ["requests==2.32.3", "numpy"]},
    ),
    (
        "Could you install the python packages pandas and scipy?",
        "install_python_packages",
        {"packages": ["pandas", "scipy"]},
    ),
    ("apt install curl", "install_apt_packages", {"packages": ["curl"]}),
    ("install the system package jq", "install_apt_packages", {"packages": ["jq"]}),
    ("安装 numpy", "install_python_packages", {"packages": ["numpy"]}),
    (
        "安装 Python 包 requests 和 numpy",
        "install_python_packages",
        {"packages": ["requests", "numpy"]},
    ),
    ("用 apt 安装 curl、jq", "install_apt_packages", {"packages": ["curl", "jq"]}),
    ("安装系统包 git", "install_apt_packages", {"packages": ["git"]}),
    ("帮我装一下 numpy", "install_python_packages", {"packages": ["numpy"]}),
    ("start a Sokoban environment", "make_env", {"env_id": "game:Sokoban-v0-easy"}),
    (
        "run a sokoban game",
        "make_env",
        {"env_id": "game:Sokoban-v0-easy"},
    ),  # not a command: not run as one
    ("运行一个推箱子游戏", "make_env", {"env_id": "game:Sokoban-v0-easy"}),
    (
        "make env game:Minesweeper-v0-hard with seed 5",
        "make_env",
        {"env_id": "game:Minesweeper-v0-hard", "seed": 5},
    ),
    ("start a hard sudoku game", "make_env", {"env_id": "game:Sudoku-v0-hard"}),
    ("创建一个推箱子环境", "make_env", {"env_id": "game:Sokoban-v0-easy"}),
    (
        "启动 game:Game2048-v0-easy 环境，种子为 9",
        "make_env",
        {"env_id": "game:Game2048-v0-easy", "seed": 9},
    ),
    ("reset the env with seed 3", "reset_env", {"seed": 3}),
    ("重置环境，种子 3", "reset_env", {"seed": 3}),
    ("step up", "step_env", {"action": "\\boxed{up}"}),
    ("step \\boxed{reveal 1 1}", "step_env", {"action": "\\boxed{reveal 1 1}"}),
    (
        "move left in env 0123abcd4567ef.e2",
        "step_env",
        {"action": "\\boxed{left}", "env": "0123abcd4567ef.e2"},
    ),
    ("环境中向上走一步", "step_env", {"action": "\\boxed{up}"}),
    ("环境走一步 left", "step_env", {"action": "\\boxed{left}"}),
    ("close the env", "close_env", {}),
    ("关闭环境", "close_env", {}),
    ("stop the sandbox", "stop_sandbox", {}),
    ("shut it down", "stop_sandbox", {}),
    ("停止沙箱", "stop_sandbox", {}),
    ("kill this sandbox", "stop_sandbox", {}),
    ("删除这个沙箱", "stop_sandbox", {}),
    ("delete /tmp/a.txt", "delete_file", {"path": "/tmp/a.txt"}),
    ("删除 /tmp/a.txt", "delete_file", {"path": "/tmp/a.txt"}),
    ('write "hello" to /tmp/a.txt', "write_file", {"path": "/tmp/a.txt", "content": "hello"}),
    (
        "write hello world to /tmp/b.txt",
        "write_file",
        {"path": "/tmp/b.txt", "content": "hello world"},
    ),
    (
        "create file /tmp/c.txt with content abc",
        "write_file",
        {"path": "/tmp/c.txt", "content": "abc"},
    ),
    ('把 "你好" 写入 /tmp/a.txt', "write_file", {"path": "/tmp/a.txt", "content": "你好"}),
    ("把 你好世界 写入 /tmp/z.txt", "write_file", {"path": "/tmp/z.txt", "content": "你好世界"}),
    ("创建文件 /tmp/c.txt 内容为 abc", "write_file", {"path": "/tmp/c.txt", "content": "abc"}),
    ("list files in /tmp", "list_files", {"path": "/tmp"}),
    ("ls /etc", "list_files", {"path": "/etc"}),
    ("list files in /srv/env", "list_files", {"path": "/srv/env"}),  # a path's "env" is no env
    ("what's in the home folder?", "list_files", {"path": "/"}),
    ("列出 /tmp 中的文件", "list_files", {"path": "/tmp"}),
    ("/tmp 目录下有哪些文件", "list_files", {"path": "/tmp"}),
    ("show the logs", "show_logs", {}),
    (
        "show the last 20 lines of the log /var/log/dpkg.log",
        "show_logs",
        {"path": "/var/log/dpkg.log", "lines": 20},
    ),
    ("查看日志", "show_logs", {}),
    ("tail /var/log/dpkg.log", "show_logs", {"path": "/var/log/dpkg.log"}),
    ("read /etc/hostname", "read_file", {"path": "/etc/hostname"}),
    ("cat /etc/os-release.", "read_file", {"path": "/etc/os-release"}),
    ("查看文件 /etc/hostname", "read_file", {"path": "/etc/hostname"}),
    ("显示 /etc/os-release 的内容", "read_file", {"path": "/etc/os-release"}),
    ("show resource usage", "show_resource_usage", {}),
    ("how much memory is used?", "show_resource_usage", {}),
    ("资源使用情况", "show_resource_usage", {}),
    ("内存占用多少", "show_resource_usage", {}),
    ("status", "show_status", {}),
    ("is it running?", "show_status", {}),
    ("查看沙箱状态", "show_status", {}),
]


@pytest.mark.parametrize(("prompt", "action", "args"), READINGS, ids=[r[0] for r in READINGS])
def test_the_rules_read_each_prompt_as_one_action(
    prompt: str, action: str, args: dict[str, Any]
) -> None:
    reading = interpret(prompt)
    assert (reading.kind, reading.action, reading.args) == ("action", action, args)
    assert reading.language == detect_language(prompt)


def test_the_readings_cover_both_languages_and_every_action() -> None:
    assert {a for _, a, _ in READINGS} == set(ACTIONS)
    chinese = [p for p, _, _ in READINGS if detect_language(p) == "zh"]
    assert len(chinese) >= 20 and len(READINGS) - len(chinese) >= 20


def test_the_rules_are_deterministic() -> None:
    assert [interpret(p) for p, _, _ in READINGS] == [interpret(p) for p, _, _ in READINGS]


@pytest.mark.parametrize("prompt", ["help", "what can you do?", "帮助", "你能做什么？"])
def test_help(prompt: str) -> None:
    assert interpret(prompt).kind == "help"


@pytest.mark.parametrize(
    "prompt",
    [
        "make me a sandwich",
        "给我讲个笑话",
        "tell me about the weather",
        "🙂",
        "   x   ",
        "run the show",
        "is numpy installed?",
        "装修房子",
    ],
)
def test_what_the_rules_do_not_know_is_unknown(prompt: str) -> None:
    assert interpret(prompt).kind == "unknown"


@pytest.mark.parametrize(
    ("prompt", "action", "missing"),
    [
        ("install", "install_python_packages", "packages"),
        ("安装", "install_python_packages", "packages"),
        ("delete the file", "delete_file", "path"),
        ("run", "run_command", "command"),
        ("write to /tmp/x", "write_file", "content"),
        ("start an environment", "make_env", "env_id"),
        ("step the env", "step_env", "action"),
    ],
)
def test_a_missing_part_is_named_not_guessed(prompt: str, action: str, missing: str) -> None:
    reading = interpret(prompt)
    assert (reading.kind, reading.action, reading.missing) == ("incomplete", action, missing)


@pytest.mark.parametrize(
    ("prompt", "language"),
    [("install numpy", "en"), ("安装 numpy", "zh"), ("run `echo 你好`", "zh"), ("", "en")],
)
def test_language_follows_the_prompt(prompt: str, language: str) -> None:
    assert detect_language(prompt) == language


@pytest.mark.parametrize(
    ("command", "destructive"),
    [
        ("rm -rf /tmp/x", True),
        ("cd /tmp && rm x", True),
        ("kill -9 1", True),
        ("pkill python", True),
        ("dd if=/dev/zero of=/tmp/f bs=1M count=1", True),
        ("find /tmp -name '*.pyc' -delete", True),
        ("git reset --hard HEAD", True),
        ("pip uninstall -y numpy", True),
        ("apt-get remove -y curl", True),
        ("shutdown -h now", True),
        ("mv a b", True),
        ("sudo rm x", True),
        ("ls -la", False),
        ("echo rm", False),
        ("python3 -m pip install numpy", False),
        ("grep -r kill /etc", False),
        ("cat /tmp/firmware", False),
    ],
)
def test_destructive_commands(command: str, destructive: bool) -> None:
    assert is_destructive_command(command) is destructive


def test_previews_say_what_runs() -> None:
    assert plan("install_python_packages", {"packages": ["numpy", "requests==2.32.3"]}).preview == (
        "python3 -m pip install --disable-pip-version-check --no-input numpy requests==2.32.3"
    )
    assert plan("install_apt_packages", {"packages": ["curl"]}).preview == (
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl"
    )
    delete = plan("delete_file", {"path": "/tmp/a b"})
    assert (delete.preview, delete.destructive) == ("rm -rf -- '/tmp/a b'", True)
    assert plan("run_command", {"command": "rm -rf /tmp/x"}).destructive
    assert not plan("run_command", {"command": "ls"}).destructive
    assert plan("stop_sandbox", {}).destructive and plan("close_env", {}).destructive
    assert (
        plan("show_logs", {"path": "/var/log/x.log", "lines": 5}).preview
        == "tail -n 5 -- /var/log/x.log"
    )


@pytest.mark.parametrize(
    ("action", "args", "field", "value"),
    [
        ("nope", {}, "action", "nope"),
        (
            "install_python_packages",
            {"packages": ["numpy", "x;rm"]},
            "install_python_packages.packages[1]",
            "x;rm",
        ),
        ("install_apt_packages", {"packages": ["-rf"]}, "install_apt_packages.packages[0]", "-rf"),
        ("install_python_packages", {}, "install_python_packages.packages", None),
        ("run_command", {"command": ["ls"]}, "run_command.command", ["ls"]),
        ("run_command", {"command": "ls", "shell": "zsh"}, "run_command.shell", "zsh"),
        ("reset_env", {"seed": "three"}, "reset_env.seed", "three"),
        ("delete_file", {"path": "/"}, "delete_file.path", "/"),
        ("write_file", {"path": "/tmp/x"}, "write_file.content", None),
    ],
)
def test_a_bad_argument_is_named_with_its_value(
    action: str, args: dict[str, Any], field: str, value: Any
) -> None:
    with pytest.raises(InvalidParameter) as caught:
        plan(action, args)
    assert (caught.value.field, caught.value.value) == (field, value)
    assert field in str(caught.value)


def test_every_action_is_a_tool_with_a_json_schema() -> None:
    for name, spec in ACTIONS.items():
        tool = spec.tool()
        assert tool["type"] == "function" and tool["function"]["name"] == name
        schema = tool["function"]["parameters"]
        assert schema["type"] == "object" and set(schema["required"]) <= set(schema["properties"])
        assert spec.summary["en"] and spec.summary["zh"]
        json.dumps(tool)


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"pip_mirror": "mirror.example"}, "pip_mirror", "mirror.example"),
        ({"apt_mirror": "ftp://x"}, "apt_mirror", "ftp://x"),
        ({"command_timeout": 0}, "command_timeout", 0),
        ({"install_timeout": "long"}, "install_timeout", "long"),
    ],
)
def test_chat_config_names_a_bad_field(kwargs: dict[str, Any], field: str, value: Any) -> None:
    with pytest.raises(InvalidParameter) as caught:
        ChatConfig(**kwargs)
    assert (caught.value.field, caught.value.value) == (field, value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_url": "127.0.0.1:9", "model": "m"}, "llm.base_url"),
        ({"base_url": "http://127.0.0.1:9", "model": " "}, "llm.model"),
        ({"base_url": "http://127.0.0.1:9", "model": "m", "max_rounds": 0}, "llm.max_rounds"),
    ],
)
def test_llm_config_names_a_bad_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        LLMConfig(**kwargs)
    assert caught.value.field == field


def test_chat_config_from_the_environment() -> None:
    assert ChatConfig.from_env({}) == ChatConfig()
    config = ChatConfig.from_env(
        {
            "ROCK_CHAT_PIP_MIRROR": "http://127.0.0.1:3141",
            "ROCK_CHAT_LLM_BASE_URL": "http://127.0.0.1:8000/v1",
            "ROCK_CHAT_LLM_MODEL": "tiny",
            "ROCK_CHAT_LLM_API_KEY": "sk-test",
        }
    )
    assert config.pip_mirror == "http://127.0.0.1:3141" and config.apt_mirror is None
    assert config.llm == LLMConfig(
        base_url="http://127.0.0.1:8000/v1", model="tiny", api_key="sk-test"
    )
    assert "sk-test" not in repr(config)
    with pytest.raises(InvalidParameter) as caught:
        ChatConfig.from_env({"ROCK_CHAT_LLM_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert caught.value.field == "ROCK_CHAT_LLM_MODEL"


def test_tool_call_arguments() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "/etc/hostname"}'},
    }
    assert tool_call_arguments(call) == ("c1", "read_file", {"path": "/etc/hostname"})
    with pytest.raises(InvalidParameter) as caught:
        tool_call_arguments(
            {"id": "c2", "function": {"name": "read_file", "arguments": "{not json"}}
        )
    assert caught.value.field == "tool_calls.function.arguments"


# -- chats that touch no sandbox ----------------------------------------------------------------


async def test_a_blank_prompt_is_refused() -> None:
    with pytest.raises(InvalidParameter) as caught:
        await Sandbox().chat("   ")
    assert caught.value.field == "prompt"


@pytest.mark.parametrize(
    ("prompt", "intro"),
    [("make me a sandwich", "I did not understand"), ("给我讲个笑话", "我没有理解")],
)
async def test_unknown_lists_what_it_can_do_and_runs_nothing(prompt: str, intro: str) -> None:
    # A handle with no sandbox: had anything tried to run, it would have raised.
    response = await Sandbox().chat(prompt, config=ChatConfig())
    assert response.reply.startswith(intro)
    assert (response.actions, response.observations, response.backend) == ([], [], None)
    for spec in ACTIONS.values():
        if spec.available is None:
            assert spec.summary[response.language] in response.reply


async def test_help_in_chinese() -> None:
    response = await Sandbox().chat("你能做什么？", config=ChatConfig())
    assert (
        response.language == "zh"
        and response.reply.startswith("我可以做这些事")
        and response.backend == "rules"
    )
    assert "例如：安装 numpy 和 requests" in response.reply


async def test_an_incomplete_prompt_names_what_is_missing() -> None:
    response = await Sandbox().chat("删除文件", config=ChatConfig())
    assert (
        response.actions == []
        and "缺少路径" in response.reply
        and "删除 /tmp/hello.txt" in response.reply
    )


async def test_a_refused_argument_runs_nothing() -> None:
    response = await Sandbox().chat("please install numpy; rm -rf /", config=ChatConfig())
    assert response.actions == [] and response.backend is None
    assert (
        "install_python_packages.packages[" in response.reply
        and "Nothing was run" in response.reply
    )


class _Broken(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"error": {"message": "the model is overloaded"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


async def test_llm_errors_name_the_url(free_port: Any) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMError) as caught:
        await Sandbox().chat(
            "make me a sandwich", config=ChatConfig(llm=LLMConfig(base_url=closed, model="m"))
        )
    assert f"{closed}/chat/completions" in str(caught.value)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    thread = threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    )
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        with pytest.raises(LLMError) as caught:
            await Sandbox().chat(
                "make me a sandwich", config=ChatConfig(llm=LLMConfig(base_url=url, model="m"))
            )
        assert "answered HTTP 503" in str(caught.value) and "overloaded" in str(caught.value)
    finally:
        server.shutdown()
        server.server_close()


_WORDS = [
    "install",
    "安装",
    "run",
    "运行",
    "`ls`",
    "delete",
    "删除",
    "/tmp/x",
    "env",
    "环境",
    "step",
    "up",
    "seed",
    "3",
    "write",
    "写入",
    '"hi"',
    "to",
    "stop",
    "停止",
    "沙箱",
    "status",
    "logs",
    "日志",
    "list",
    "files",
    "read",
    "cpu",
    "sokoban",
    "推箱子",
    "reset",
    "close",
    "关闭",
    "numpy",
    ";",
    "rm -rf /",
    "\\boxed{left}",
    "内容为",
    "把",
]


@given(st.lists(st.sampled_from(_WORDS) | st.text(max_size=12), max_size=8).map(" ".join))
@settings(max_examples=400, deadline=None)
def test_any_prompt_is_read_the_same_way_and_planned_or_refused(prompt: str) -> None:
    reading = interpret(prompt)
    assert reading == interpret(prompt)
    assert reading.kind in ("action", "help", "unknown", "incomplete")
    if reading.kind == "action":
        assert reading.action in ACTIONS
        try:
            action = plan(reading.action, reading.args)
        except InvalidParameter as exc:
            assert exc.field and exc.field.startswith(reading.action)
        else:
            assert action.preview
            if reading.action == "run_command" and is_destructive_command(reading.args["command"]):
                assert action.destructive
