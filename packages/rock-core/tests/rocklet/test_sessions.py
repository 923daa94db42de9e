"""Persistent bash sessions: ROCK's semantics (reference §3.2) and rock's interrupt."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid

import pytest

from rock_core.testing import eventually


def observation(response):
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response):
    assert response.status_code == 511, response.text
    return response.json()["rockletexception"]


def test_output_and_exit_code_come_back(run):
    obs = observation(run("echo hello; echo world"))
    assert obs == {
        "session_type": "bash",
        "output": "hello\nworld",
        "exit_code": 0,
        "failure_reason": "",
        "expect_string": "",
    }


def test_state_persists_between_commands(run):
    observation(run("cd /tmp && export GREETING=hi && counter=41"))
    assert observation(run("pwd"))["output"] == "/tmp"
    assert observation(run("echo $GREETING $((counter + 1))"))["output"] == "hi 42"


def test_check_silent_reports_the_exit_code(run):
    assert observation(run("false", check="silent"))["exit_code"] == 1
    assert observation(run("(exit 7)", check="silent"))["exit_code"] == 7
    assert observation(run("false\ntrue", check="silent"))["exit_code"] == 0


def test_check_ignore_reports_no_exit_code(run):
    obs = observation(run("echo out; false", check="ignore"))
    assert obs["exit_code"] is None
    assert obs["output"] == "out"


def test_check_raise_fails_on_non_zero_exit(run):
    err = error_of(run("echo partial; exit_status() { return 3; }; exit_status"))
    assert err["class_path"] == "rock.rocklet.exceptions.NonZeroExitCodeError"
    assert "failed with exit code 3" in err["message"]
    assert "partial" in err["message"]
    err = error_of(run("false", error_msg="while testing"))
    assert err["message"].startswith("while testing: ")


def test_multi_line_commands_and_heredocs(run, tmp_path):
    target = tmp_path / "heredoc.txt"
    command = (
        "cat > %s <<'EOF'\nliteral $HOME\n  indented\nEOF\necho written \\\n  on two lines\ncat %s"
        % (target, target)
    )
    obs = observation(run(command))
    assert obs["output"] == "written on two lines\nliteral $HOME\n  indented"
    assert target.read_text() == "literal $HOME\n  indented\n"


def test_big_command_text_goes_through_whole(run, tmp_path):
    # Far beyond a terminal's 4 KiB line limit.
    payload = "x" * 200_000
    target = tmp_path / "big.txt"
    obs = observation(run("cat > %s <<'EOF'\n%s\nEOF\nwc -c < %s" % (target, payload, target)))
    assert obs["output"] == str(len(payload) + 1)


def test_text_that_looks_like_a_prompt_is_just_output(run):
    command = 'echo SHELLPS1PREFIX; echo __ROCK_PS1_; echo "$PS1"; echo EXITCODESTART0EXITCODEEND'
    obs = observation(run(command))
    lines = obs["output"].splitlines()
    assert lines[0] == "SHELLPS1PREFIX"
    assert lines[1] == "__ROCK_PS1_"
    assert lines[2].startswith("__ROCK_PS1_")
    assert lines[3] == "EXITCODESTART0EXITCODEEND"
    assert observation(run("echo next"))["output"] == "next"


def test_no_history_expansion(run):
    assert observation(run('echo "wow!" !!'))["output"] == "wow! !!"


@pytest.mark.parametrize(
    "command",
    [
        "touch {marker}; if then fi",
        "touch {marker}\necho 'unterminated",
        # A "}" standing as a word: checked with a real `bash -n`.
        "touch {marker}\n}}\necho after",
    ],
)
def test_syntax_error_raises_and_runs_nothing(run, tmp_path, command):
    marker = tmp_path / "ran"
    err = error_of(run(command.format(marker=marker)))
    assert err["class_path"] == "rock.rocklet.exceptions.BashIncorrectSyntaxError"
    assert (
        "syntax error" in err["extra_info"]["bash_stderr"]
        or "unexpected" in err["extra_info"]["bash_stderr"]
    )
    assert not marker.exists()
    assert observation(run("echo fine"))["output"] == "fine"


def test_braces_and_functions_are_fine(run):
    command = (
        "greet() {\n  echo \"hi $1\"\n}\ngreet you; { echo grouped; }; echo ${HOME:+home}; echo '}'"
    )
    assert observation(run(command))["output"] == "hi you\ngrouped\nhome\n}"


def test_timeout_interrupts_and_the_session_stays_usable(run):
    err = error_of(run("echo started; sleep 30", timeout=0.5))
    assert err["class_path"] == "rock.rocklet.exceptions.CommandTimeoutError"
    assert "timeout after 0.5 seconds" in err["message"]
    assert "started" in err["extra_info"]["output"]
    obs = observation(run("echo usable"))
    assert obs["output"] == "usable"
    assert obs["exit_code"] == 0


def test_no_timeout_by_default(run):
    assert observation(run("sleep 1.5; echo done"))["output"] == "done"


def test_interrupt_stops_the_running_command(rocklet, run, session):
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(r=run("echo begin; sleep 100", check="silent"))
    )
    thread.start()
    # Wait until the command is running: a second interrupt-free request on the same session
    # would queue, so look for the sleep instead.
    _wait_for_process("sleep 100")
    answer = rocklet.ok("/interrupt_session", session=session)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert answer["interrupted"] is True
    obs = observation(result["r"])
    assert obs["exit_code"] == 130
    assert "begin" in obs["output"]
    assert observation(run("echo after"))["output"] == "after"


def test_interrupt_escalates_when_sigint_is_ignored(rocklet, run, session):
    result = {}
    command = "bash -c \"trap '' INT; sleep 101\""
    thread = threading.Thread(target=lambda: result.update(r=run(command, check="silent")))
    thread.start()
    _wait_for_process("sleep 101")
    rocklet.ok("/interrupt_session", session=session)
    thread.join(timeout=60)
    obs = observation(result["r"])
    assert obs["exit_code"] == 137  # killed
    assert observation(run("echo after"))["output"] == "after"


def test_interrupt_of_an_idle_session_does_nothing(rocklet, session):
    assert rocklet.ok("/interrupt_session", session=session)["interrupted"] is False
    obs = rocklet.ok("/run_in_session", session=session, command="echo still")
    assert obs["output"] == "still"


def test_expect_returns_early_and_input_goes_to_the_program(rocklet, run, session):
    obs = observation(
        run(
            'read -p "name? " who; echo "hello $who"; exit_status=4; (exit 4)',
            expect=["name? "],
            check="silent",
        )
    )
    assert obs["expect_string"] == "name? "
    assert obs["exit_code"] is None
    obs = observation(run("world", check="silent"))
    assert obs["output"] == "hello world"
    assert obs["exit_code"] == 4


def test_expect_with_a_running_program_can_be_interrupted(rocklet, run, session):
    obs = observation(run("echo ready; cat", expect=["ready"]))
    assert obs["expect_string"] == "ready"
    answer = rocklet.ok("/interrupt_session", session=session)
    assert answer["interrupted"] is True
    assert answer["exit_code"] == 130
    assert observation(run("echo back"))["output"] == "back"


def test_env_and_env_enable(rocklet):
    name = "env-" + uuid.uuid4().hex[:8]
    out = rocklet.ok("/create_session", session=name, env={"FOO": "bar baz"})
    assert out == {"output": "", "session_type": "bash"}
    obs = rocklet.ok(
        "/run_in_session", session=name, command="echo $FOO; echo ${ROCKLET_TEST_MARKER:-absent}"
    )
    assert obs["output"] == "bar baz\nabsent"
    rocklet.ok("/close_session", session=name)

    rocklet.ok("/create_session", session=name, env_enable=True, env={"FOO": "override"})
    obs = rocklet.ok("/run_in_session", session=name, command="echo $FOO $ROCKLET_TEST_MARKER")
    assert obs["output"] == "override present"
    rocklet.ok("/close_session", session=name)


def test_startup_source(rocklet, tmp_path):
    script = tmp_path / "profile.sh"
    script.write_text("export FROM_SOURCE=yes\necho sourced-output\n")
    name = "src-" + uuid.uuid4().hex[:8]
    out = rocklet.ok("/create_session", session=name, startup_source=[str(script)])
    assert "sourced-output" in out["output"]
    assert (
        rocklet.ok("/run_in_session", session=name, command="echo $FROM_SOURCE")["output"] == "yes"
    )
    rocklet.ok("/close_session", session=name)


def test_prompt_command_from_env_is_neutralised_but_can_be_set_later(rocklet):
    name = "pc-" + uuid.uuid4().hex[:8]
    rocklet.ok("/create_session", session=name, env={"PROMPT_COMMAND": "echo FROM_PC"})
    assert rocklet.ok("/run_in_session", session=name, command="echo hi")["output"] == "hi"
    rocklet.ok("/run_in_session", session=name, command="PROMPT_COMMAND='echo FROM_PC'")
    assert "FROM_PC" in rocklet.ok("/run_in_session", session=name, command="echo again")["output"]
    rocklet.ok("/close_session", session=name)


def test_duplicate_unknown_and_closed_sessions(rocklet):
    name = "dup-" + uuid.uuid4().hex[:8]
    rocklet.ok("/create_session", session=name)
    err = rocklet.error("/create_session", session=name)
    assert err["class_path"] == "rock.rocklet.exceptions.SessionExistsError"
    assert rocklet.ok("/close_session", session=name) == {"session_type": "bash"}
    err = rocklet.error("/run_in_session", session=name, command="true")
    assert err["class_path"] == "rock.rocklet.exceptions.SessionDoesNotExistError"
    err = rocklet.error("/close_session", session=name)
    assert err["class_path"] == "rock.rocklet.exceptions.SessionDoesNotExistError"


def test_close_closes_every_session(rocklet):
    names = ["all-%d-%s" % (i, uuid.uuid4().hex[:6]) for i in range(2)]
    for name in names:
        rocklet.ok("/create_session", session=name)
    assert rocklet.ok("/close") == {}
    for name in names:
        err = rocklet.error("/run_in_session", session=name, command="true")
        assert err["class_path"] == "rock.rocklet.exceptions.SessionDoesNotExistError"


def test_exit_ends_the_session(rocklet, run, session):
    err = error_of(run("echo bye; exit 3"))
    assert err["class_path"] == "rock.rocklet.exceptions.SessionExitedError"
    assert "bye" in err["extra_info"]["output"]
    err = error_of(run("true"))
    assert err["class_path"] == "rock.rocklet.exceptions.SessionDoesNotExistError"


def test_nohup_jobs_survive_closing_the_session(rocklet, tmp_path):
    name = "nohup-" + uuid.uuid4().hex[:8]
    flag = tmp_path / "flag"
    out = tmp_path / "out"
    rocklet.ok("/create_session", session=name)
    obs = rocklet.ok(
        "/run_in_session",
        session=name,
        command="nohup bash -c 'while [ ! -e %s ]; do sleep 0.05; done; echo survived' < /dev/null > %s 2>&1 & echo PIDSTART${!}PIDEND; disown"
        % (flag, out),
    )
    pid = int(obs["output"].split("PIDSTART")[1].split("PIDEND")[0])
    rocklet.ok("/close_session", session=name)
    os.kill(pid, 0)  # still alive after the session is gone
    flag.touch()
    rocklet.ok(
        "/execute",
        command="while kill -0 %d 2>/dev/null; do sleep 0.05; done" % pid,
        shell=True,
        timeout=30,
    )
    assert out.read_text().strip() == "survived"


def test_twenty_megabytes_of_output(run):
    obs = observation(run("yes 0123456789abcdefghi | head -c 20000005"))
    assert len(obs["output"]) == 20_000_005
    assert obs["output"].startswith("0123456789abcdefghi\n0123")


def test_binary_output_is_backslash_escaped(run):
    obs = observation(run(r"printf 'A\xff\xfeB\n'"))
    assert obs["output"] == "A\\xff\\xfeB"


def test_commands_on_one_session_are_serialised(rocklet, run):
    results = []

    def go(i):
        results.append(observation(run("sleep 0.2; echo %d" % i))["output"])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["0", "1", "2"]


def test_remote_user_runs_the_shell_as_that_user(rocklet):
    if os.geteuid() != 0:
        pytest.fail("the test host runs as root; remote_user needs root to su without a password")
    user = "rkt" + uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", user], check=True)
    try:
        name = "user-" + user
        rocklet.ok("/create_session", session=name, remote_user=user)
        obs = rocklet.ok("/run_in_session", session=name, command="whoami; echo $HOME")
        assert obs["output"].splitlines()[0] == user
        obs = rocklet.ok(
            "/run_in_session", session=name, command="for i in 1 2; do\n echo line$i\ndone"
        )
        assert obs["output"] == "line1\nline2"
        err = rocklet.error(
            "/run_in_session", session=name, command="touch /root/forbidden-by-user"
        )
        assert err["class_path"] == "rock.rocklet.exceptions.NonZeroExitCodeError"
        rocklet.ok("/close_session", session=name)
        err = rocklet.error("/create_session", session="ghost", remote_user="no_such_user_" + user)
        assert err["class_path"] == "rock.rocklet.exceptions.SessionNotInitializedError"
    finally:
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        subprocess.run(["userdel", "-r", user], check=False, capture_output=True)


def _process_running(command_line: str) -> bool:
    """Whether a process whose whole command line is ``command_line`` exists (whole: another
    test's or a sandbox's ``sleep 1000`` is not this test's ``sleep 100``)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read().rstrip(b"\0").replace(b"\0", b" ") == command_line.encode():
                    return True
        except OSError:
            continue
    return False


def _wait_for_process(pattern: str) -> None:
    """Block until a process whose whole command line is ``pattern`` exists."""
    eventually(
        lambda: _process_running(pattern),
        what=f"a process running {pattern!r}",
        timeout=30,
        interval=0.01,
    )
