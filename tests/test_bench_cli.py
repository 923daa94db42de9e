"""`rock bench` as a user runs it: a subprocess that prints its figures and writes results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rock_core.testing import eventually_empty

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")


def rock(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROCK), *args], capture_output=True, text=True, timeout=600)


def test_rollout_writes_every_episode_and_refuses_to_overwrite(tmp_path, docker_client):
    output = tmp_path / "run"
    done = rock("bench", "rollout", "--count", "3", "--parallelism", "2", "--output", str(output))
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert (figures["episodes"], figures["successful_episodes"], figures["reward_sum"]) == (3, 3, 3)
    results = json.loads((output / "results.json").read_text())
    assert len(results["rows"]) == 3
    for row in results["rows"]:
        assert row["ok"] and row["baseline_exit_code"] != 0 and row["test_exit_code"] == 0
        assert row["sandbox_created_at"] <= row["ready_at"] <= row["reward_at"] <= row["removed_at"]
    for key in (
        "batch_to_all_ready_seconds",
        "sandbox_to_ready_p50_seconds",
        "sandbox_to_ready_p95_seconds",
        "sandbox_to_ready_max_seconds",
        "batch_to_all_rewards_seconds",
        "client_job_complete_seconds",
    ):
        assert results[key] > 0
    for row in results["rows"]:
        assert (
            eventually_empty(
                lambda: docker_client.containers.list(
                    all=True,
                    filters={"label": f"rock.sandbox_id={row['sandbox_id']}"},
                    ignore_removed=True,
                )
            )
            == []
        )

    again = rock("bench", "rollout", "--count", "1", "--output", str(output))
    assert again.returncode == 2
    assert "already exists" in again.stderr
    assert json.loads((output / "results.json").read_text()) == results  # untouched


def test_rollout_with_a_warm_pool_fills_it_first_and_leaves_nothing(tmp_path, docker_client):
    output = tmp_path / "run"
    done = rock(
        "bench",
        "rollout",
        "--count",
        "3",
        "--parallelism",
        "3",
        "--warm-pool",
        "2",
        "--output",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    assert "warm pool: 2 sandboxes ready" in done.stderr
    results = json.loads((output / "results.json").read_text())
    assert results["successful_episodes"] == 3 and results["settings"]["warm_pool"] == 2
    assert results["warm_pool_fill_seconds"] > 0
    for row in results[
        "rows"
    ]:  # claimed sandboxes are found by name (they carry rock.pool, not rock.sandbox_id)
        assert (
            eventually_empty(
                lambda: docker_client.containers.list(
                    all=True, filters={"name": f"^{row['sandbox_id']}$"}, ignore_removed=True
                )
            )
            == []
        )
    assert (
        eventually_empty(
            lambda: docker_client.containers.list(
                all=True, filters={"label": "rock.pool"}, ignore_removed=True
            )
        )
        == []
    )


def test_rollout_measures_the_docker_run_floor_in_the_same_invocation(tmp_path, docker_client):
    output = tmp_path / "run"
    done = rock(
        "bench",
        "rollout",
        "--count",
        "2",
        "--parallelism",
        "2",
        "--baseline",
        "docker-run",
        "--output",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    assert "docker run baseline: 2/2 episodes" in done.stderr
    results = json.loads((output / "results.json").read_text())
    floor = results["baseline_docker_run"]
    assert floor["successful_episodes"] == 2 and floor["batch_to_all_rewards_seconds"] > 0
    assert results["ratio_to_docker_run"] == round(
        results["batch_to_all_rewards_seconds"] / floor["batch_to_all_rewards_seconds"], 3
    )


def test_rollout_rounds_alternate_which_runs_first_and_report_the_median_ratio(
    tmp_path, docker_client
):
    output = tmp_path / "run"
    done = rock(
        "bench",
        "rollout",
        "--count",
        "1",
        "--parallelism",
        "1",
        "--baseline",
        "docker-run",
        "--rounds",
        "2",
        "--output",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    results = json.loads((output / "results.json").read_text())
    rounds = results["rounds"]
    assert [r["first"] for r in rounds] == ["docker run", "rock"]
    for r in rounds:
        assert r["ratio"] == round(
            r["rock_all_rewards_seconds"] / r["docker_run_all_rewards_seconds"], 3
        )
    assert results["ratio_to_docker_run"] == pytest.approx(
        (rounds[0]["ratio"] + rounds[1]["ratio"]) / 2
    )
    assert results["ratio_to_docker_run_max"] == max(r["ratio"] for r in rounds)
    assert "round 2: rock" in done.stderr


def test_rollout_fails_loudly_when_episodes_fail(tmp_path):
    # An image name that cannot be pulled: every episode fails, each is reported, the run fails.
    output = tmp_path / "run"
    done = rock(
        "bench",
        "rollout",
        "--count",
        "2",
        "--image",
        "rock-test/no-such-image:1",
        "--output",
        str(output),
    )
    assert done.returncode == 1
    results = json.loads((output / "results.json").read_text())
    assert results["successful_episodes"] == 0 and len(results["rows"]) == 2
    assert all("Failed to pull image" in row["error"] for row in results["rows"])


def test_sandbox_bench_prints_its_figures():
    done = rock("bench", "sandbox", "--starts", "2", "--echoes", "20")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["create_to_ready_p50_seconds"] > 0
    assert figures["echo_round_trip_p50_ms"] > 0
    assert 0 < figures["rocklet_rss_mb"] < 100


def test_rollout_refuses_bad_settings_before_starting_anything(tmp_path):
    output = tmp_path / "run"
    done = rock("bench", "rollout", "--count", "1", "--memory", "8x", "--output", str(output))
    assert done.returncode == 2
    assert "--memory: invalid size '8x'" in done.stderr
    assert not output.exists()
    done = rock("bench", "rollout", "--count", "1", "--cpus", "0", "--output", str(output))
    assert done.returncode == 2 and "--cpus" in done.stderr
    assert not output.exists()
    done = rock("bench", "rollout", "--count", "1", "--rounds", "3", "--output", str(output))
    assert (
        done.returncode == 2 and "--rounds: pairs of runs need --baseline docker-run" in done.stderr
    )
    assert not output.exists()


@pytest.mark.parametrize("store", ["fs", "s3"])
def test_archive_bench_archives_restores_and_prints_its_figures(store, docker_client):
    done = rock("bench", "archive", "--mb", "20", "--store", store)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    figures = document["figures"]
    assert figures["file_intact"] is True
    assert 20 <= figures["stored_mb"] <= 22  # what the sandbox changed, not the image again
    for key in ("archive_seconds", "restore_seconds", "docker_commit_seconds", "upload_seconds"):
        assert figures[key] > 0
    assert "secret" not in json.dumps(document["settings"])
    assert "engine memory growth" in done.stderr
