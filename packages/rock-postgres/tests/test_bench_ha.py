"""``rock bench ha`` as a user runs it, small: a subprocess that starts two admins of one cluster
on a fresh PostgreSQL database, kills the leader twice, prints its figures as JSON and leaves
nothing behind (no admin, no sandbox, no database, no state folder). The figures are checked to
be there and consistent, not against timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rock_core.testing import eventually_empty
from rock_postgres.testing import URL_VARIABLE, run_sql, server_url

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")
ROOT = Path(__file__).resolve().parents[3]


def _rock(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROCK), *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


def _processes_naming(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def test_the_ha_bench_measures_failovers_and_throughput_and_leaves_nothing(
    docker_client: object,
) -> None:
    server = server_url()  # skips, with the reason, where PostgreSQL cannot be set up
    # Without --postgres-url the bench runs scripts/ensure-postgres.sh, as a user's run does.
    given = ["--postgres-url", server] if os.environ.get(URL_VARIABLE) else []
    run = _rock(
        "bench",
        "ha",
        "--kills",
        "2",
        "--clients",
        "2",
        "--load-processes",
        "2",
        "--load-callers",
        "2",
        "--load-seconds",
        "1",
        "--load-rounds",
        "1",
        "--image",
        "rock-test/python:3.11",
        "--json",
        *given,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout)
    assert figures["kills"] == 2
    assert len(figures["failover_seconds"]) == 2
    assert all(seconds > 0 for seconds in figures["failover_seconds"])
    assert 0 < figures["failover_p50_s"] <= figures["failover_max_s"]
    assert figures["failover_max_s"] == max(figures["failover_seconds"])
    assert figures["client_threads"] == 2
    assert figures["calls_during_failovers"] > 0
    assert 0 <= figures["failed_calls_during_failovers"] <= figures["calls_during_failovers"]
    one, two = figures["get_status_per_s_one_admin"], figures["get_status_per_s_two_admins"]
    assert one > 0 and two > 0
    assert figures["two_to_one_admin_ratio"] == round(two / one, 2)
    for runs in figures["load"].values():
        assert len(runs) == 1
        assert runs[0]["calls"] > 0 and runs[0]["failed"] == 0, runs[0]["errors"]
        assert len(runs[0]["admin_cpu_share"]) == 2
        assert all(share >= 0 for share in runs[0]["admin_cpu_share"])
    # The people's view on stderr: each kill and the table.
    assert "kill 2/2:" in run.stderr and "failover p50 / max (s)" in run.stderr
    # Nothing left: the database, the admins (their state folder in no command line), the
    # folder, the sandbox's container.
    made = figures["made"]
    assert run_sql(server, "SELECT 1 FROM pg_database WHERE datname = $1", made["database"]) == []
    assert _processes_naming(made["state_folder"]) == []
    assert not Path(made["state_folder"]).exists()
    assert (
        eventually_empty(
            lambda: docker_client.containers.list(  # type: ignore[attr-defined]
                all=True, filters={"label": f"rock.sandbox_id={made['sandbox_id']}"}
            )
        )
        == []
    )


def test_without_a_usable_postgresql_the_bench_says_so_and_starts_nothing(tmp_path: Path) -> None:
    closed = f"postgresql://rock@/rock?host={tmp_path}&port=5432"  # no server's socket there
    run = _rock("bench", "ha", "--kills", "1", "--postgres-url", closed, "--json")
    assert run.returncode == 1
    assert run.stdout == ""
    assert "rock bench ha: could not make a database on the PostgreSQL server" in run.stderr
    assert "admin http" not in run.stderr  # no admin was started
