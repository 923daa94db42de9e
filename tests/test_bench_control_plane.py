"""`rock bench control-plane` as a user runs it: a real admin on the scripted runtime, client
processes starting every sandbox at once through the SDK, the figures printed as JSON, and the
sandboxes still running after the admin's restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROCK = Path(sys.executable).with_name("rock")


def test_control_plane_bench_starts_every_sandbox_and_prints_its_figures(control_plane_bench):
    figures = control_plane_bench("--sandboxes", "200")
    assert figures["started"] == 200 and figures["failed_starts"] == 0
    assert 0 < figures["start_p50_seconds"] <= figures["start_p99_seconds"]
    assert figures["admin_rss_mb"] > 0 and figures["admin_kib_per_sandbox"] is not None
    assert figures["admin_cpu_ms_per_start"] > 0 and figures["clients_cpu_ms_per_start"] > 0
    # The event loop's share of it (the main thread's), within one clock tick (10 ms over the
    # 200 starts): the kernel scales a thread's and its process's times apart.
    tick = 1000 * 0.01 / 200
    assert 0 < figures["admin_loop_cpu_ms_per_start"] <= figures["admin_cpu_ms_per_start"] + tick
    # The clients' CPU from the common instant on leaves out each process's own start.
    assert 0 < figures["clients_cpu_ms_per_start_starting"] < figures["clients_cpu_ms_per_start"]
    # The sandboxes' simulated rocklet runs in a process of its own, counted apart.
    assert figures["simulated_rocklet_cpu_ms_per_start"] > 0
    # The share of the cores the hypervisor took while they started (0 on bare metal).
    assert 0 <= figures["host_steal_percent_starting"] <= 100
    assert figures["get_status_p50_ms"] > 0 and figures["list_p50_ms"] > 0
    assert figures["listed"] == 200
    # Where a start's time went, from the records: accepted from the common instant on, then
    # at least the simulated unit's start (0.1 s here; the records keep microseconds).
    assert 0 <= figures["accepted_p50_seconds"] <= figures["accepted_p99_seconds"]
    assert figures["accepted_p99_seconds"] < figures["start_p99_seconds"]
    assert 0.1 <= figures["accepted_to_running_p50_seconds"] <= figures["start_p99_seconds"]
    assert figures["accepted_to_running_p50_seconds"] <= figures["accepted_to_running_p99_seconds"]
    assert figures["running_after_restart"] == 200
    assert figures["admin_restart_answering_seconds"] > 0
    assert set(figures["goals"]) == {"all_succeed", "start_p50_le_5s", "admin_le_1gib"}


def test_control_plane_bench_refuses_a_bad_start_latency_before_starting_anything():
    done = subprocess.run(
        [str(ROCK), "bench", "control-plane", "--start-seconds", "2,1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--start-seconds" in done.stderr
