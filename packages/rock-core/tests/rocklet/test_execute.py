"""One-shot commands: ROCK's /execute, rock's resource usage and /execute_stream."""

from __future__ import annotations

import json
import sys

import httpx

ALLOCATE_50MB = "import time; block = bytearray(50 * 1024 * 1024); block[::4096] = b'x' * len(block[::4096]); print('allocated')"


def test_argv_command(rocklet):
    body = rocklet.ok("/execute", command=["echo", "hello", "world"])
    assert body["stdout"] == "hello world\n"
    assert body["stderr"] == ""
    assert body["exit_code"] == 0


def test_shell_cwd_and_env_merged_over_the_rocklets(rocklet, tmp_path):
    body = rocklet.ok(
        "/execute",
        command="pwd; echo $EXTRA $ROCKLET_TEST_MARKER; echo oops >&2; exit 3",
        shell=True,
        cwd=str(tmp_path),
        env={"EXTRA": "added"},
    )
    assert body["stdout"] == "%s\nadded present\n" % tmp_path
    assert body["stderr"] == "oops\n"
    assert body["exit_code"] == 3


def test_string_without_shell_is_one_program(rocklet):
    assert rocklet.ok("/execute", command="pwd", cwd="/")["stdout"] == "/\n"


def test_a_missing_program_answers_minus_one_with_the_reason_like_rock(rocklet):
    answer = rocklet.ok("/execute", command=["/no/such/program"])
    assert answer["exit_code"] == -1 and answer["stdout"] == ""
    assert "cannot run" in answer["stderr"] and "/no/such/program" in answer["stderr"]
    answer = rocklet.ok("/execute", command=["true"], cwd="/no/such/dir")
    assert answer["exit_code"] == -1 and "/no/such/dir" in answer["stderr"]


def test_a_missing_program_raises_with_check(rocklet):
    err = rocklet.error("/execute", command=["/no/such/program"], check=True)
    assert err["class_path"] == "builtins.FileNotFoundError"
    assert "/no/such/program" in err["message"]


def test_timeout_kills_the_command_and_answers_minus_one_like_rock(rocklet, tmp_path):
    marker = tmp_path / "late"
    answer = rocklet.ok(
        "/execute", command="echo early; sleep 30; touch %s" % marker, shell=True, timeout=0.5
    )
    assert answer["exit_code"] == -1 and answer["stdout"] == "early\n"
    assert "Timeout (0.5s) exceeded" in answer["stderr"] and "killed" in answer["stderr"]
    assert not marker.exists()


def test_timeout_raises_with_check(rocklet, tmp_path):
    marker = tmp_path / "late"
    err = rocklet.error(
        "/execute",
        command="echo early; sleep 30; touch %s" % marker,
        shell=True,
        timeout=0.5,
        check=True,
    )
    assert err["class_path"] == "rock.rocklet.exceptions.CommandTimeoutError"
    assert err["extra_info"]["stdout"] == "early\n"
    assert not marker.exists()


def test_check_raises_on_failure(rocklet):
    err = rocklet.error("/execute", command=["false"], check=True, error_msg="step failed")
    assert err["class_path"] == "rock.rocklet.exceptions.NonZeroExitCodeError"
    assert err["message"].startswith("step failed: ")


def test_signal_death_is_a_negative_exit_code(rocklet):
    body = rocklet.ok("/execute", command="kill -TERM $$", shell=True)
    assert body["exit_code"] == -15


def test_background_child_holding_the_pipe_does_not_block_the_answer(rocklet):
    # ROCK waits for the pipes to close; here the answer comes when the command itself is done.
    body = rocklet.ok("/execute", command="sleep 60 & echo started", shell=True, timeout=50)
    assert body["stdout"] == "started\n"


def test_usage_figures(rocklet):
    body = rocklet.ok("/execute", command=[sys.executable, "-c", ALLOCATE_50MB])
    assert body["stdout"] == "allocated\n"
    assert body["max_rss_bytes"] >= 50 * 1024 * 1024
    assert body["wall_time"] > 0
    busy = rocklet.ok(
        "/execute",
        command=[
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
        ],
    )
    assert busy["cpu_time"] >= 0.3
    assert busy["wall_time"] >= busy["cpu_time"] * 0.5


def test_twenty_megabytes_of_output(rocklet):
    body = rocklet.ok("/execute", command="yes 0123456789abcdefghi | head -c 20000000", shell=True)
    assert len(body["stdout"]) == 20_000_000


def test_binary_output_is_backslash_escaped(rocklet):
    body = rocklet.ok("/execute", command=["printf", "A\\377\\376B"])
    assert body["stdout"] == "A\\xff\\xfeB"


def test_stream_yields_output_before_the_command_ends(rocklet, tmp_path):
    flag = tmp_path / "go"
    command = "echo ready; while [ ! -e %s ]; do sleep 0.01; done; echo done >&2; exit 5" % flag
    with httpx.Client(base_url=rocklet.url, timeout=60, headers=rocklet.client.headers) as client:
        with client.stream(
            "POST", "/execute_stream", json={"command": command, "shell": True}
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-ndjson"
            lines = response.iter_lines()
            events = [json.loads(next(lines))]
            assert events[0]["type"] == "start"
            events.append(json.loads(next(lines)))
            # The command is still waiting for the flag: the output came while it ran.
            assert events[1] == {"type": "output", "stream": "stdout", "data": "ready\n"}
            flag.touch()
            events += [json.loads(line) for line in lines if line]
    assert {"type": "output", "stream": "stderr", "data": "done\n"} in events
    last = events[-1]
    assert last["type"] == "exit"
    assert last["exit_code"] == 5
    assert last["timed_out"] is False
    assert {"wall_time", "cpu_time", "max_rss_bytes"} <= set(last)


def test_stream_reports_a_timeout(rocklet):
    with httpx.Client(base_url=rocklet.url, timeout=60, headers=rocklet.client.headers) as client:
        response = client.post("/execute_stream", json={"command": ["sleep", "30"], "timeout": 0.3})
    events = [json.loads(line) for line in response.text.splitlines()]
    assert events[-1]["type"] == "exit"
    assert events[-1]["timed_out"] is True
    assert events[-1]["exit_code"] == -9
