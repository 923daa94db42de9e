"""Sessions and commands: ``arun`` in both modes, ``execute``, sessions, users and rock's extras.

Covers ROCK's scenarios (reference §13) 5, 6, 7, 9, 10 (execute) and 12, and the bad input a
command can bring: unknown or closed sessions, timeouts, huge and binary output.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rock.actions import BashAction, CloseBashSessionRequest, Command, CreateBashSessionRequest
from rock.sdk.common.exceptions import InvalidParameterRockException
from rock.sdk.sandbox import client as client_module
from rock.sdk.sandbox.client import RunMode
from rock_core.errors import (
    CommandTimeout,
    InvalidParameter,
    NonZeroExitCode,
    SessionAlreadyExists,
    SessionNotFound,
)
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


# -- normal mode --------------------------------------------------------------------------------


async def test_arun_keeps_session_state(sandbox: Any, session: str) -> None:
    await sandbox.arun("cd /tmp && export GREETING=hi", session=session)
    observation = await sandbox.arun("echo $GREETING from $(pwd)", session=session)
    assert (observation.output, observation.exit_code, observation.failure_reason) == (
        "hi from /tmp",
        0,
        "",
    )


async def test_arun_without_a_session_uses_a_new_one_each_time(sandbox: Any) -> None:
    await sandbox.arun("export ONLY_HERE=1")
    assert (await sandbox.arun("echo ${ONLY_HERE:-unset}")).output == "unset"


async def test_a_non_zero_exit_raises_with_the_output(sandbox: Any, session: str) -> None:
    with pytest.raises(NonZeroExitCode, match="exit code 3") as info:
        await sandbox.arun("echo about to fail; sh -c 'exit 3'", session=session)
    assert info.value.exit_code == 3 and "about to fail" in info.value.output
    assert (await sandbox.arun("echo still usable", session=session)).output == "still usable"


async def test_the_rocklet_mount_is_read_only(sandbox: Any, session: str) -> None:
    """ROCK scenario 9: the agent's files are mounted read-only (rock-docker mounts them at /rock)."""
    assert "rocklet.pyz" in (await sandbox.arun("ls /rock", session=session)).output
    for command in (
        "rm -rf /rock/rocklet.pyz",
        "chmod 777 /rock/rocklet.pyz",
        "touch /rock/new-file",
    ):
        with pytest.raises(NonZeroExitCode, match="Read-only file system"):
            await sandbox.arun(command, session=session)


async def test_the_sandboxs_tmp_holds_nothing_of_rocks(sandbox: Any, session: str) -> None:
    """A user's ``ls -a /tmp`` meets none of the rocklet's own files (its state is in /run)."""
    listed = (await sandbox.arun("ls -a /tmp", session=session)).output
    assert "rocklet" not in listed, listed


async def test_unknown_and_closed_sessions_raise(sandbox: Any) -> None:
    """ROCK scenario 12 (first half): arun on a closed session raises."""
    with pytest.raises(SessionNotFound, match="'no-such-session'"):
        await sandbox.arun("true", session="no-such-session")
    await sandbox.create_session(CreateBashSessionRequest(session="closing"))
    with pytest.raises(SessionAlreadyExists):
        await sandbox.create_session(CreateBashSessionRequest(session="closing"))
    await sandbox.close_session(CloseBashSessionRequest(session="closing"))
    with pytest.raises(SessionNotFound):
        await sandbox.arun("true", session="closing")
    with pytest.raises(SessionNotFound):
        await sandbox.close_session(CloseBashSessionRequest(session="closing"))


async def test_a_session_timeout_raises_and_the_session_survives(
    sandbox: Any, session: str
) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(CommandTimeout, match="timeout after 1"):
        await sandbox.run_in_session(BashAction(command="sleep 30", session=session, timeout=1))
    assert (await sandbox.arun("echo alive", session=session)).output == "alive"


async def test_twenty_megabytes_of_output(sandbox: Any, session: str) -> None:
    observation = await sandbox.arun("head -c 20000000 /dev/zero | tr '\\0' a", session=session)
    assert len(observation.output) == 20_000_000 and set(observation.output) == {"a"}


async def test_binary_output_comes_back_as_text(sandbox: Any, session: str) -> None:
    observation = await sandbox.arun("printf 'ok\\377\\000\\201end'", session=session)
    assert observation.exit_code == 0
    assert (
        observation.output.startswith("ok")
        and observation.output.endswith("end")
        and "\\xff" in observation.output
    )


async def test_session_env_and_remote_user(sandbox: Any) -> None:
    """ROCK scenario 12 (second half): a session as a user made with remote_user."""
    assert await sandbox.remote_user.create_remote_user("rockuser")
    assert await sandbox.remote_user.is_user_exist("rockuser")
    assert not await sandbox.remote_user.is_user_exist("nobody-here")
    assert await sandbox.remote_user.create_remote_user("rockuser")  # exists: fine
    await sandbox.create_session(
        CreateBashSessionRequest(session="as-user", remote_user="rockuser", env={"TEAM": "rl"})
    )
    assert (await sandbox.arun("whoami; echo $TEAM", session="as-user")).output == "rockuser\nrl"


async def test_an_unknown_mode_is_refused(sandbox: Any) -> None:
    with pytest.raises(InvalidParameterRockException, match="Unsupported arun mode"):
        await sandbox.arun("true", mode="background")  # type: ignore[arg-type]


# -- nohup mode -----------------------------------------------------------------------------------


async def test_nohup_heredoc_and_ignore_output(sandbox: Any, session: str) -> None:
    """ROCK scenario 5."""
    cat_cmd = "cat > /tmp/nohup_test.txt << 'EOF'\n#!/usr/bin/env python3\nimport os\nEOF"
    observation = await sandbox.arun(f"/bin/bash -c '{cat_cmd}'", session=session, mode="nohup")
    assert observation.exit_code == 0
    assert "import os" in (await sandbox.arun("cat /tmp/nohup_test.txt", session=session)).output

    detached = await sandbox.arun(
        "/bin/bash -c 'echo detached-output'",
        session=session,
        mode=RunMode.NOHUP,
        ignore_output=True,
    )
    lines = detached.output.splitlines()
    assert lines[0] == "Command executed in nohup mode without streaming the log content."
    assert "Status: completed" in lines and "File size: 16 bytes" in lines
    output_file = (
        next(line for line in lines if line.startswith("Output file:")).split(":", 1)[1].strip()
    )
    assert (await sandbox.arun(f"cat {output_file}", session=session)).output == "detached-output"


async def test_nohup_returns_the_real_exit_code(sandbox: Any, session: str) -> None:
    failed = await sandbox.arun("bash -c 'echo partial; exit 3'", session=session, mode="nohup")
    assert (failed.output, failed.exit_code) == ("partial", 3)
    assert "exited with code 3" in failed.failure_reason
    ok = await sandbox.arun("python3 -c 'print(6 * 7)'", session=session, mode="nohup")
    assert (ok.output, ok.exit_code, ok.failure_reason) == ("42", 0, "")
    hinted = await sandbox.arun(
        "bash -c 'exit 5'", session=session, mode="nohup", ignore_output=True
    )
    assert hinted.exit_code == 5 and "Status: finished with errors" in hinted.output


async def test_nohup_runs_in_the_sessions_directory_and_environment(
    sandbox: Any, session: str
) -> None:
    await sandbox.arun("mkdir -p /tmp/work && cd /tmp/work && export JOB=train", session=session)
    observation = await sandbox.arun("bash -c 'echo $JOB in $PWD'", session=session, mode="nohup")
    assert observation.output == "train in /tmp/work"


async def test_nohup_output_file_rules(sandbox: Any, session: str) -> None:
    """ROCK scenario 7."""
    refused = await sandbox.arun("echo x", session=session, mode="nohup", output_file="output")
    assert refused.exit_code == 1 and "Failed parse output file path: output" in refused.output
    await sandbox.arun("mkdir -p /root/rel && cd /root/rel", session=session)
    for output_file, where in [
        ("tmp/file.txt", "/root/rel/tmp/file.txt"),
        ("file.txt", "/root/rel/file.txt"),
        ("/root/mydir/file.txt", "/root/mydir/file.txt"),
    ]:
        observation = await sandbox.arun(
            f"echo to {output_file}", session=session, mode="nohup", output_file=output_file
        )
        assert (observation.output, observation.exit_code) == (f"to {output_file}", 0)
        assert (await sandbox.arun(f"cat {where}", session=session)).output == f"to {output_file}"


async def test_nohup_limited_output(sandbox: Any, session: str) -> None:
    observation = await sandbox.arun(
        "python3 -c \"print('x' * 5000)\"",
        session=session,
        mode="nohup",
        response_limited_bytes_in_nohup=100,
    )
    assert observation.output == "x" * 100


async def test_nohup_wait_timeout(sandbox: Any, session: str) -> None:
    observation = await sandbox.arun("sleep 30", session=session, mode="nohup", wait_timeout=1)
    assert observation.exit_code == 1
    assert (
        "did not complete within" in observation.failure_reason
        and "(timeout: 1s)" in observation.failure_reason
    )


async def test_a_hanging_nohup_submission_times_out(
    sandbox: Any, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ROCK scenario 6: the submission itself hangs (here "sleep" runs before the "&")."""
    monkeypatch.setattr(
        client_module, "NOHUP_SUBMIT_TIMEOUT", 2.0
    )  # ROCK's 30 s, shortened for the test
    observation = await sandbox.arun("sleep 60; true", session=session, mode="nohup")
    assert observation.exit_code == 1
    assert observation.output.startswith(
        "Command execution failed due to timeout: 'sleep 60; true'."
    )
    assert observation.failure_reason == observation.output
    assert (await sandbox.arun("echo recovered", session=session)).output == "recovered"


async def test_a_nohup_syntax_error_fails_at_once(sandbox: Any, session: str) -> None:
    observation = await sandbox.arun("echo 'unterminated", session=session, mode="nohup")
    assert observation.exit_code == 1
    assert observation.output.startswith("Failed to execute nohup command 'echo 'unterminated':")
    assert "unexpected EOF" in observation.output


async def test_nohup_in_a_missing_session_is_an_observation(sandbox: Any) -> None:
    observation = await sandbox.arun("true", session="not-there", mode="nohup")
    assert observation.exit_code == 1 and "does not exist" in observation.failure_reason


async def test_deprecated_run_nohup_and_wait(sandbox: Any) -> None:
    with pytest.warns(DeprecationWarning):
        done = await sandbox.run_nohup_and_wait("bash -c 'echo x > /tmp/rnw.txt'", wait_timeout=30)
    assert done.success and "completed" in done.message
    assert (await sandbox.arun("cat /tmp/rnw.txt")).output == "x"
    with pytest.warns(DeprecationWarning):
        failed = await sandbox.run_nohup_and_wait("bash -c 'exit 4'", wait_timeout=30)
    assert not failed.success and "exited with code 4" in failed.message


async def test_execute_script(sandbox: Any) -> None:
    observation = await sandbox.process.execute_script(
        "echo $((2 + 3))\nexit 4\n", script_name="calc.sh"
    )
    assert (observation.output, observation.exit_code) == ("5", 4)
    assert (
        await sandbox.execute(Command(command=["test", "-e", "/tmp/calc.sh"]))
    ).exit_code == 1  # cleaned up


# -- execute ---------------------------------------------------------------------------------------


async def test_execute_with_cwd_env_and_usage(sandbox: Any) -> None:
    """ROCK scenario 10: execute(Command(command="pwd", cwd="/root"))."""
    result = await sandbox.execute(Command(command="pwd", cwd="/root"))
    assert (result.stdout, result.exit_code) == ("/root\n", 0)
    result = await sandbox.execute(
        Command(command=["sh", "-c", "echo $A >&2; exit 9"], env={"A": "from-env"})
    )
    assert (result.stderr, result.exit_code) == ("from-env\n", 9)
    assert result.wall_time is not None and result.max_rss_bytes


async def test_execute_timeout_and_missing_program_answer_minus_one_like_rock(sandbox: Any) -> None:
    timed_out = await sandbox.execute(
        Command(command=["sh", "-c", "echo started; sleep 30"], timeout=1)
    )
    assert (timed_out.exit_code, timed_out.stdout, timed_out.timed_out) == (-1, "started\n", True)
    assert "Timeout (1s) exceeded" in timed_out.stderr
    missing = await sandbox.execute(Command(command=["no-such-program"]))
    assert missing.exit_code == -1 and "no-such-program" in missing.stderr


async def test_execute_raises_when_asked(sandbox: Any) -> None:
    with pytest.raises(CommandTimeout, match="Timeout"):
        await sandbox.execute(Command(command=["sleep", "30"], timeout=1), check=True)
    with pytest.raises(InvalidParameter, match="no-such-program"):
        await sandbox.execute(Command(command=["no-such-program"]), check=True)
    with pytest.raises(NonZeroExitCode):
        await sandbox.execute(Command(command=["sh", "-c", "exit 3"]), check=True)
    assert (await sandbox.execute(Command(command=["true"]), check=True)).exit_code == 0


# -- rock's extras ---------------------------------------------------------------------------------


async def test_interrupt_a_running_command(sandbox: Any, session: str) -> None:
    marker = f"/tmp/interrupt-{session}"
    running = asyncio.create_task(
        sandbox.arun(f"echo started; touch {marker}; sleep 60", session=session)
    )
    # Interrupt only once the command is surely running (past its echo), whatever the load.
    await eventually_async(
        lambda: sandbox.execute(Command(command=["test", "-f", marker])),
        until=lambda result: result.exit_code == 0,
        what="the command past its echo",
        interval=0.05,
    )
    result = await eventually_async(
        lambda: sandbox.interrupt(session),
        until=lambda result: result.interrupted,
        what="an interrupt that lands",
        interval=0.05,
    )
    assert (result.interrupted, result.exit_code) == (True, 130)
    with pytest.raises(NonZeroExitCode, match="exit code 130") as info:
        await running
    assert "started" in info.value.output
    assert (await sandbox.arun("echo next", session=session)).output == "next"


async def test_background_processes(sandbox: Any) -> None:
    started = await sandbox.start_process("echo from-background; exit 7")
    info = await sandbox.process_status(started.process_id, wait=30)
    assert (info.running, info.exit_code) == (False, 7)
    assert await sandbox.process_output(started.process_id) == b"from-background\n"

    sleeper = await sandbox.start_process(["sleep", "60"])
    assert (await sandbox.process_status(sleeper.process_id)).running
    killed = await sandbox.kill_process(sleeper.process_id, signal="KILL", wait=10)
    assert (killed.running, killed.signal, killed.exit_code) == (False, 9, -9)


async def test_execute_stream(sandbox: Any) -> None:
    events = [
        e async for e in sandbox.execute_stream(["sh", "-c", "echo one; echo two >&2; exit 2"])
    ]
    assert (
        events[0]["type"] == "start"
        and events[-1]["type"] == "exit"
        and events[-1]["exit_code"] == 2
    )
    out = "".join(e["data"] for e in events if e["type"] == "output" and e["stream"] == "stdout")
    err = "".join(e["data"] for e in events if e["type"] == "output" and e["stream"] == "stderr")
    assert (out, err) == ("one\n", "two\n")


async def test_stopping_a_stream_early_ends_the_command(sandbox: Any) -> None:
    stream = sandbox.execute_stream(["sh", "-c", "echo first; sleep 60"])
    async for event in stream:
        if event["type"] == "output":
            break
    await stream.aclose()
    assert (await sandbox.arun("echo after")).output == "after"


async def test_statistics(sandbox: Any) -> None:
    stats = await sandbox.get_statistics()
    assert {"cpu", "mem", "disk", "net"} <= set(stats)
