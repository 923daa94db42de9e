"""The rocklet started from the source tree (``python -m rock_core.rocklet``) serves like the pyz.

Every other test of this folder drives the pyz, the form sandboxes run; this one proves the
source entry point (which the terminal and env tests also start) answers ROCK's calls: the
probe, a command, a bash session keeping its state, a file written and read, and a clean stop.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import start_rocklet


def test_the_source_tree_rocklet_serves_commands_sessions_and_files(pyz: Path, tmp_path: Path):
    (tmp_path / "rocklet").mkdir()
    rocklet = start_rocklet("source", pyz, tmp_path / "rocklet")
    try:
        assert rocklet.client.get("/is_alive").json() == {"is_alive": True, "message": ""}
        # Started from the source tree, with the marker its environment was given.
        marker = rocklet.ok("/execute", command="echo $ROCKLET_TEST_MARKER", shell=True)
        assert marker["stdout"] == "present\n"
        assert marker["exit_code"] == 0

        rocklet.ok("/create_session", session="source")
        first = rocklet.post("/run_in_session", session="source", command="cd /tmp; X=41")
        assert first.status_code == 200, first.text
        second = rocklet.post("/run_in_session", session="source", command="echo $((X + 1)) $(pwd)")
        assert second.json()["output"] == "42 /tmp"
        rocklet.post("/close_session", session="source")

        target = tmp_path / "files" / "note.txt"
        assert rocklet.ok("/write_file", path=str(target), content="from source\n") == {
            "success": True,
            "message": "",
        }
        assert target.read_text() == "from source\n"
        assert rocklet.ok("/read_file", path=str(target)) == {"content": "from source\n"}
    finally:
        status = rocklet.stop()
    assert status == 0, rocklet.stderr_path.read_text(errors="replace")
