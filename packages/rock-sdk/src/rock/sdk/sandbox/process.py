"""Scripts in a sandbox (ROCK's ``rock.sdk.sandbox.process``)."""

from __future__ import annotations

import time
from typing import Any

from rock_core.actions import Command, Observation

__all__ = ["Process"]


class Process:
    """Runs scripts inside ``sandbox`` (a :class:`~rock.sdk.sandbox.client.Sandbox`)."""

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox

    async def execute_script(
        self,
        script_content: str,
        script_name: str | None = None,
        wait_timeout: float = 300,
        wait_interval: float = 10,
        cleanup: bool = True,
    ) -> Observation:
        """Write ``script_content`` to ``/tmp/<script_name>`` and run it with bash in nohup mode.

        Returns the :class:`Observation` of ``arun(mode="nohup")``: the script's output and, in
        rock, its real exit code. With ``cleanup`` the script file is removed afterwards. A
        script that cannot be written gives ``Observation(exit_code=1, failure_reason=...)``.
        """
        path = f"/tmp/{script_name or f'script_{time.time_ns()}.sh'}"
        written = await self.sandbox.write_file_by_path(script_content, path)
        if not written.success:
            return Observation(output=written.message, exit_code=1, failure_reason=written.message)
        try:
            return await self.sandbox.arun(
                f"bash {path}", mode="nohup", wait_timeout=wait_timeout, wait_interval=wait_interval
            )
        finally:
            if cleanup:
                await self.sandbox.execute(Command(command=["rm", "-f", path]))
