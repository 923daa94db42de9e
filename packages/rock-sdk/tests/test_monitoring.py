"""Monitoring (issue #14 point 1) through a real admin on Docker: the engine samples every running
sandbox's use from its cgroups (never waking its rocklet) and shows it in get_status, at
/sandboxes/{id}/statistics (ROCK's get_statistics shape), as per-sandbox gauges that go with the
sandbox, and in `rock sandbox top`; a sandbox near its memory limit, or with an OOM kill, warns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.testing import eventually

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
        reason="runs its own admin; ran in the embedded pass",
    ),
]

PREFIX = "/apis/envs/sandbox/v1"
ROCK = Path(sys.executable).with_name("rock")
# 200 MiB held and one core kept busy for a minute, in the background.
HOG = (
    'nohup python3 -c \'import time; b = bytearray(200 * 1024 * 1024); b[::4096] = b"x" * len(b[::4096]); '
    "t = time.time()\nwhile time.time() - t < 60: pass' >/dev/null 2>&1 &"
)


def _result(response: httpx.Response) -> Any:
    body = response.json()
    assert body["status"] == "Success", body
    return body["result"]


def test_usage_is_sampled_shown_warned_and_exported(
    tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path, config="[admin]\nper_sandbox_metrics = true\n\n[engine]\nstats_interval = 0.5\n"
    )
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            sandbox_id = _result(
                http.post(
                    f"{PREFIX}/start", json={"image": "python:3.11", "memory": "256m", "cpus": 1}
                )
            )["sandbox_id"]
            command = {"sandbox_id": sandbox_id, "command": HOG, "shell": True}
            assert _result(http.post(f"{PREFIX}/execute", json=command))["exit_code"] == 0

            def busy() -> dict[str, Any] | None:
                stats = _result(http.get(f"{PREFIX}/sandboxes/{sandbox_id}/statistics"))
                usage = stats["usage"]
                return (
                    stats
                    if usage and usage["memory_bytes"] > 190 * 2**20 and usage["cpu_percent"] > 5
                    else None
                )

            stats = eventually(
                busy, what="200 MiB and a busy core seen in the samples", interval=0.3
            )
            assert (
                stats["mem"] > 70 and stats["cpu"] > 5 and stats["net"] is not None
            )  # ROCK's figures
            # Both statistics routes say the same of the sandbox's disk (its own use, in percent
            # of its limit); the rocklet's root filesystem (the host's disk) is apart.
            figures = _result(
                http.get(f"{PREFIX}/get_sandbox_statistics", params={"sandbox_id": sandbox_id})
            )
            sampled = _result(http.get(f"{PREFIX}/sandboxes/{sandbox_id}/statistics"))
            assert figures["disk"] == sampled["disk"] and figures["disk"] is not None
            assert figures["disk_root_fs_percent"] is not None
            usage = stats["usage"]
            assert (
                usage["memory_limit_bytes"] == 256 * 2**20
                and usage["pids"] >= 2
                and usage["oom_kills"] == 0
            )
            status = _result(http.get(f"{PREFIX}/get_status", params={"sandbox_id": sandbox_id}))
            assert status["usage"]["memory_bytes"] > 190 * 2**20

            metrics = http.get("/metrics").text
            assert f'rock_sandbox_memory_bytes{{sandbox_id="{sandbox_id}"}}' in metrics
            assert "rock_sandboxes_memory_bytes" in metrics

            env = {**os.environ, "ROCK_BASE_URL": server.url}
            top = subprocess.run(
                [str(ROCK), "sandbox", "top", "--json", "--sort", "mem"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert top.returncode == 0, top.stderr
            [row] = [r for r in json.loads(top.stdout)["items"] if r["sandbox_id"] == sandbox_id]
            assert row["memory_bytes"] > 190 * 2**20
            table = subprocess.run(
                [str(ROCK), "sandbox", "top", "--once"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (
                table.returncode == 0
                and sandbox_id in table.stdout
                and "MEM USAGE / LIMIT" in table.stdout
            )

            # Past its limit: the kernel's OOM killer ends the biggest process; the status says so.
            oom = {
                "sandbox_id": sandbox_id,
                "shell": True,
                "command": "python3 -c 'b = [bytearray(16 * 2**20) for _ in range(40)]'; echo done",
            }
            _result(http.post(f"{PREFIX}/execute", json=oom))
            eventually(
                lambda: (
                    _result(http.get(f"{PREFIX}/sandboxes/{sandbox_id}/statistics"))["usage"][
                        "oom_kills"
                    ]
                    >= 1
                ),
                what="the OOM kill counted",
                interval=0.3,
            )

            near = {
                "sandbox_id": sandbox_id,
                "shell": True,
                "command": 'nohup python3 -c \'import time; b = bytearray(225 * 2**20); b[::4096] = b"x" * len(b[::4096]); '
                "time.sleep(60)' >/dev/null 2>&1 &",
            }
            http.post(
                f"{PREFIX}/execute",
                json={
                    "sandbox_id": sandbox_id,
                    "command": "pkill -f bytearray; sleep 0.5",
                    "shell": True,
                },
            )
            _result(http.post(f"{PREFIX}/execute", json=near))
            stats = eventually(
                lambda: (
                    (s := _result(http.get(f"{PREFIX}/sandboxes/{sandbox_id}/statistics")))
                    and any(w.startswith("memory at") for w in s["warnings"])
                    and s
                ),
                what="a warning near the memory limit",
                interval=0.3,
            )
            assert stats["mem"] >= 90, stats

            _result(http.post(f"{PREFIX}/stop", json={"sandbox_id": sandbox_id}))
            assert sandbox_id not in http.get("/metrics").text  # its series went with it
    finally:
        stop_admin(server, docker_client)
