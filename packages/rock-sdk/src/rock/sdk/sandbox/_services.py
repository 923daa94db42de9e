"""The sandbox's own services on a :class:`~rock.sdk.sandbox.client.Sandbox`: URLs and TCP
connections to its ports, a terminal, the Chat protocol, statistics and background processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rock.sdk._drivers.connect import PortConnection, Shell
from rock.sdk.sandbox._handle import SandboxHandle
from rock_core.actions import CommandLine, ProcessInfo

if TYPE_CHECKING:  # imported when chat() is called: most trainers never chat
    from rock.sdk.chat import ChatAction, ChatConfig, ChatResponse


class SandboxServices(SandboxHandle):
    """What runs in the sandbox beyond sessions: ports, shells, chat, statistics, processes (rock)."""

    # -- the sandbox's own services -----------------------------------------------------------

    async def get_url(self, port: int, path: str = "") -> str:
        """(rock) A URL that reaches ``port`` in the sandbox, ``path`` appended (any port but
        the rocklet's 22555; traffic goes through the rocklet, so no port needs publishing).

        Embedded: ``http://127.0.0.1:P/path``, a local port opened on first use for this
        sandbox port (closed when the sandbox stops); the service sees the path as is.
        Remote: the admin's proxy, ``{base_url}/apis/envs/sandbox/v1/sandboxes/{id}/proxy/port/{port}/path``
        (HTTP and WebSocket; with API keys on, send ``X-API-Key``); the service sees ``/path``.

        :raises InvalidParameter: not a port, or 22555.
        """
        return await self._get_driver().port_url(self._require_id("get_url"), port, path)

    async def open_port(self, port: int) -> PortConnection:
        """(rock) A TCP connection to ``127.0.0.1:port`` inside the sandbox (what
        ``rock sandbox port-forward`` carries): ``send``, ``send_eof``, ``receive`` (``b""`` at
        the end), ``aclose``; an async context manager.

        :raises InvalidParameter: not a port, or 22555.
        :raises InternalServerRockError: nothing listens on the port.
        """
        return await self._get_driver().open_port(self._require_id("open_port"), port)

    async def open_shell(
        self,
        *,
        user: str | None = None,
        rows: int = 24,
        cols: int = 80,
        term: str | None = None,
        command: str | None = None,
    ) -> Shell:
        """(rock) A terminal in the sandbox: ``command`` (default the user's shell) on a new
        pseudo-terminal, as ``user`` (default the rocklet's, root). ``send`` keystrokes,
        ``resize``, ``receive`` output (``None`` when the program ended: then ``exit_code``);
        an async context manager. Embedded it talks to the rocklet directly; remote, through
        the admin's ``/shell`` WebSocket (what ``rock sandbox shell`` uses).

        :raises InvalidParameter: an unknown user.
        """
        options: dict[str, Any] = {"rows": rows, "cols": cols}
        for name, value in (("user", user), ("term", term), ("command", command)):
            if value:
                options[name] = value
        return await self._get_driver().open_shell(self._require_id("open_shell"), **options)

    async def chat(
        self,
        prompt: str,
        *,
        confirm: bool = False,
        dry_run: bool = False,
        config: ChatConfig | None = None,
        on_action: Callable[[ChatAction], Any] | None = None,
    ) -> ChatResponse:
        """(rock) The Chat protocol: carry out an instruction in plain English or Chinese
        ("install numpy", "显示资源使用情况") and answer in the prompt's language. Returns a
        :class:`~rock.sdk.chat.ChatResponse` (``reply``, ``actions``, ``observations``).

        Each action is previewed in the reply before it runs; destructive ones (delete, stop,
        ``rm -rf``) run only with ``confirm=True``; ``dry_run=True`` runs nothing. ``config`` is
        a :class:`~rock.sdk.chat.ChatConfig` (mirrors, the optional LLM backend; default from
        ``ROCK_CHAT_*``). See :mod:`rock.sdk.chat`.

        :raises InvalidParameter: a blank prompt.
        """
        from rock.sdk.chat import chat

        return await chat(
            self, prompt, confirm=confirm, dry_run=dry_run, config=config, on_action=on_action
        )

    async def get_statistics(self) -> dict[str, Any]:
        """(rock) CPU, memory and disk use (percent) and network bytes of the sandbox."""
        return await self._get_driver().get_statistics(self._require_id("get_statistics"))

    async def start_process(
        self,
        command: CommandLine,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """(rock) Start a background command (a string runs through ``/bin/sh -c``).

        Its real exit code, resource use and output stay readable with :meth:`process_status`
        and :meth:`process_output`; ``timeout`` seconds kills it.
        """
        return await self._get_driver().start_process(
            self._require_id("start_process"), command, cwd=cwd, env=env, timeout=timeout
        )

    async def process_status(
        self, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """(rock) A background process's state, waiting up to ``wait`` seconds for it to end;
        ``output_tail`` holds the last ``tail`` bytes of its output."""
        return await self._get_driver().process_status(
            self._require_id("process_status"), process_id, wait=wait, tail=tail
        )

    async def process_output(
        self, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """(rock) A background process's combined output bytes from ``offset`` (negative: from the end)."""
        return await self._get_driver().process_output(
            self._require_id("process_output"), process_id, offset=offset, limit=limit
        )

    async def kill_process(
        self, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """(rock) Send ``signal`` to a background process and its group; wait up to ``wait`` s for it to end."""
        return await self._get_driver().kill_process(
            self._require_id("kill_process"), process_id, signal=signal, wait=wait
        )
