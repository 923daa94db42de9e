"""Run one Python block of the docs in this process and write what its print lines printed.

``python docs_block_runner.py BLOCK.py SETUP.json RESULT.json``: SETUP names the marker's tokens
(``sandbox``, ``session``, ``listen``, ``offline``, ``async``; see ``docs_blocks.py``). RESULT gets ``{"prints": [[line,
text], ...]}`` for every ``print`` called from the block's own lines. Functions named ``test_*``
that the block defines are called afterwards, as pytest would.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import inspect
import io
import json
import sys
from pathlib import Path
from typing import Any


def main(block_path: str, setup_path: str, result_path: str) -> None:
    setup = json.loads(Path(setup_path).read_text())
    source = Path(block_path).read_text()
    prints: list[tuple[int, str]] = []
    real_print = builtins.print

    def recording_print(*args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1)
        if caller.f_code.co_filename == block_path and kwargs.get("file") in (None, sys.stdout):
            text = io.StringIO()
            real_print(*args, **{**kwargs, "file": text})
            prints.append((caller.f_lineno, text.getvalue()))
        real_print(*args, **kwargs)

    builtins.print = recording_print
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if ("sandbox" in setup or "async" in setup) else 0
    code = compile(source, block_path, "exec", flags=flags)
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": block_path}
    try:
        if flags:
            asyncio.run(_run_async(code, namespace, setup))
        else:
            exec(code, namespace)  # noqa: S102 - the docs' own block
            _call_tests(namespace)
    finally:
        builtins.print = real_print
        Path(result_path).write_text(json.dumps({"prints": prints}))


async def _run_async(code: Any, namespace: dict[str, Any], setup: dict[str, str]) -> None:
    if "sandbox" not in setup:
        await _eval(code, namespace)
        return
    from rock.actions import CreateBashSessionRequest
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    network = {"network": "none"} if "offline" in setup else {}
    config = SandboxConfig(image="python:3.11", memory="512m", cpus=0.5, **network)
    async with Sandbox(config) as sandbox:
        if setup.get("session"):
            await sandbox.create_session(CreateBashSessionRequest(session=setup["session"]))
        if setup.get("listen"):
            await _listen(sandbox, int(setup["listen"]))
        namespace.update(sandbox=sandbox, Sandbox=Sandbox, SandboxConfig=SandboxConfig)
        await _eval(code, namespace)


async def _listen(sandbox: Any, port: int) -> None:
    """A TCP service on ``port`` in the sandbox (python's http.server), once it accepts."""
    from rock.actions import Command

    await sandbox.start_process(["python3", "-m", "http.server", str(port), "-d", "/tmp"])
    probe = f"import socket, time\nfor _ in range(300):\n    try:\n        socket.create_connection(('127.0.0.1', {port}), 1).close()\n        break\n    except OSError:\n        time.sleep(0.1)\nelse:\n    raise SystemExit('nothing listens')\n"
    done = await sandbox.execute(Command(command=["python3", "-c", probe]))
    assert done.exit_code == 0, done.stderr


async def _eval(code: Any, namespace: dict[str, Any]) -> None:
    result = eval(code, namespace)  # noqa: S307 - the docs' own block
    if inspect.iscoroutine(result):
        await result
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            outcome = value()
            if inspect.iscoroutine(outcome):
                await outcome


def _call_tests(namespace: dict[str, Any]) -> None:
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()


if __name__ == "__main__":
    main(*sys.argv[1:4])
