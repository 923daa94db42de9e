"""The actions a chat can take: one :class:`ActionSpec` each, in :data:`ACTIONS`.

Both interpreters end here: the rule-based one (:mod:`rock.sdk.chat.rules`) names an action and
its arguments, the LLM backend (:mod:`rock.sdk.chat.llm`) offers every action as a tool. An
action's arguments are checked by :meth:`ActionSpec.check` (an
:class:`~rock_core.errors.InvalidParameter` names the field and the value), its
:meth:`~ActionSpec.preview` says what it runs, and :meth:`~ActionSpec.run` runs it through the
sandbox's own SDK calls, so it works embedded and through an admin alike.

This module is the table (:data:`ACTIONS`) and :func:`plan`; what an action runs lives in
:mod:`rock.sdk.chat._sandbox_actions` (the sandbox's actions) and
:mod:`rock.sdk.chat._env_actions` (GEM envs), :class:`ActionSpec` in
:mod:`rock.sdk.chat.action_spec`, and which commands are destructive in
:mod:`rock.sdk.chat.destructive`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rock.sdk.chat._env_actions import (
    close_env,
    env_label,
    gem_installed,
    make_env,
    make_render,
    reset_env,
    reset_render,
    step_env,
    step_render,
)
from rock.sdk.chat._sandbox_actions import (
    apt_command,
    delete_file,
    install,
    list_files,
    not_the_root,
    package_names,
    pip_command,
    read_file,
    render_install,
    resource_usage,
    rm_command,
    run_command,
    show_logs,
    show_status,
    stop_sandbox,
    tail_command,
    write_file,
)
from rock.sdk.chat.action_spec import ActionSpec, Param
from rock.sdk.chat.destructive import is_destructive_command
from rock.sdk.chat.response import ChatAction
from rock_core.errors import InvalidParameter, RockError

if TYPE_CHECKING:
    from rock.sdk.chat.session import ChatContext

__all__ = [
    "ACTIONS",
    "ActionSpec",
    "Param",
    "available_actions",
    "describe_error",
    "gem_installed",
    "is_destructive_command",
    "plan",
]

_ENV = Param(
    "env",
    "string",
    "The env's handle (from make_env); default: the env this chat made last.",
    required=False,
)
_PATH = Param("path", "string", "An absolute path inside the sandbox.")

ACTIONS: dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        ActionSpec(
            "install_python_packages",
            {
                "en": "Install Python packages with pip (through the pip mirror when one is set).",
                "zh": "用 pip 安装 Python 包（设置了 pip 镜像时经由镜像）。",
            },
            (
                Param(
                    "packages",
                    "array",
                    "Package names, optionally with versions (numpy, requests==2.32.3).",
                ),
            ),
            install("pip", pip_command),
            render_install("pip", pip_command),
            validate=package_names,
        ),
        ActionSpec(
            "install_apt_packages",
            {
                "en": "Install Debian packages with apt-get (through the apt mirror when one is set).",
                "zh": "用 apt-get 安装系统包（设置了 apt 镜像时经由镜像）。",
            },
            (Param("packages", "array", "Debian package names (curl, jq)."),),
            install("apt", apt_command),
            render_install("apt", apt_command),
            validate=package_names,
        ),
        ActionSpec(
            "run_command",
            {
                "en": "Run a shell command in the sandbox and show its output and exit code.",
                "zh": "在沙箱里运行一条 shell 命令，显示输出和退出码。",
            },
            (
                Param("command", "string", "The command line, run by /bin/sh -c."),
                Param("timeout", "integer", "Seconds it may run (default 300).", required=False),
            ),
            run_command,
            lambda a, c: a["command"],
            destructive=lambda a: is_destructive_command(a["command"]),
        ),
        ActionSpec(
            "show_resource_usage",
            {
                "en": "Show the sandbox's CPU, memory, disk and network use.",
                "zh": "显示沙箱的 CPU、内存、磁盘和网络使用情况。",
            },
            (),
            resource_usage,
            lambda a, c: "sandbox.get_statistics()",
        ),
        ActionSpec(
            "list_files",
            {"en": "List the files of a directory.", "zh": "列出目录中的文件。"},
            (Param("path", "string", "An absolute directory path (default /).", required=False),),
            list_files,
            lambda a, c: f"sandbox.list_dir({a.get('path') or '/'!r})",
        ),
        ActionSpec(
            "read_file",
            {"en": "Show a text file's content.", "zh": "显示文本文件的内容。"},
            (_PATH,),
            read_file,
            lambda a, c: f"sandbox.read_file({a['path']!r})",
        ),
        ActionSpec(
            "write_file",
            {
                "en": "Write text to a file (parents made, the file replaced).",
                "zh": "把文本写入文件（自动创建父目录，覆盖原文件）。",
            },
            (_PATH, Param("content", "string", "The text to write.")),
            write_file,
            lambda a, c: (
                f"sandbox.write_file_by_path(<{len(a['content'].encode())} bytes>, {a['path']!r})"
            ),
        ),
        ActionSpec(
            "delete_file",
            {"en": "Delete a file or directory (rm -rf).", "zh": "删除文件或目录（rm -rf）。"},
            (_PATH,),
            delete_file,
            lambda a, c: rm_command(a),
            destructive=True,
            validate=not_the_root,
        ),
        ActionSpec(
            "show_status",
            {
                "en": "Show the sandbox's state, image, size and host.",
                "zh": "显示沙箱的状态、镜像、规格和主机。",
            },
            (),
            show_status,
            lambda a, c: "sandbox.get_status()",
        ),
        ActionSpec(
            "show_logs",
            {
                "en": "Show the sandbox's lifecycle (phases, state history), or the end of a log file.",
                "zh": "显示沙箱的生命周期记录（阶段、状态历史），或日志文件的末尾。",
            },
            (
                Param(
                    "path",
                    "string",
                    "A log file to show the end of (default: the lifecycle record).",
                    required=False,
                ),
                Param(
                    "lines", "integer", "How many lines of the file (default 100).", required=False
                ),
            ),
            show_logs,
            lambda a, c: (
                tail_command(a) if a.get("path") else "sandbox.get_status() (state history)"
            ),
        ),
        ActionSpec(
            "stop_sandbox",
            {
                "en": "Stop the sandbox (with the default lifecycle it is deleted too).",
                "zh": "停止沙箱（默认生命周期下同时删除）。",
            },
            (),
            stop_sandbox,
            lambda a, c: "sandbox.stop()",
            destructive=True,
        ),
        ActionSpec(
            "make_env",
            {
                "en": "Start a GEM environment (game:Sokoban-v0-easy, ...) and show its first observation.",
                "zh": "启动一个 GEM 环境（如 game:Sokoban-v0-easy）并显示第一个观测。",
            },
            (
                Param("env_id", "string", "A GEM env id, e.g. game:Sokoban-v0-easy."),
                Param("seed", "integer", "The first episode's seed.", required=False),
            ),
            make_env,
            make_render,
            available=gem_installed,
        ),
        ActionSpec(
            "reset_env",
            {
                "en": "Reset a GEM environment (start a new episode).",
                "zh": "重置 GEM 环境（开始新的一局）。",
            },
            (Param("seed", "integer", "The episode's seed.", required=False), _ENV),
            reset_env,
            reset_render,
            available=gem_installed,
        ),
        ActionSpec(
            "step_env",
            {
                "en": "Take one step in a GEM environment with an action such as \\boxed{up}.",
                "zh": "在 GEM 环境中执行一步动作，例如 \\boxed{up}。",
            },
            (Param("action", "string", "The action text, e.g. \\boxed{up}."), _ENV),
            step_env,
            step_render,
            available=gem_installed,
        ),
        ActionSpec(
            "close_env",
            {"en": "Close a GEM environment.", "zh": "关闭 GEM 环境。"},
            (_ENV,),
            close_env,
            lambda a, c: f"{env_label(a, c)}.close()",
            destructive=True,
            available=gem_installed,
        ),
    )
}


def plan(name: str, args: Mapping[str, Any] | None, ctx: ChatContext | None = None) -> ChatAction:
    """The :class:`ChatAction` of action ``name`` with ``args`` (checked, previewed).

    :raises InvalidParameter: no such action (``action``), or a bad argument (``<action>.<field>``).
    """
    spec = ACTIONS.get(name)
    if spec is None:
        raise InvalidParameter(
            f"action: unknown action {name!r} (known: {', '.join(ACTIONS)})",
            field="action",
            value=name,
        )
    checked = spec.check(args)
    return ChatAction(
        name=name,
        args=checked,
        preview=spec.render(checked, ctx),
        destructive=spec.is_destructive(checked),
    )


def available_actions(ctx: ChatContext | None) -> list[ActionSpec]:
    """The actions offered in ``ctx`` (GEM's only when rock-gem can serve them)."""
    return [spec for spec in ACTIONS.values() if spec.available is None or spec.available(ctx)]


def describe_error(exc: BaseException) -> str:
    """An error as the chat reports it: its message, and its kind for an env's failure."""
    kind = getattr(exc, "kind", None)
    text = str(exc) if isinstance(exc, RockError) else f"{type(exc).__name__}: {exc}"
    return f"{kind}: {text}" if kind and not text.startswith(str(kind)) else text
