"""``rock model-service start|stop|watch-agent|anti-call-llm`` (ROCK's command line), and
``serve`` (rock's: the server in the foreground, what ``start`` runs detached).

Inside a sandbox this is what the ``rock`` command of the zipapp runs; on the host the ``rock``
command hands ``model-service`` here.

    rock model-service start --type local|proxy [--config-file F] [--host H] [--port P]
        [--proxy-base-url URL] [--retryable-status-codes 429,500] [--request-timeout S]
        [--recording-file F | --replay-file F] [--retry-attempts N] [--retry-backoff S]
    rock model-service stop
    rock model-service watch-agent --pid PID [--host H] [--port P]
    rock model-service anti-call-llm --index N [--response TEXT | --response-file F]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Optional

from rock.sdk.model.server import config as cfg


def _pid_file() -> Path:
    return Path(cfg.RUN_DIR) / "pid.txt"


def _server_args(ns: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for name in (
        "config_file",
        "host",
        "port",
        "proxy_base_url",
        "retryable_status_codes",
        "request_timeout",
        "recording_file",
        "replay_file",
        "retry_attempts",
        "retry_backoff",
    ):
        value = getattr(ns, name)
        if value is not None:
            out += ["--" + name.replace("_", "-"), str(value)]
    return out


def config_from_args(ns: argparse.Namespace) -> cfg.ModelServiceConfig:
    config = cfg.ModelServiceConfig.from_file(ns.config_file)
    for name in ("host", "port", "proxy_base_url", "request_timeout", "retry_attempts"):
        if getattr(ns, name) is not None:
            setattr(config, name, getattr(ns, name))
    if ns.retry_backoff is not None:
        config.retry_backoff = ns.retry_backoff
    if ns.retryable_status_codes:
        codes = [int(c) for c in ns.retryable_status_codes.split(",") if c.strip()]
        config.retryable_status_codes = codes
    if ns.recording_file:
        config.recording_file = ns.recording_file
    if ns.replay_file:
        config.replay_file = ns.replay_file
    config.__post_init__()
    return config


def _add_server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", choices=["local", "proxy"], default="local")
    p.add_argument("--config-file", default=None, help="a JSON or YAML settings file")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--proxy-base-url", default=None)
    p.add_argument("--retryable-status-codes", default=None, help="e.g. 429,500,502")
    p.add_argument("--request-timeout", type=float, default=None, help="seconds")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--recording-file", default=None, help="proxy: the trajectory JSONL")
    group.add_argument("--replay-file", default=None, help="proxy: answer from this trajectory")
    p.add_argument("--retry-attempts", type=int, default=None, help="(rock) attempts per call")
    p.add_argument("--retry-backoff", type=float, default=None, help="(rock) first retry delay")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="rock")
    commands = top.add_subparsers(dest="command")
    ms = commands.add_parser("model-service", description="the model service")
    sub = ms.add_subparsers(dest="model_service_command")
    _add_server_options(sub.add_parser("start", help="start the model service"))
    _add_server_options(sub.add_parser("serve", help="(rock) run the server in the foreground"))
    sub.add_parser("stop", help="stop the model service")
    watch = sub.add_parser("watch-agent", help="SESSION_END once the agent process exits")
    watch.add_argument("--pid", required=True, type=int)
    watch.add_argument("--host", default="127.0.0.1")
    watch.add_argument("--port", type=int, default=8080)
    anti = sub.add_parser("anti-call-llm", help="answer call N, print request N+1")
    anti.add_argument("--index", required=True, type=int, help="index of last llm call, from 0")
    answer = anti.add_mutually_exclusive_group()
    answer.add_argument("--response", default=None)
    answer.add_argument("--response-file", default=None)
    return top


def main(argv: Optional[list[str]] = None) -> None:
    ns = parser().parse_args(argv)
    if ns.command != "model-service" or not ns.model_service_command:
        parser().print_help()
        sys.exit(2)
    sys.exit(asyncio.run(_run(ns)) or 0)


async def _run(ns: argparse.Namespace) -> int:
    from rock.sdk.model.service import ModelService

    command = ns.model_service_command
    if command == "serve":
        from rock.sdk.model.server.main import run

        await run(ns.type, config_from_args(ns))
        return 0
    if command == "start":
        config = config_from_args(ns)  # a bad setting fails here, not in the detached server
        pid_file = _pid_file()
        if pid_file.exists() and _alive(pid_file.read_text().strip()):
            print("model service already exist, please run 'rock model-service stop' first")
            return 1
        pid = await ModelService().start(
            model_service_type=ns.type,
            host=config.host,
            port=config.port,
            args=_server_args(ns),
        )
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(pid)
        print(f"model service started, pid: {pid}")
        return 0
    if command == "stop":
        pid_file = _pid_file()
        if not pid_file.exists():
            print("model service not exist, skip")
            return 0
        await ModelService().stop(pid_file.read_text().strip())
        pid_file.unlink()
        print("model service stopped")
        return 0
    if command == "watch-agent":
        await ModelService().start_watch_agent(ns.pid, host=ns.host, port=ns.port)
        return 0
    response = ns.response
    if ns.response_file:
        response = Path(ns.response_file).read_text(encoding="utf-8")  # noqa: ASYNC240
        os.unlink(ns.response_file)
    from rock.sdk.model.client import ModelClient

    # Print the next request and nothing else: the caller reads stdout.
    print(await ModelClient().anti_call_llm(index=ns.index, last_response=response))
    return 0


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ValueError, ProcessLookupError, PermissionError):
        return False
