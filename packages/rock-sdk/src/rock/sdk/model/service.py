"""ROCK's ``rock.sdk.model.service.ModelService``: start the model service as a process of its
own (waiting until ``/health`` answers), watch an agent, stop it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional


def _self_command() -> list[str]:
    """How to run this package again: the zipapp it runs from, else ``-m rock.sdk.model``."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if parent.suffix == ".pyz" and parent.is_file():
            return [sys.executable, str(parent)]
    return [sys.executable, "-m", "rock.sdk.model"]


class ModelService:
    def start_sandbox_service(
        self, model_service_type: str = "local", args: Optional[list[str]] = None
    ) -> subprocess.Popen:
        """The server process, detached; its output to ``$ROCK_LOGGING_PATH/$ROCK_LOGGING_FILE_NAME``
        when those are set, else ``$ROCK_MODEL_SERVICE_RUN_DIR/model_service.log``."""
        from rock.sdk.model.server import config as cfg

        log_dir = os.environ.get("ROCK_LOGGING_PATH") or cfg.RUN_DIR
        log_name = os.environ.get("ROCK_LOGGING_FILE_NAME") or "model_service.log"
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        out = open(os.path.join(log_dir, log_name), "ab")
        cmd = [*_self_command(), "model-service", "serve", "--type", model_service_type]
        return subprocess.Popen(
            cmd + list(args or []),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    async def start(
        self,
        timeout_seconds: float = 30,
        model_service_type: str = "local",
        host: Optional[str] = None,
        port: Optional[int] = None,
        args: Optional[list[str]] = None,
    ) -> str:
        process = self.start_sandbox_service(model_service_type, args)
        probe_host = "127.0.0.1" if host in (None, "0.0.0.0") else host
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"Model service start failed: the server exited with {process.returncode}"
                    " (see its log)"
                )
            if await asyncio.get_running_loop().run_in_executor(
                None, _healthy, probe_host, port or 8080
            ):
                return str(process.pid)
            await asyncio.sleep(0.05)
        await self.stop(str(process.pid))
        raise RuntimeError(f"Model service start failed: no /health within {timeout_seconds} s")

    async def start_watch_agent(
        self, agent_pid: int, host: str = "127.0.0.1", port: int = 8080
    ) -> None:
        body = json.dumps({"pid": agent_pid}).encode()
        req = urllib.request.Request(f"http://{host}:{port}/v1/agent/watch", data=body)
        req.add_header("Content-Type", "application/json")
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: urllib.request.urlopen(req, timeout=10).close()
        )

    async def stop(self, pid: str) -> None:
        """SIGTERM, then SIGKILL after 5 s (ROCK: ``kill -9`` at once)."""
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            return
        for _ in range(100):
            await asyncio.sleep(0.05)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return
            try:
                if os.waitpid(int(pid), os.WNOHANG)[0]:  # noqa: ASYNC222 - WNOHANG
                    return
            except ChildProcessError:
                pass
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _healthy(host: str, port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2).close()
        return True
    except OSError:
        return False
