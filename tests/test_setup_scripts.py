"""The set-up scripts' own logic, run by bash as the README's commands run it (issue #30 point 6):
a pid file that a killed dockerd left behind is known for stale, whoever started that daemon, and
a live daemon's is not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _stale(pid_file: Path, name: str) -> bool:
    script = f'. "{REPO}/scripts/lib.sh"; stale_pid_file "$1" "$2"'
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(pid_file), name],
        env={"PATH": "/usr/bin:/bin", "ROCK_STATE_DIR": str(pid_file.parent / "state")},
        check=False,
    )
    return done.returncode == 0


def test_a_pid_file_of_a_dead_or_other_process_is_stale_and_a_live_daemons_is_not(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "docker.pid"
    assert not _stale(pid_file, "dockerd")  # no file: nothing to remove
    # A daemon that died: its pid names no process.
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file.write_text(f"{dead.pid}\n")
    assert _stale(pid_file, "dockerd")
    pid_file.write_text("")
    assert _stale(pid_file, "dockerd")  # an empty file is no daemon's
    # Its pid reused by another program.
    other = subprocess.Popen(["sleep", "30"])
    # A live process called dockerd (a copy of sleep under that name).
    fake = tmp_path / "dockerd"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    daemon = subprocess.Popen([str(fake), "30"])
    try:
        pid_file.write_text(f"{other.pid}\n")
        assert _stale(pid_file, "dockerd")
        pid_file.write_text(f"{daemon.pid}\n")
        assert not _stale(pid_file, "dockerd")
    finally:
        for process in (other, daemon):
            process.kill()
            process.wait()
