"""How the chat's sandbox actions run: installs (through the mirror when one is set), commands,
files, resource use, status, logs and stop, each through the sandbox's own SDK calls, so it works
embedded and through an admin alike; and the rules their arguments' types do not say."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from rock.sdk.chat.response import ActionObservation
from rock_core.errors import InvalidParameter

if TYPE_CHECKING:
    from rock.sdk.chat.session import ChatContext

__all__ = [
    "OUTPUT_LIMIT",
    "PACKAGE",
    "apt_command",
    "delete_file",
    "install",
    "list_files",
    "not_the_root",
    "package_names",
    "pip_command",
    "read_file",
    "render_install",
    "resource_usage",
    "rm_command",
    "run_command",
    "show_logs",
    "show_status",
    "stop_sandbox",
    "tail_command",
    "write_file",
]

#: A package name (with an optional version or extras) that pip or apt accepts: nothing a shell reads.
PACKAGE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._+\-]*(\[[A-Za-z0-9,._\-]+\])?([<>=!~]=?[A-Za-z0-9.*+\-]+)?$"
)
#: Bytes of a file or an output kept in an observation (the rest is cut, and the cut said).
OUTPUT_LIMIT = 8000


def package_names(action: str, args: dict[str, Any]) -> None:
    for i, name in enumerate(args["packages"]):
        if not PACKAGE.match(name):
            raise InvalidParameter(
                f"{action}.packages[{i}]: expected a package name, got {name!r}",
                field=f"{action}.packages[{i}]",
                value=name,
            )


def not_the_root(action: str, args: dict[str, Any]) -> None:
    if posixpath.normpath(args["path"]) in ("/", "//", "."):
        raise InvalidParameter(
            f"{action}.path: refusing to delete {args['path']!r}",
            field=f"{action}.path",
            value=args["path"],
        )


def cut(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return (
        text[: OUTPUT_LIMIT // 4]
        + f"\n... ({len(text) - OUTPUT_LIMIT} characters cut) ...\n"
        + text[-OUTPUT_LIMIT * 3 // 4 :]
    )


async def shell(ctx: ChatContext, name: str, script: str, timeout: float) -> ActionObservation:
    from rock_core.actions import Command

    result = await ctx.sandbox.execute(Command(command=["/bin/sh", "-c", script], timeout=timeout))
    output = (result.stdout or "") + (result.stderr or "")
    if getattr(result, "timed_out", False):
        output += f"\n(stopped after {timeout:g} s)"
    return ActionObservation(
        action=name, ok=result.exit_code == 0, output=cut(output), exit_code=result.exit_code
    )


def pip_command(args: dict[str, Any]) -> str:
    return "python3 -m pip install --disable-pip-version-check --no-input " + " ".join(
        shlex.quote(p) for p in args["packages"]
    )


def apt_command(args: dict[str, Any]) -> str:
    names = " ".join(shlex.quote(p) for p in args["packages"])
    return f"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {names}"


def _mirror_step(kind: str, ctx: ChatContext | None) -> str | None:
    mirror = (
        None if ctx is None else (ctx.config.pip_mirror if kind == "pip" else ctx.config.apt_mirror)
    )
    return f"sandbox.network.speedup({kind!r}, {mirror!r})" if mirror else None


def render_install(
    kind: str, command: Callable[[dict[str, Any]], str]
) -> Callable[[dict[str, Any], Any], str]:
    def render(args: dict[str, Any], ctx: ChatContext | None) -> str:
        step = _mirror_step(kind, ctx)
        return f"{step}; {command(args)}" if step else command(args)

    return render


def install(
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
        observation = await shell(ctx, name, command(args), ctx.config.install_timeout)
        return attrs.evolve(observation, data={"packages": args["packages"], "mirror": mirror})

    return run


async def run_command(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    return await shell(
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


async def resource_usage(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
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


async def list_files(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
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
        output=cut("\n".join(rows) or "(empty)"),
        data={"path": path, "names": sorted(names)},
    )


async def read_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    from rock_core.actions import ReadFileRequest

    response = await ctx.sandbox.read_file(ReadFileRequest(path=args["path"], errors="replace"))
    return ActionObservation(
        action="read_file",
        ok=True,
        output=cut(response.content),
        data={"path": args["path"], "size": len(response.content)},
    )


async def write_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    response = await ctx.sandbox.write_file_by_path(args["content"], args["path"])
    return ActionObservation(
        action="write_file",
        ok=bool(response.success),
        output=response.message,
        data={"path": args["path"]},
    )


def rm_command(args: dict[str, Any]) -> str:
    return f"rm -rf -- {shlex.quote(args['path'])}"


async def delete_file(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    return await shell(ctx, "delete_file", rm_command(args), ctx.config.command_timeout)


async def show_status(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
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


def tail_command(args: dict[str, Any]) -> str:
    return f"tail -n {int(args.get('lines') or 100)} -- {shlex.quote(args['path'])}"


async def show_logs(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    if args.get("path"):
        return await shell(ctx, "show_logs", tail_command(args), ctx.config.command_timeout)
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


async def stop_sandbox(ctx: ChatContext, args: dict[str, Any]) -> ActionObservation:
    sandbox_id = ctx.sandbox.sandbox_id
    # Sandbox.stop() swallows failures (ROCK's contract); the chat must report them.
    await ctx.sandbox._get_driver().stop(ctx.sandbox._require_id("chat"))
    return ActionObservation(
        action="stop_sandbox",
        ok=True,
        output=f"sandbox {sandbox_id} stopped",
        data={"sandbox_id": sandbox_id},
    )
