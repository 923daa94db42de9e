"""The chat's own words, in English and Chinese (the model's words are its own)."""

from __future__ import annotations

from typing import Any

from rock.sdk.chat.response import Language

__all__ = ["EXAMPLES", "say"]

_TEXT: dict[str, dict[str, str]] = {
    "will_run": {"en": "Will run: {preview}", "zh": "将执行：{preview}"},
    "dry_run": {"en": "Dry run: nothing was run.", "zh": "试运行：没有执行任何操作。"},
    "confirm": {
        "en": "This is destructive ({previews}), so nothing was run. Ask again with confirm=True "
        "(rock sandbox chat --yes) to run it.",
        "zh": "这是破坏性操作（{previews}），因此没有执行。确认后请带 confirm=True 再次请求"
        "（命令行：rock sandbox chat --yes）。",
    },
    "failed": {"en": "Failed: {action}{code}.", "zh": "失败：{action}{code}。"},
    "exit_code": {"en": " (exit code {code})", "zh": "（退出码 {code}）"},
    "not_run": {
        "en": "Not run after the failure: {previews}.",
        "zh": "因前面的失败未执行：{previews}。",
    },
    "unknown": {
        "en": "I did not understand that, so I ran nothing. Here is what I can do:",
        "zh": "我没有理解这条指令，因此没有执行任何操作。我可以做这些事：",
    },
    "help": {"en": "Here is what I can do:", "zh": "我可以做这些事："},
    "example": {"en": "Example: {example}", "zh": "例如：{example}"},
    "needs_confirm": {
        "en": " (destructive: needs confirm=True)",
        "zh": "（破坏性操作：需要 confirm=True）",
    },
    "incomplete": {
        "en": "I understood that you want to {what}, but the {missing} is missing, so I ran nothing. For example: {example}",
        "zh": "我理解您想要{what}，但缺少{missing}，因此没有执行。例如：{example}",
    },
    "invalid": {
        "en": "I cannot do that: {error}. Nothing was run.",
        "zh": "无法执行：{error}。没有执行任何操作。",
    },
    "unavailable": {
        "en": "GEM environments need the rock-gem package (pip install rock-gem); nothing was run.",
        "zh": "GEM 环境需要安装 rock-gem 包（pip install rock-gem）；没有执行任何操作。",
    },
    "rounds": {
        "en": "The model asked for more than {rounds} rounds of tools; stopped there.",
        "zh": "模型请求的工具调用超过 {rounds} 轮，已停止。",
    },
    "llm_rejected": {
        "en": "Not run (the model's call was invalid: {error}).",
        "zh": "未执行（模型的调用无效：{error}）。",
    },
    # What each action did.
    "install_python_packages": {
        "en": "Installed {packages} with pip{via}.",
        "zh": "已用 pip 安装 {packages}{via}。",
    },
    "install_apt_packages": {
        "en": "Installed {packages} with apt-get{via}.",
        "zh": "已用 apt-get 安装 {packages}{via}。",
    },
    "via": {"en": " through the mirror {mirror}", "zh": "（经由镜像 {mirror}）"},
    "run_command": {
        "en": "The command exited with code {code}.",
        "zh": "命令已结束，退出码 {code}。",
    },
    "show_resource_usage": {
        "en": "Resource usage of sandbox {sandbox}:",
        "zh": "沙箱 {sandbox} 的资源使用情况：",
    },
    "list_files": {"en": "Files in {path}:", "zh": "{path} 中的文件："},
    "read_file": {"en": "Content of {path}:", "zh": "{path} 的内容："},
    "write_file": {"en": "Wrote {size} bytes to {path}.", "zh": "已向 {path} 写入 {size} 字节。"},
    "delete_file": {"en": "Deleted {path}.", "zh": "已删除 {path}。"},
    "show_status": {"en": "Status of sandbox {sandbox}:", "zh": "沙箱 {sandbox} 的状态："},
    "show_logs": {"en": "Lifecycle of sandbox {sandbox}:", "zh": "沙箱 {sandbox} 的生命周期记录："},
    "show_logs_file": {"en": "Last lines of {path}:", "zh": "{path} 的最后几行："},
    "stop_sandbox": {"en": "Stopped sandbox {sandbox}.", "zh": "已停止沙箱 {sandbox}。"},
    "make_env": {
        "en": "Started {env_id} as env {env}. First observation:",
        "zh": "已启动 {env_id}，环境编号 {env}。第一个观测：",
    },
    "reset_env": {"en": "Reset env {env}. Observation:", "zh": "已重置环境 {env}。观测："},
    "step_env": {
        "en": "Stepped env {env}: reward {reward}, terminated {terminated}, truncated {truncated}. Observation:",
        "zh": "环境 {env} 已执行一步：奖励 {reward}，终止 {terminated}，截断 {truncated}。观测：",
    },
    "close_env": {"en": "Closed env {env}.", "zh": "已关闭环境 {env}。"},
}

#: What each action is called in an "incomplete" reply, and the part that was missing.
WHAT: dict[str, dict[str, str]] = {
    "install_python_packages": {"en": "install Python packages", "zh": "安装 Python 包"},
    "install_apt_packages": {"en": "install system packages", "zh": "安装系统包"},
    "run_command": {"en": "run a command", "zh": "运行命令"},
    "delete_file": {"en": "delete something", "zh": "删除文件"},
    "write_file": {"en": "write a file", "zh": "写文件"},
    "make_env": {"en": "start an environment", "zh": "启动环境"},
    "step_env": {"en": "step the environment", "zh": "在环境中执行一步"},
}
MISSING: dict[str, dict[str, str]] = {
    "packages": {"en": "package name", "zh": "包名"},
    "command": {"en": "command", "zh": "命令"},
    "path": {
        "en": "path (an absolute path such as /tmp/notes.txt)",
        "zh": "路径（绝对路径，例如 /tmp/notes.txt）",
    },
    "content": {"en": "content (put it in quotes)", "zh": "内容（请放在引号里）"},
    "env_id": {"en": "game or GEM id", "zh": "游戏名或 GEM 环境 ID"},
    "action": {"en": "action", "zh": "动作"},
}

#: One example prompt per action, in each language (the help reply lists them).
EXAMPLES: dict[str, dict[str, str]] = {
    "install_python_packages": {"en": "install numpy requests", "zh": "安装 numpy 和 requests"},
    "install_apt_packages": {"en": "apt install curl", "zh": "用 apt 安装 curl"},
    "run_command": {"en": "run `python3 --version`", "zh": "运行 `python3 --version`"},
    "show_resource_usage": {"en": "show resource usage", "zh": "显示资源使用情况"},
    "list_files": {"en": "list files in /tmp", "zh": "列出 /tmp 中的文件"},
    "read_file": {"en": "read /etc/os-release", "zh": "查看文件 /etc/os-release"},
    "write_file": {"en": "write 'hello' to /tmp/hello.txt", "zh": "把「你好」写入 /tmp/hello.txt"},
    "delete_file": {"en": "delete /tmp/hello.txt", "zh": "删除 /tmp/hello.txt"},
    "show_status": {"en": "show status", "zh": "查看沙箱状态"},
    "show_logs": {"en": "show the logs", "zh": "查看日志"},
    "stop_sandbox": {"en": "stop the sandbox", "zh": "停止沙箱"},
    "make_env": {"en": "start a Sokoban environment", "zh": "创建一个推箱子环境"},
    "reset_env": {"en": "reset the env with seed 3", "zh": "重置环境，种子 3"},
    "step_env": {"en": "step up", "zh": "环境中向上走一步"},
    "close_env": {"en": "close the env", "zh": "关闭环境"},
}


def say(key: str, language: Language, **values: Any) -> str:
    """The text ``key`` in ``language`` with ``values`` filled in."""
    return _TEXT[key][language].format(**values)
