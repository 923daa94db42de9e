"""``rock sandbox list|create|status|exec|logs|stop|delete``: sandboxes for people.

Which server: ``--base-url``, else ``$ROCK_BASE_URL``, else the admin that ``rock admin start``
runs for this state directory (``$ROCK_ADMIN_STATE_DIR`` or ``~/.rock/admin``), else embedded
mode. In embedded mode sandboxes belong to the ``rock`` process itself and are removed when it
exits, so ``list`` shows none, ``status`` and the others answer "not found", and ``create``
refuses (a sandbox that disappears as the command returns is of no use) and suggests
``rock admin start``. ``ROCK_API_KEY`` is sent when set.

Output: tables (and plain lines) by default, ``--json`` for scripts. ``create`` prints only the
new id on stdout, so ``ID=$(rock sandbox create)`` works; waits show a spinner on a terminal.

Exit codes (scripts may rely on them):

====  ==========================================================================================
0     success
1     an error (the server is unreachable, the request failed, the sandbox is in the wrong state)
2     bad usage (unknown option, missing argument)
3     no such sandbox (unknown id; for ``exec``/``logs`` also: no longer running)
====  ==========================================================================================

``rock sandbox exec`` exits with the command's own exit code (128+N when a signal N killed it,
124 when ``--timeout`` cut it); exit codes 1-3 then come from rock only when the command did
not run (its messages start with ``rock:``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import click

from rock._cli_common import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    Failure,
    Target,
    base_url_option,
    fail,
    json_option,
    list_items,
    print_json,
    print_table,
    resolve_target,
    run,
    sandbox_status,
    spinner,
    state_of,
    when,
    when_text,
)
from rock_core.actions import Command, SandboxStatusResponse
from rock_core.converters import unstructure_wire
from rock_core.errors import InvalidParameter
from rock_core.sizes import size_to_bytes
from rock_core.states import LIVE_STATES, State

__all__ = ["EXIT_ERROR", "EXIT_NOT_FOUND", "EXIT_OK", "EXIT_USAGE", "sandbox"]

_EXIT_TIMEOUT = 124  # as timeout(1)
_DELETE_WAIT = 60.0  # seconds `delete` waits for the container to be gone


def _security(security: dict[str, Any] | None) -> str | None:
    """The hardening of a sandbox in one line: ``pids 4096, nofile 16384, no-new-privileges, ...``."""
    if not security:
        return None
    parts = []
    for key, label in (("network", "network"), ("pids_limit", "pids"), ("nofile_limit", "nofile")):
        if security.get(key) is not None:
            parts.append(f"{label} {security[key]}")
    if security.get("no_new_privileges"):
        parts.append("no-new-privileges")
    if security.get("rocklet_auth"):
        parts.append("rocklet secret")
    if security.get("capabilities") is not None:
        parts.append("caps " + (",".join(security["capabilities"]) or "none"))
    return ", ".join(parts)


# -- rock sandbox ---------------------------------------------------------------------------------------


@click.group()
def sandbox() -> None:
    """List, create, inspect, run commands in, stop and delete sandboxes.

    Acts on the admin server at --base-url, else $ROCK_BASE_URL, else the admin `rock admin
    start` runs locally; without one, embedded mode: sandboxes belong to this `rock` process and
    go away when it exits, so `create` refuses there (start a server with `rock admin start`).

    Exit codes: 0 ok, 1 error, 2 bad usage, 3 no such sandbox; `exec` exits with the command's
    own code.
    """


@sandbox.command("list")
@base_url_option
@json_option
@click.option("--user-id", default=None, help="Only this user's sandboxes.")
@click.option("--experiment-id", default=None, help="Only this experiment's sandboxes.")
@click.option("--namespace", default=None, help="Only this namespace's sandboxes.")
@click.option("--image", default=None, help="Only sandboxes of this image.")
@click.option(
    "--state",
    type=click.Choice(sorted(s.value for s in LIVE_STATES)),
    default=None,
    help="Only this state.",
)
def list_command(
    base_url: str | None,
    as_json: bool,
    user_id: str | None,
    experiment_id: str | None,
    namespace: str | None,
    image: str | None,
    state: str | None,
) -> None:
    """List the pending and running sandboxes."""
    target = resolve_target(base_url)
    filters = {
        key: value
        for key, value in (
            ("user_id", user_id),
            ("experiment_id", experiment_id),
            ("namespace", namespace),
            ("image", image),
            ("state", state),
        )
        if value is not None
    }
    statuses = run(lambda: list_items(target, filters))
    if as_json:
        # One item a line: still readable, and written by json's C encoder (indent=2 is its
        # pure-Python one, a large part of the command's time at 1,000 sandboxes).
        items = ",\n".join(f"  {json.dumps(s, default=str)}" for s in statuses)
        click.echo(
            f'{{"items": [\n{items}\n], "total": {len(statuses)}}}'
            if statuses
            else '{"items": [], "total": 0}'
        )
        return
    if target.embedded:
        click.echo(
            "rock: embedded mode: only this process's sandboxes are listed (none); "
            "set ROCK_BASE_URL or run `rock admin start`",
            err=True,
        )
    header = ("SANDBOX ID", "STATE", "IMAGE", "CPUS", "MEMORY", "USER", "EXPERIMENT", "STARTED")
    rows = [
        (
            s.get("sandbox_id") or "",
            (s.get("state") or "unknown") + (" (paused)" if s.get("paused") else ""),
            s.get("image") or "",
            "" if s.get("cpus") is None else f"{s['cpus']:g}",
            s.get("memory") or "",
            s.get("user_id") or "",
            s.get("experiment_id") or "",
            when_text(s.get("start_time") or s.get("create_time")),
        )
        for s in statuses
    ]
    print_table(header, rows)
    click.echo(f"{len(statuses)} sandbox{'es' if len(statuses) != 1 else ''}")


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint=option)
        out[key] = rest
    return out or None


def _size(value: str | None, option: str) -> str | None:
    """``value`` when it is a size (``512m``, ``8g``); else a usage error naming ``option``
    (exit 2, as for any other bad option value)."""
    if value is not None:
        try:
            size_to_bytes(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    return value


@sandbox.command()
@base_url_option
@json_option
@click.option("--image", default="python:3.11", show_default=True, help="The container image.")
@click.option(
    "--memory",
    default="2g",
    show_default=True,
    callback=lambda ctx, param, value: _size(value, "--memory"),
    help="Memory limit (512m, 8g).",
)
@click.option("--cpus", type=float, default=1.0, show_default=True, help="CPUs.")
@click.option(
    "--disk",
    default=None,
    callback=lambda ctx, param, value: _size(value, "--disk"),
    help="Disk limit (50G) [default: the SDK's].",
)
@click.option(
    "--id", "sandbox_id", default=None, help="Ask for this sandbox id (also the container name)."
)
@click.option(
    "--env", "env", multiple=True, metavar="KEY=VALUE", help="An environment variable (repeatable)."
)
@click.option(
    "--auto-clear-seconds",
    type=click.IntRange(0),
    default=3600,
    show_default=True,
    help="Stop the sandbox after this many idle seconds.",
)
@click.option(
    "--auto-delete-seconds",
    type=click.IntRange(0),
    default=None,
    help="After a stop, keep it this many seconds (for restart) [default: delete at once].",
)
@click.option(
    "--startup-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds to wait for it to run [default: 180].",
)
@click.option("--user-id", default=None, help="User label (X-User-Id).")
@click.option("--experiment-id", default=None, help="Experiment label (X-Experiment-Id).")
@click.option("--namespace", default=None, help="Namespace label (X-Namespace).")
@click.option(
    "--snapshot",
    default=None,
    metavar="NAME",
    help="Start from this snapshot of yours (rock sandbox snapshots) instead of the bare image.",
)
def create(
    base_url: str | None,
    as_json: bool,
    image: str,
    memory: str,
    cpus: float,
    disk: str | None,
    sandbox_id: str | None,
    env: tuple[str, ...],
    auto_clear_seconds: int,
    auto_delete_seconds: int | None,
    startup_timeout: float | None,
    user_id: str | None,
    experiment_id: str | None,
    namespace: str | None,
    snapshot: str | None,
) -> None:
    """Start a sandbox on the admin server and wait until it runs; print its id.

    --snapshot NAME starts it with the files of that snapshot (an unknown name is refused,
    named, exit 1).

    Needs a server (--base-url, $ROCK_BASE_URL or `rock admin start`): a sandbox made in
    embedded mode would be removed as this command exits, so create refuses there (exit 1).
    """
    environment = _pairs(env, "--env")
    target = resolve_target(base_url)
    if target.embedded:
        fail(
            "no admin server: a sandbox created in embedded mode is removed when this command exits. "
            "Start one with `rock admin start` (or set ROCK_BASE_URL / --base-url), then create again",
            EXIT_ERROR,
        )
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    extra: dict[str, Any] = {}
    if disk is not None:
        extra["disk"] = disk
    if startup_timeout is not None:
        extra["startup_timeout"] = startup_timeout
    try:
        config = SandboxConfig(
            base_url=target.url,
            image=image,
            memory=memory,
            cpus=cpus,
            sandbox_id=sandbox_id,
            env=environment,
            auto_clear_seconds=auto_clear_seconds,
            auto_delete_seconds=auto_delete_seconds,
            user_id=user_id,
            experiment_id=experiment_id,
            namespace=namespace,
            snapshot=snapshot,
            **extra,
        )
    except InvalidParameter as exc:  # the options contradict each other: a usage error
        fail(str(exc), EXIT_USAGE)

    source = image if snapshot is None else f"snapshot {snapshot}"

    async def go() -> SandboxStatusResponse:
        handle = Sandbox(config)
        with spinner(f"Starting a sandbox of {source}..."):
            await handle.start()
        status: SandboxStatusResponse = await handle.get_status(include_all_states=True)
        return status

    status = run(go)
    if as_json:
        print_json(unstructure_wire(status))
    else:
        click.echo(f"rock: sandbox {status.sandbox_id} is {state_of(status)} ({source})", err=True)
        click.echo(status.sandbox_id)


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
@json_option
def status(sandbox_id: str, base_url: str | None, as_json: bool) -> None:
    """Show a sandbox's state, resources, phases and times (any state)."""
    target = resolve_target(base_url)
    found = run(lambda: sandbox_status(target, sandbox_id))
    if as_json:
        print_json(unstructure_wire(found))
        return
    rows = [
        ("sandbox id", found.sandbox_id),
        ("state", state_of(found)),
        ("reason", found.reason),
        ("image", found.image),
        ("cpus", None if found.cpus is None else f"{found.cpus:g}"),
        ("memory", found.memory),
        ("disk", found.disk),
        ("host", " ".join(x for x in (found.host_name, found.host_ip) if x)),
        ("user", found.user_id),
        ("experiment", found.experiment_id),
        ("namespace", found.namespace),
        ("queue position", found.queue_position),
        ("security", _security(found.security)),
        ("created", when(found.create_time)),
        ("started", when(found.start_time)),
        ("stopped", when(found.stop_time)),
        ("auto stop", when(found.auto_stop_time)),
        ("auto delete", when(found.auto_delete_time)),
    ]
    width = max(len(name) for name, _ in rows) + 1
    for name, value in rows:
        if value not in (None, ""):
            click.echo(f"{name + ':':<{width}} {value}")
    _echo_phases(found)
    for note in found.notes:
        click.echo(f"note: {note}")


def _echo_phases(found: SandboxStatusResponse) -> None:
    for name, phase in (found.status or {}).items():
        message = f": {phase.message}" if phase.message else ""
        click.echo(f"phase {name}: {phase.status.value}{message}")


@sandbox.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.argument("sandbox_id")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@base_url_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds the command may run (exit 124 past it) [default: no limit].",
)
@click.option("--cwd", default=None, help="Working directory inside the sandbox.")
@click.option(
    "--env", "env", multiple=True, metavar="KEY=VALUE", help="An environment variable (repeatable)."
)
@json_option
def exec_command(
    sandbox_id: str,
    argv: tuple[str, ...],
    base_url: str | None,
    timeout: float | None,
    cwd: str | None,
    env: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run ARGV in the sandbox (no shell: `-- bash -c '...'` for one); exit with its exit code.

    Options go before SANDBOX_ID: `rock sandbox exec --cwd /tmp ID -- ls -l`.
    The command's stdout and stderr are printed as they were written.
    """
    environment = _pairs(env, "--env")
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise click.UsageError(
            "no command given: rock sandbox exec SANDBOX_ID -- COMMAND [ARGS]..."
        )
    target = resolve_target(base_url)

    async def go() -> Any:
        await sandbox_status(target, sandbox_id)  # unknown id: exit 3 with the target named
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        return await handle.execute(
            Command(command=list(argv), timeout=timeout, cwd=cwd, env=environment)
        )

    result = run(go)
    # Killed at its timeout: the command's own outcome, exiting as timeout(1) does.
    code = _EXIT_TIMEOUT if result.timed_out else result.exit_code
    if code == -1 and (result.stderr or "").startswith("rock: cannot run"):
        # Not run at all (ROCK's -1): as shells say it, 126 not executable, 127 not found.
        code = 126 if "Permission denied" in (result.stderr or "") else 127
    if as_json:
        print_json(unstructure_wire(result))
    else:
        sys.stdout.write(result.stdout or "")
        sys.stdout.flush()
        sys.stderr.write(result.stderr or "")
        sys.stderr.flush()
    if code is None:
        sys.exit(EXIT_ERROR)
    sys.exit(code if code >= 0 else 128 - code)


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
@json_option
def logs(sandbox_id: str, base_url: str | None, as_json: bool) -> None:
    """What is known of a sandbox's life: phases, state history, reason, notes.

    The admin serves no container logs yet, so this shows the lifecycle record instead (and
    says so); run `rock sandbox exec ID -- cat FILE` for files the sandbox writes.
    """
    target = resolve_target(base_url)
    found = run(lambda: sandbox_status(target, sandbox_id))
    if as_json:
        data = unstructure_wire(found)
        print_json(
            {
                "sandbox_id": found.sandbox_id,
                "unit_logs": None,
                "phases": data.get("status"),
                "state_history": data.get("state_history"),
                "state": found.state.value if found.state is not None else "unknown",
                "reason": found.reason,
                "notes": found.notes,
            }
        )
        return
    click.echo(
        f"rock: {target.describe()} serves no unit logs; showing the sandbox's lifecycle instead",
        err=True,
    )
    _echo_phases(found)
    for entry in found.state_history:
        click.echo(
            f"{when(entry.timestamp)} {entry.from_state.value} -> {entry.to_state.value} ({entry.event})"
        )
    click.echo(f"state: {state_of(found)}" + (f" ({found.reason})" if found.reason else ""))
    for note in found.notes:
        click.echo(f"note: {note}")


async def _stop(target: Target, sandbox_id: str) -> None:
    handle = target.sandbox()
    await handle.attach(sandbox_id)
    # Sandbox.stop() logs and swallows failures (ROCK's contract); a person must see them.
    await handle._get_driver().stop(sandbox_id)


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
def stop(sandbox_id: str, base_url: str | None) -> None:
    """Stop a sandbox (already stopped: nothing to do). With the default lifecycle it is deleted too."""
    target = resolve_target(base_url)

    async def go() -> SandboxStatusResponse:
        found = await sandbox_status(target, sandbox_id)
        if found.state in LIVE_STATES:
            with spinner(f"Stopping {sandbox_id}..."):
                await _stop(target, sandbox_id)
            found = await sandbox_status(target, sandbox_id)
        return found

    found = run(go)
    click.echo(f"{sandbox_id} {state_of(found)}" + (f" ({found.reason})" if found.reason else ""))


@sandbox.command()
@click.argument("sandbox_id")
@base_url_option
@click.option("--force", is_flag=True, help="Stop it first if it is pending or running.")
def delete(sandbox_id: str, base_url: str | None, force: bool) -> None:
    """Delete a stopped sandbox and its container (already deleted: nothing to do)."""
    target = resolve_target(base_url)

    async def go() -> None:
        found = await sandbox_status(target, sandbox_id)
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        if found.state in LIVE_STATES:
            if not force:
                raise Failure(
                    f"sandbox {sandbox_id} is {state_of(found)}: stop it first (`rock sandbox stop {sandbox_id}`) "
                    "or use --force"
                )
            with spinner(f"Stopping {sandbox_id}..."):
                await _stop(target, sandbox_id)
        if found.state is not State.DELETED:
            with spinner(f"Deleting {sandbox_id}..."):
                await handle.delete()
                # A sandbox stopped with the default lifecycle is removed in the background; the
                # record says deleted once its container is gone, which is what "deleted" promises.
                deadline = time.monotonic() + _DELETE_WAIT
                while (await sandbox_status(target, sandbox_id)).state is not State.DELETED:
                    if time.monotonic() > deadline:
                        raise Failure(
                            f"sandbox {sandbox_id} was not deleted within {_DELETE_WAIT:g}s"
                        )
                    await asyncio.sleep(0.1)

    run(go)
    click.echo(f"{sandbox_id} deleted")


# `rock sandbox port-forward` and `rock sandbox shell` live in their own module; importing it
# adds them to the group above.
# `rock sandbox chat` (the Chat protocol) lives in its own module; importing it adds it to the group above.
# `rock sandbox top` (live resource use) lives in its own module; importing it adds it to the group above.
# `rock sandbox pause|resume` live in their own module (_cli_pause.py), imported the same way.
# `rock sandbox snapshot|snapshots|fork` too (_cli_snapshots.py).
from rock import (  # noqa: E402, F401
    _cli_chat,
    _cli_commit,
    _cli_connect,
    _cli_egress,
    _cli_pause,
    _cli_snapshots,
    _cli_top,
)
