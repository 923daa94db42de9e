"""`rock bench control-plane --runtime nomad` as a user runs it: a real admin on rock's nomad
runtime against a stand-in Nomad whose simulated nodes run nothing, client processes starting
every sandbox at once through the SDK, the figures printed as JSON, and the sandboxes still
running after the admin's restart."""

from __future__ import annotations


def test_nomad_control_plane_bench_starts_every_sandbox_on_simulated_nodes(control_plane_bench):
    figures = control_plane_bench("--runtime", "nomad", "--nodes", "5", "--sandboxes", "50")
    assert figures["runtime"] == "nomad" and figures["nomad_nodes"] == 5
    assert figures["stand_in_cpu_ms_per_start"] > 0 and figures["admin_cpu_ms_per_start"] > 0
    assert figures["started"] == 50 and figures["failed_starts"] == 0
    assert 0 < figures["start_p50_seconds"] <= figures["start_p99_seconds"]
    assert figures["listed"] == 50
    assert figures["running_after_restart"] == 50
    assert figures["goals"]["all_succeed"] is True
