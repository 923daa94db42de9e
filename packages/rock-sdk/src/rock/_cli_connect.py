"""``rock sandbox port-forward`` and ``rock sandbox shell``: into a sandbox, as a person would.

``port-forward ID [LOCAL:]REMOTE...`` listens on ``127.0.0.1:LOCAL`` (``--address``) and carries
each connection to ``127.0.0.1:REMOTE`` inside the sandbox, like ``kubectl port-forward``:
``8080`` forwards local 8080 to remote 8080, ``9000:8080`` local 9000, ``:8080`` a free local
port. It prints ``Forwarding from 127.0.0.1:LOCAL -> REMOTE`` for each, then runs until
interrupted (exit 0). Each connection is the admin's ``/portforward`` WebSocket.

``shell ID [--user U] [--command CMD]`` opens a terminal in the sandbox (the admin's ``/shell``
WebSocket, a real pseudo-terminal there), like ``docker exec -it``: on a terminal, keys go raw
(Ctrl-C reaches the program in the sandbox), window resizes follow, and the command exits with
the program's exit code.

Both need a server (``--base-url``, ``$ROCK_BASE_URL`` or ``rock admin start``): in embedded
mode a sandbox lives only as long as the ``rock`` process that made it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

import click

from rock._cli_common import (
    EXIT_USAGE,
    Failure,
    base_url_option,
    resolve_target,
    run,
    sandbox_status,
)
from rock._cli_sandbox import sandbox

__all__ = ["parse_forward", "port_forward", "shell"]


def parse_forward(spec: str) -> tuple[int, int]:
    """``[LOCAL:]REMOTE`` as ``(local, remote)``; local 0 asks for a free port."""
    local_text, sep, remote_text = spec.rpartition(":")
    if not sep:
        local_text = remote_text
    try:
        remote = int(remote_text)
        local = int(local_text) if local_text else 0
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected [LOCAL:]REMOTE port numbers") from None
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        raise click.BadParameter(f"{spec!r}: ports are 1..65535")
    return local, remote


@sandbox.command("port-forward")
@click.argument("sandbox_id")
@click.argument("ports", nargs=-1, required=True, metavar="[LOCAL:]REMOTE...")
@click.option(
    "--address", default="127.0.0.1", show_default=True, help="The local address to listen on."
)
@base_url_option
def port_forward(
    sandbox_id: str, ports: tuple[str, ...], address: str, base_url: str | None
) -> None:
    """Forward local ports to ports inside the sandbox (as `kubectl port-forward`)."""
    pairs = [parse_forward(spec) for spec in ports]
    target = resolve_target(base_url)

    async def go() -> None:
        import anyio

        await sandbox_status(target, sandbox_id)  # unknown id: exit 3
        handle = target.sandbox()
        await handle.attach(sandbox_id)
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                # Ctrl-C or SIGTERM ends the forward cleanly (exit 0), whatever task it lands in.
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)
            for local, remote in pairs:
                try:
                    listener = await anyio.create_tcp_listener(local_host=address, local_port=local)
                except OSError as exc:
                    raise Failure(
                        f"cannot listen on {address}:{local}: {exc.strerror or exc}"
                    ) from None
                bound = listener.extra(anyio.abc.SocketAttribute.local_port)
                click.echo(f"Forwarding from {address}:{bound} -> {remote}")
                tg.start_soon(_serve_forward, listener, handle, remote)
            sys.stdout.flush()

    run(go)


async def _serve_forward(listener: Any, handle: Any, remote: int) -> None:
    import anyio

    async def carry(stream: Any) -> None:
        async with stream:
            try:
                upstream = await handle.open_port(remote)
            except Exception as exc:  # noqa: BLE001 - reported, the listener goes on
                click.echo(f"rock: port {remote}: {exc}", err=True)
                return
            async with upstream, anyio.create_task_group() as pipes:

                async def up() -> None:
                    try:
                        while True:
                            data = await stream.receive(65536)
                            await upstream.send(data)
                    except anyio.EndOfStream:
                        await upstream.send_eof()
                    except Exception:  # noqa: BLE001 - the local side broke off
                        pipes.cancel_scope.cancel()

                pipes.start_soon(up)
                try:
                    while True:
                        data = await upstream.receive()
                        if not data:
                            break
                        await stream.send(data)
                    await stream.send_eof()
                except Exception as exc:  # noqa: BLE001 - the sandbox's side broke off
                    click.echo(f"rock: port {remote}: {exc}", err=True)
                    pipes.cancel_scope.cancel()

    await listener.serve(carry)


@sandbox.command("shell")
@click.argument("sandbox_id")
@click.option("--user", "-u", default=None, help="Run as this user in the sandbox [default: root].")
@click.option(
    "--command",
    "-c",
    "command",
    default=None,
    help="Run this command line instead of the user's shell.",
)
@base_url_option
def shell(sandbox_id: str, user: str | None, command: str | None, base_url: str | None) -> None:
    """Open a terminal in the sandbox; exit with its program's exit code."""
    target = resolve_target(base_url)
    if target.embedded:
        raise _usage_failure()
    code = run(lambda: _shell(target, sandbox_id, user, command))
    sys.exit(code)


class _UsageFailure(click.ClickException):
    """A usage error click prints as ``Error: <message>``, exiting with :data:`EXIT_USAGE`."""

    exit_code = EXIT_USAGE


def _usage_failure() -> click.ClickException:
    return _UsageFailure(
        "no rock admin to connect to: a shell needs a running sandbox of a server (`rock admin start`, "
        "--base-url or $ROCK_BASE_URL)"
    )


async def _shell(target: Any, sandbox_id: str, user: str | None, command: str | None) -> int:
    import asyncio

    await sandbox_status(target, sandbox_id)
    handle = target.sandbox()
    await handle.attach(sandbox_id)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    is_tty = os.isatty(stdin)
    rows, cols = _size(stdout if os.isatty(stdout) else stdin)
    term = os.environ.get("TERM") or "xterm-256color"
    sh = await handle.open_shell(user=user, rows=rows, cols=cols, term=term, command=command)
    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[bytes] = asyncio.Queue()

    def read_keys() -> None:
        # A thread, not the loop's reader: stdin may be a file or /dev/null, which epoll refuses.
        while True:
            try:
                data = os.read(stdin, 65536)
            except OSError:
                data = b""
            if not data:
                loop.call_soon_threadsafe(
                    keys.put_nowait, b"\x04"
                )  # end of input: Ctrl-D, as a terminal sends it
                return
            loop.call_soon_threadsafe(keys.put_nowait, data)

    def resized() -> None:
        keys.put_nowait(b"")  # b"": look at the window size again

    with _raw_mode(stdin if is_tty else None):
        threading.Thread(target=read_keys, name="rock-shell-keys", daemon=True).start()
        if is_tty:
            loop.add_signal_handler(signal.SIGWINCH, resized)
        try:
            async with sh:

                async def pump_keys() -> None:
                    while True:
                        data = await keys.get()
                        if data:
                            await sh.send(data)
                        else:
                            await sh.resize(*_size(stdout if os.isatty(stdout) else stdin))

                pump = asyncio.ensure_future(pump_keys())
                try:
                    while True:
                        out = await sh.receive()
                        if out is None:
                            break
                        os.write(stdout, out)
                finally:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await pump
        finally:
            if is_tty:
                loop.remove_signal_handler(signal.SIGWINCH)
    return sh.exit_code if sh.exit_code is not None else 1


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
        return max(size.lines, 1), max(size.columns, 1)
    except OSError:
        return 24, 80


@contextlib.contextmanager
def _raw_mode(fd: int | None) -> Any:
    """The local terminal in raw mode (keys as typed, no local echo) while inside, if ``fd``."""
    if fd is None:
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
