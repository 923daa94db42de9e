"""Background processes: real exit code, output, duration, CPU time and peak memory."""

from __future__ import annotations

import sys

ALLOCATE_50MB = "import time; block = bytearray(50 * 1024 * 1024); block[::4096] = b'x' * len(block[::4096]); print('allocated')"


def start(rocklet, **body):
    return rocklet.ok("/processes", **body)


def status(rocklet, process_id, wait=30, tail=None):
    params = {"wait": wait}
    if tail is not None:
        params["tail"] = tail
    response = rocklet.client.get("/processes/%s" % process_id, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_exit_code_output_and_duration(rocklet):
    started = start(rocklet, command="echo one; echo two >&2; sleep 0.2; exit 3")
    assert started["pid"] > 0
    final = status(rocklet, started["process_id"])
    assert final["running"] is False
    assert final["exit_code"] == 3
    assert final["signal"] is None
    assert final["output_tail"] == "one\ntwo\n"
    assert final["wall_time"] >= 0.2


def test_running_then_killed_by_signal(rocklet):
    started = start(rocklet, command=["sleep", "60"])
    now = status(rocklet, started["process_id"], wait=0)
    assert now["running"] is True
    assert now["exit_code"] is None
    killed = rocklet.ok("/processes/%s/kill" % started["process_id"], signal="KILL", wait=30)
    assert killed["running"] is False
    assert killed["exit_code"] == -9
    assert killed["signal"] == 9


def test_output_from_an_offset(rocklet):
    started = start(rocklet, command="printf 0123456789")
    status(rocklet, started["process_id"])
    response = rocklet.client.get(
        "/processes/%s/output" % started["process_id"], params={"offset": 4}
    )
    assert response.content == b"456789"
    assert response.headers["x-rock-next-offset"] == "10"
    assert response.headers["x-rock-running"] == "false"
    tail = status(rocklet, started["process_id"], tail=3)
    assert tail["output_tail"] == "789"
    assert tail["output_size"] == 10


def test_cpu_time_and_peak_memory(rocklet):
    started = start(
        rocklet,
        command=[
            sys.executable,
            "-c",
            ALLOCATE_50MB
            + "\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
        ],
    )
    final = status(rocklet, started["process_id"], wait=60)
    assert final["exit_code"] == 0
    assert final["max_rss_bytes"] >= 50 * 1024 * 1024
    assert final["cpu_time"] >= 0.3


def test_timeout_kills_the_process(rocklet):
    started = start(rocklet, command=["sleep", "30"], timeout=0.3)
    final = status(rocklet, started["process_id"])
    assert final["timed_out"] is True
    assert final["signal"] == 9


def test_listing_and_unknown_ids(rocklet):
    started = start(rocklet, command=["true"])
    listed = rocklet.client.get("/processes").json()["processes"]
    assert started["process_id"] in [p["process_id"] for p in listed]
    response = rocklet.client.get("/processes/does-not-exist")
    assert response.status_code == 511
    assert (
        response.json()["rockletexception"]["class_path"]
        == "rock.rocklet.exceptions.ProcessDoesNotExistError"
    )
    response = rocklet.post("/processes/%s/kill" % started["process_id"], signal="NOPE")
    assert response.status_code == 400
