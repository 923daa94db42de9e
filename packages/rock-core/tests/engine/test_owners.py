"""Process identity: an owner is dead once its process exited, even before its parent reaps it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from rock_core.engine.owners import owner_is_dead, proc_start_time, process_alive, process_owner
from rock_core.testing import eventually


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[-1].split()[0]


def test_a_running_owner_is_alive_and_a_zombie_is_dead() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        owner = process_owner(child.pid)
        assert owner.endswith(f":{child.pid}:{proc_start_time(child.pid)}")
        assert not owner_is_dead(owner) and process_alive(child.pid)
        child.stdin.close()  # it exits; not reaped yet: a zombie
        eventually(
            lambda: _state(child.pid) == "Z",
            what="the child exiting (a zombie)",
            timeout=30,
            interval=0.01,
        )
        assert owner_is_dead(owner) and not process_alive(child.pid)
    finally:
        child.wait()
    assert owner_is_dead(owner)  # reaped: gone


def test_a_reused_pid_is_another_process() -> None:
    me = os.getpid()
    assert process_alive(me) and process_alive(me, proc_start_time(me))
    assert not process_alive(me, "1")  # started at another time: not the owner
    assert owner_is_dead(f"proc:{socket.gethostname()}:{me}:1")


def test_owners_of_other_hosts_or_kinds_are_never_judged() -> None:
    assert not owner_is_dead("proc:some-other-host:1:1")
    assert not owner_is_dead("admin:/var/lib/rock/rock.db")
    assert not owner_is_dead("proc:garbage")


def test_an_admin_is_judged_by_its_folder_only_on_its_own_host(tmp_path) -> None:
    from rock_core.engine.owners import admin_folder_gone, host_identity

    here = host_identity()
    gone = f"admin:{tmp_path / 'gone' / 'rock.db'}"
    kept = tmp_path / "kept"
    kept.mkdir()
    assert here.count("/") == 2 and socket.gethostname() in here
    assert admin_folder_gone(gone, here)
    assert not admin_folder_gone(f"admin:{kept / 'rock.db'}", here)
    assert not admin_folder_gone(gone, "another-machine/another-host/1")  # a shared dockerd
    assert not admin_folder_gone(gone, "")  # an old label: no host to trust
    assert not admin_folder_gone(f"admin:{tmp_path / 'no' / 'tree' / 'rock.db'}", here)
    assert not admin_folder_gone("admin:relative/rock.db", here)
    assert not admin_folder_gone(f"cluster:{gone}", here)
