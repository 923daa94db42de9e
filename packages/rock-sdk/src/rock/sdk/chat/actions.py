"""The actions a chat can take: one :class:`ActionSpec` each, in :data:`ACTIONS`.

Both interpreters end here: the rule-based one (:mod:`rock.sdk.chat.rules`) names an action and
its arguments, the LLM backend (:mod:`rock.sdk.chat.llm`) offers every action as a tool. An
action's arguments are checked by :meth:`ActionSpec.check` (an
:class:`~rock_core.errors.InvalidParameter` names the field and the value), its
:meth:`~ActionSpec.preview` says what it runs, and :meth:`~ActionSpec.run` runs it through the
sandbox's own SDK calls, so it works embedded and through an admin alike.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rock.sdk.chat.response import ActionObservation, ChatAction
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

#: A package name (with an optional version or extras) that pip or apt accepts: nothing a shell reads.
PACKAGE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._+\-]*(\[[A-Za-z0-9,._\-]+\])?([<>=!~]=?[A-Za-z0-9.*+\-]+)?$"
)
#: Bytes of a file or an output kept in an observation (the rest is cut, and the cut said).
OUTPUT_LIMIT = 8000

# Programs that delete, stop or overwrite beyond repair: a command running one (as a command, not
# as an argument: "echo rm" is harmless) runs only with confirm=True.
_DESTRUCTIVE_PROGRAMS = frozenset(
    {
        "rm",
        "rmdir",
        "unlink",
        "shred",
        "wipefs",
        "kill",
        "killall",
        "pkill",
        "reboot",
        "shutdown",
        "halt",
        "poweroff",
        "truncate",
        "mkfs",
    }
)
_SEPARATORS = re.compile(r"\|\||&&|[;&|(){}`\n]|\$\(")
_PREFIXES = frozenset(
    {
        "sudo",
        "env",
        "nohup",
        "time",
        "exec",
        "command",
        "builtin",
        "xargs",
        "nice",
        "timeout",
        "then",
        "do",
        "else",
    }
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _destructive_form(w: list[str]) -> bool:
    program, args = w[0], w[1:]
    if program == "dd":
        return any(x.startswith("of=") for x in args)
    if program == "find":
        return any(x in ("-delete", "-exec", "-execdir") for x in args)
    if program == "git":
        return args[:2] == ["reset", "--hard"] or (
            args[:1] == ["clean"] and any(x.startswith("-") and "f" in x for x in args)
        )
    if program in ("apt-get", "apt", "pip", "pip3", "dpkg"):
        return bool(args) and args[0] in ("remove", "purge", "uninstall", "autoremove", "-r", "-P")
    if program == "uv":
        return args[:2] == ["pip", "uninstall"]
    return program == "mv"


def is_destructive_command(command: str) -> bool:
    """Whether a shell command deletes, stops or overwrites something: a simple command whose
    program is ``rm``, ``kill``, ``shutdown``, ``mkfs.*`` ..., or ``dd of=``, ``find -delete``,
    ``git reset --hard``, ``git clean -f``, a package removal, ``mv``, a write to a disk device.
    The chat runs such a command only with ``confirm=True``. It errs on the safe side: the text
    is split at ``;``, ``&&``, ``|``, ... even inside quotes, so ``echo 'a; rm b'`` counts."""
    for part in _SEPARATORS.split(command):
        if re.search(r">\s*/dev/(sd|nvme|vd|xvd|hd|disk)", part):
            return True
        words = part.split()
        while words and (
            words[0] in _PREFIXES or _ASSIGNMENT.match(words[0]) or words[0].startswith("-")
        ):
            words = words[1:]
        if not words:
            continue
        words[0] = posixpath.basename(words[0].strip("'\""))
        if words[0].split(".")[0] in _DESTRUCTIVE_PROGRAMS or _destructive_form(words):
            return True
    return False


@attrs.frozen
class Param:
    """One argument of an action: its JSON type (``string``, ``integer``, ``array`` of strings),
    whether it is required, and what it means (the LLM reads this)."""

    name: str
    type: str
    description: str
    required: bool = True


@attrs.frozen
class ActionSpec:
    """An action: its name, what it does (English and Chinese), its arguments, whether it is
    destructive, and how it is previewed and run."""

    name: str
    summary: dict[str, str]
    params: tuple[Param, ...]
    run: Callable[[ChatContext, dict[str, Any]], Awaitable[ActionObservation]]
    render: Callable[[dict[str, Any], ChatContext | None], str]
    destructive: bool | Callable[[dict[str, Any]], bool] = False
    #: When it is offered: ``None`` always, else a test of the context (rock-gem installed).
    available: Callable[[ChatContext | None], bool] | None = None
    #: A rule the parameters' types do not say: ``validate(action name, args)`` raises
    #: :class:`InvalidParameter` naming the field and the value.
    validate: Callable[[str, dict[str, Any]], None] | None = None

    def check(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """``args`` checked against the parameters: missing, unknown or mistyped ones raise
        :class:`InvalidParameter` naming ``<action>.<field>`` and the value."""
        args = dict(args or {})
        known = {p.name for p in self.params}
        for key in args:
            if key not in known:
                raise InvalidParameter(
                    f"{self.name}.{key}: unknown argument (expected {', '.join(sorted(known)) or 'none'})",
                    field=f"{self.name}.{key}",
                    value=args[key],
                )
        out: dict[str, Any] = {}
        for param in self.params:
            field = f"{self.name}.{param.name}"
            value = args.get(param.name)
            if value is None or value == "" or value == []:
                if param.required:
                    raise InvalidParameter(
                        f"{field}: required, got {value!r}", field=field, value=value
                    )
                continue
            out[param.name] = _typed(field, param.type, value)
        if "\x00" in str(out.get("path", "")):
            raise InvalidParameter(
                f"{self.name}.path: a NUL byte in {out['path']!r}",
                field=f"{self.name}.path",
                value=out["path"],
            )
        if self.validate is not None:
            self.validate(self.name, out)
        return out

    def is_destructive(self, args: Mapping[str, Any]) -> bool:
        """Whether these arguments make it destructive (a ``run_command`` of ``rm -rf``)."""
        return self.destructive(dict(args)) if callable(self.destructive) else self.destructive

    def tool(self) -> dict[str, Any]:
        """The action as an OpenAI ``tools`` entry (a function with a JSON schema)."""
        properties: dict[str, Any] = {}
        for p in self.params:
            schema: dict[str, Any] = {"type": p.type, "description": p.description}
            if p.type == "array":
                schema["items"] = {"type": "string"}
            properties[p.name] = schema
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.summary["en"]
                + (" Destructive: needs the user's confirmation." if self.destructive else ""),
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": [p.name for p in self.params if p.required],
                    "additionalProperties": False,
                },
            },
        }


def _package_names(action: str, args: dict[str, Any]) -> None:
    for i, name in enumerate(args["packages"]):
        if not PACKAGE.match(name):
            raise InvalidParameter(
                f"{action}.packages[{i}]: expected a package name, got {name!r}",
                field=f"{action}.packages[{i}]",
                value=name,
            )


def _not_the_root(action: str, args: dict[str, Any]) -> None:
    if posixpath.normpath(args["path"]) in ("/", "//", "."):
        raise InvalidParameter(
            f"{action}.path: refusing to delete {args['path']!r}",
            field=f"{action}.path",
            value=args["path"],
        )


def _typed(field: str, kind: str, value: Any) -> Any:
    if kind == "string":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise InvalidParameter(
                f"{field}: expected a string, got {value!r}", field=field, value=value
            )
        return value
    if kind == "integer":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidParameter(
                f"{field}: expected an integer, got {value!r}", field=field, value=value
            )
        return value
    if kind == "array":
        if isinstance(value, str):
            value = value.replace(",", " ").split()
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise InvalidParameter(
                f"{field}: expected a list of names, got {value!r}", field=field, value=value
            )
        return list(value)
    raise AssertionError(kind)


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


# -- running ------------------------------------------------------------------------------------------


def _cut(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return (
        text[: OUTPUT_LIMIT // 4]
        + f"\n... ({len(text) - OUTPUT_LIMIT} characters cut) ...\n"
        + text[-OUTPUT_LIMIT * 3 // 4 :]
    )


async def _shell(ctx: ChatContext, name: str, script: str, timeout: float) -> ActionObservation:
    from rock_core.actions import Command

    result = await ctx.sandbox.execute(Command(command=["/bin/sh", "-c", script], timeout=timeout))
    output = (result.stdout or "") + (result.stderr or "")
    if getattr(result, "timed_out", False):
        output += f"\n(stopped after {timeout:g} s)"
    return ActionObservation(
        action=name, ok=result.exit_code == 0, output=_cut(output), exit_code=result.exit_code
    )


def _pip_command(args: dict[str, Any]) -> str:
    return "python3 -m pip install --disable-pip-version-check --no-input " + " ".join(
        shlex.quote(p) for p in args["packages"]
    )


def _apt_command(args: dict[str, Any]) -> str:
    names = " ".join(shlex.quote(p) for p in args["packages"])
    return f"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {names}"


def _mirror_step(kind: str, ctx: ChatContext | None) -> str | None:
    mirror = (
        None if ctx is None else (ctx.config.pip_mirror if kind == "pip" else ctx.config.apt_mirror)
    )
    return f"sandbox.network.speedup({kind!r}, {mirror!r})" if mirror else None


def _render_install(
    kind: str, command: Callable[[dict[str, Any]], str]
) -> Callable[[dict[str, Any], Any], str]:
    def render(args: dict[str, Any], ctx: ChatContext | None) -> str:
        step = _mirror_step(kind, ctx)
        return f"{step}; {command(args)}" if step else command(args)

    return render


def _install(
    kind: str, command: Callable[[dict[str, Any]], str]
) -> Callable[[ChatContext, dict[str, Any]], Awaitable[ActionObservation]]:
    async def run(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
        name = f"install_{'python' if kind == 'pip' else 'apt'}_packages"
        mirror = ctx.config.pip_mirror if kind == "pip" else ctx.config.apt_mirror
        if mirror:
            from rock.sdk.sandbox.speedup import SpeedupType

            obs = await ctx.sandbox.network.speedup(SpeedupType(kind), mirror)
            if obs.exit_code != 0:
                reason = obs.failure_reason or obs.output
                return ActionObservation(
                    action=name,
                    ok=False,
                    output=f"speedup {kind} {mirror}: {reason}",
                    exit_code=obs.exit_code,
                )
        observation = await _shell(ctx, name, command(args), ctx.config.install_timeout)
        return attrs.evolve(observation, data={"packages": args["packages"], "mirror": mirror})

    return run


async def _run_command(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    return await _shell(
        ctx,
        "run_command",
        args["command"],
        float(args.get("timeout") or ctx.config.command_timeout),
    )


def _human_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "?"


def _pct(value: Any) -> str:
    return f"{value:.1f}%" if isinstance(value, (int, float)) else "?"


async def _resource_usage(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    stats = await ctx.sandbox.get_statistics()
    lines = [
        f"cpu: {_pct(stats.get('cpu'))}",
        f"memory: {_pct(stats.get('mem'))} ({_human_bytes(stats.get('mem_bytes'))} of {_human_bytes(stats.get('mem_limit_bytes'))})",
        f"disk: {_pct(stats.get('disk'))} ({_human_bytes(stats.get('disk_used_bytes'))} of {_human_bytes(stats.get('disk_total_bytes'))})",
        f"network: {_human_bytes(stats.get('net'))} received and sent",
    ]
    return ActionObservation(
        action="show_resource_usage", ok=True, output="\n".join(lines), data=dict(stats)
    )


async def _list_files(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    path = args.get("path") or "/"
    listing = await ctx.sandbox.list_dir(path)
    rows = []
    for entry in sorted(listing.entries, key=lambda e: e.name):
        mark = {"dir": "/", "symlink": "@"}.get(entry.type, "")
        rows.append(f"{entry.name}{mark}" if mark else f"{entry.name}  {entry.size}")
    names = [e.name for e in listing.entries]
    return ActionObservation(
        action="list_files",
        ok=True,
        output=_cut("\n".join(rows) or "(empty)"),
        data={"path": path, "names": sorted(names)},
    )


async def _read_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    from rock_core.actions import ReadFileRequest

    response = await ctx.sandbox.read_file(ReadFileRequest(path=args["path"], errors="replace"))
    return ActionObservation(
        action="read_file",
        ok=True,
        output=_cut(response.content),
        data={"path": args["path"], "size": len(response.content)},
    )


async def _write_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    response = await ctx.sandbox.write_file_by_path(args["content"], args["path"])
    return ActionObservation(
        action="write_file",
        ok=bool(response.success),
        output=response.message,
        data={"path": args["path"]},
    )


def _rm_command(args: dict[str, Any]) -> str:
    return f"rm -rf -- {shlex.quote(args['path'])}"


async def _delete_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    return await _shell(ctx, "delete_file", _rm_command(args), ctx.config.command_timeout)


async def _status(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    status = await ctx.sandbox.get_status(include_all_states=True)
    state = status.state.value if status.state is not None else "unknown"
    facts = {
        "sandbox_id": status.sandbox_id,
        "state": state,
        "reason": status.reason or None,
        "image": status.image,
        "cpus": status.cpus,
        "memory": status.memory,
        "host": status.host_name,
        "started": status.start_time.isoformat(timespec="seconds") if status.start_time else None,
    }
    lines = [f"{k}: {v}" for k, v in facts.items() if v not in (None, "")]
    lines += [f"note: {note}" for note in status.notes]
    return ActionObservation(action="show_status", ok=True, output="\n".join(lines), data=facts)


def _tail_command(args: dict[str, Any]) -> str:
    return f"tail -n {int(args.get('lines') or 100)} -- {shlex.quote(args['path'])}"


async def _logs(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    if args.get("path"):
        return await _shell(ctx, "show_logs", _tail_command(args), ctx.config.command_timeout)
    status = await ctx.sandbox.get_status(include_all_states=True)
    lines = []
    for name, phase in (status.status or {}).items():
        lines.append(
            f"phase {name}: {phase.status.value}" + (f": {phase.message}" if phase.message else "")
        )
    for entry in status.state_history:
        when = entry.timestamp.strftime("%Y-%m-%d %H:%M:%S") if entry.timestamp else ""
        lines.append(
            f"{when} {entry.from_state.value} -> {entry.to_state.value} ({entry.event})".strip()
        )
    lines += [f"note: {note}" for note in status.notes]
    return ActionObservation(action="show_logs", ok=True, output="\n".join(lines) or "(no history)")


async def _stop(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    sandbox_id = ctx.sandbox.sandbox_id
    # Sandbox.stop() swallows failures (ROCK's contract); the chat must report them.
    await ctx.sandbox._get_engine().stop(ctx.sandbox._require_id("chat"))
    return ActionObservation(
        action="stop_sandbox",
        ok=True,
        output=f"sandbox {sandbox_id} stopped",
        data={"sandbox_id": sandbox_id},
    )


# -- GEM envs (rock-gem) ------------------------------------------------------------------------------


def gem_installed(ctx: ChatContext | None = None) -> bool:
    """Whether GEM envs can be made: rock-gem is installed here (embedded), or the sandbox is on
    an admin (which answers for its own plugins)."""
    if ctx is not None and ctx.sandbox.config.base_url:
        return True
    from importlib.util import find_spec

    return find_spec("rock_gem") is not None


def _env_label(args: dict[str, Any], ctx: ChatContext | None) -> str:
    handle = args.get("env") or (ctx.state.current if ctx is not None else None)
    return f"env {handle}" if handle else "env"


async def _make_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    from rock.sdk.envs import amake

    env = await amake(args["env_id"], base_url=ctx.sandbox.config.base_url, api_key=ctx.api_key())
    ctx.state.add(env)
    observation, info = await env.reset(seed=args.get("seed"))
    return ActionObservation(
        action="make_env",
        ok=True,
        output=_env_text(observation, info),
        data={
            "env": env.sandbox_id,
            "env_id": args["env_id"],
            "observation": observation,
            "info": _plain(info),
        },
    )


async def _reset_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    observation, info = await env.reset(seed=args.get("seed"))
    return ActionObservation(
        action="reset_env",
        ok=True,
        output=_env_text(observation, info),
        data={"env": env.sandbox_id, "observation": observation, "info": _plain(info)},
    )


async def _step_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    observation, reward, terminated, truncated, info = await env.step(args["action"])
    return ActionObservation(
        action="step_env",
        ok=True,
        output=_env_text(observation, info),
        data={
            "env": env.sandbox_id,
            "observation": observation,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "info": _plain(info),
        },
    )


async def _close_env(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    env = ctx.state.get(ctx, args.get("env"))
    handle = env.sandbox_id
    await env.aclose()
    ctx.state.discard(handle)
    return ActionObservation(
        action="close_env", ok=True, output=f"env {handle} closed", data={"env": handle}
    )


def _env_text(observation: Any, info: Any) -> str:
    # GEM games put the board they show the player in info["suffix"].
    suffix = info.get("suffix") if isinstance(info, dict) else None
    text = str(observation)
    return (
        f"{text}\n{suffix}"
        if isinstance(suffix, str) and suffix.strip() and suffix not in text
        else text
    )


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def _step_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    return f"{_env_label(args, ctx)}.step({args['action']!r})"


def _reset_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    seed = args.get("seed")
    return f"{_env_label(args, ctx)}.reset({'' if seed is None else f'seed={seed}'})"


def _make_render(args: dict[str, Any], ctx: ChatContext | None) -> str:
    seed = args.get("seed")
    return f"rock.amake({args['env_id']!r}); env.reset({'' if seed is None else f'seed={seed}'})"


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
            _install("pip", _pip_command),
            _render_install("pip", _pip_command),
            validate=_package_names,
        ),
        ActionSpec(
            "install_apt_packages",
            {
                "en": "Install Debian packages with apt-get (through the apt mirror when one is set).",
                "zh": "用 apt-get 安装系统包（设置了 apt 镜像时经由镜像）。",
            },
            (Param("packages", "array", "Debian package names (curl, jq)."),),
            _install("apt", _apt_command),
            _render_install("apt", _apt_command),
            validate=_package_names,
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
            _run_command,
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
            _resource_usage,
            lambda a, c: "sandbox.get_statistics()",
        ),
        ActionSpec(
            "list_files",
            {"en": "List the files of a directory.", "zh": "列出目录中的文件。"},
            (Param("path", "string", "An absolute directory path (default /).", required=False),),
            _list_files,
            lambda a, c: f"sandbox.list_dir({a.get('path') or '/'!r})",
        ),
        ActionSpec(
            "read_file",
            {"en": "Show a text file's content.", "zh": "显示文本文件的内容。"},
            (_PATH,),
            _read_file,
            lambda a, c: f"sandbox.read_file({a['path']!r})",
        ),
        ActionSpec(
            "write_file",
            {
                "en": "Write text to a file (parents made, the file replaced).",
                "zh": "把文本写入文件（自动创建父目录，覆盖原文件）。",
            },
            (_PATH, Param("content", "string", "The text to write.")),
            _write_file,
            lambda a, c: (
                f"sandbox.write_file_by_path(<{len(a['content'].encode())} bytes>, {a['path']!r})"
            ),
        ),
        ActionSpec(
            "delete_file",
            {"en": "Delete a file or directory (rm -rf).", "zh": "删除文件或目录（rm -rf）。"},
            (_PATH,),
            _delete_file,
            lambda a, c: _rm_command(a),
            destructive=True,
            validate=_not_the_root,
        ),
        ActionSpec(
            "show_status",
            {
                "en": "Show the sandbox's state, image, size and host.",
                "zh": "显示沙箱的状态、镜像、规格和主机。",
            },
            (),
            _status,
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
            _logs,
            lambda a, c: (
                _tail_command(a) if a.get("path") else "sandbox.get_status() (state history)"
            ),
        ),
        ActionSpec(
            "stop_sandbox",
            {
                "en": "Stop the sandbox (with the default lifecycle it is deleted too).",
                "zh": "停止沙箱（默认生命周期下同时删除）。",
            },
            (),
            _stop,
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
            _make_env,
            _make_render,
            available=gem_installed,
        ),
        ActionSpec(
            "reset_env",
            {
                "en": "Reset a GEM environment (start a new episode).",
                "zh": "重置 GEM 环境（开始新的一局）。",
            },
            (Param("seed", "integer", "The episode's seed.", required=False), _ENV),
            _reset_env,
            _reset_render,
            available=gem_installed,
        ),
        ActionSpec(
            "step_env",
            {
                "en": "Take one step in a GEM environment with an action such as \\boxed{up}.",
                "zh": "在 GEM 环境中执行一步动作，例如 \\boxed{up}。",
            },
            (Param("action", "string", "The action text, e.g. \\boxed{up}."), _ENV),
            _step_env,
            _step_render,
            available=gem_installed,
        ),
        ActionSpec(
            "close_env",
            {"en": "Close a GEM environment.", "zh": "关闭 GEM 环境。"},
            (_ENV,),
            _close_env,
            lambda a, c: f"{_env_label(a, c)}.close()",
            destructive=True,
            available=gem_installed,
        ),
    )
}


def available_actions(ctx: ChatContext | None) -> list[ActionSpec]:
    """The actions offered in ``ctx`` (GEM's only when rock-gem can serve them)."""
    return [spec for spec in ACTIONS.values() if spec.available is None or spec.available(ctx)]


def describe_error(exc: BaseException) -> str:
    """An error as the chat reports it: its message, and its kind for an env's failure."""
    kind = getattr(exc, "kind", None)
    text = str(exc) if isinstance(exc, RockError) else f"{type(exc).__name__}: {exc}"
    return f"{kind}: {text}" if kind and not text.startswith(str(kind)) else text
