"""A fork after a change is an incremental snapshot on real Docker: the sandbox's latest snapshot
(made of the same container) plus one layer of what changed since, so the big files written
before it are shared, not copied again; the forks' files equal the parent's for every kind of
change, through a chain of incremental snapshots; what the delta does not handle falls back to a
full commit whose forks are as right."""

from __future__ import annotations

import os
from typing import Any

import pytest

from rock_core.actions import Command, SandboxStartRequest, SnapshotInfo
from rock_core.engine.manager import SandboxManager
from rock_docker._delta_layer import MAX_DEPTH

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
BIG_MIB = 20

#: Every path under the roots given, never following a link: kind, mode, owner, mtime (s), link
#: count, size, the link's target or the file's digest, the user.* and security.* attributes,
#: and which paths are the same inode.
MANIFEST = r"""
import hashlib, os, stat, sys
inodes = {}
for root in sys.argv[1:]:
    if not os.path.lexists(root):
        print(root, "gone")
        continue
    paths = [root]
    if stat.S_ISDIR(os.lstat(root).st_mode):
        paths += sorted(os.path.join(d, n) for d, ds, fs in os.walk(root) for n in ds + fs)
    for p in paths:
        st = os.lstat(p)
        row = [p, oct(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)]
        if not stat.S_ISDIR(st.st_mode):  # a directory's: overlay's count, not the files'
            row.append(st.st_nlink)
        if stat.S_ISLNK(st.st_mode):
            row.append("-> " + os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            row += [st.st_size, hashlib.sha256(open(p, "rb").read()).hexdigest()]
        names = os.listxattr(p, follow_symlinks=False)
        row += sorted((n, os.getxattr(p, n, follow_symlinks=False).hex())
                      for n in names if n.startswith(("user.", "security.")))
        print(*row)
        if not stat.S_ISDIR(st.st_mode):
            inodes.setdefault(st.st_ino, []).append(p)
print("same inode:", sorted(v for v in inodes.values() if len(v) > 1))
"""
ROOTS = ["/srv", "/usr/share/doc/tar", "/etc/issue", "/etc/rock-s1only", "/big.bin"]

# Before the first snapshot: a big file, and files the steps change (more than a second before
# the snapshot's mark, so the big file's change time is before the mark's second).
PREPARE = f"""
set -e
head -c {BIG_MIB}M /dev/urandom > /big.bin
mkdir -p /srv/dir/sub /srv/olddir /srv/tree/a
echo unchanged > /srv/dir/sub/file
echo keep > /srv/keep
echo orig > /srv/changed
echo s1 > /srv/s1only
echo s1 > /etc/rock-s1only
echo r > /srv/torename
echo h > /srv/h1
echo inside > /srv/olddir/inside
echo deep > /srv/tree/a/leaf
sleep 1.1
"""
# Every kind of change; a symbolic link to the host's /etc/shadow and one to / (never followed).
STEP_1 = r"""
set -e
echo new > /srv/new
echo changed > /srv/changed && chmod 0600 /srv/changed && chown 1234:2345 /srv/changed
rm /srv/s1only /etc/rock-s1only /etc/issue
mv /srv/torename /srv/renamed
ln /srv/h1 /srv/h2
rm -rf /srv/olddir && mkdir /srv/olddir && echo fresh > /srv/olddir/fresh
rm -rf /usr/share/doc/tar && mkdir /usr/share/doc/tar && echo replaced > /usr/share/doc/tar/new
mv /srv/tree /srv/moved
ln -s /etc/shadow /srv/shadowlink
ln -s / /srv/rootlink
mkfifo /srv/fifo
python3 -c "import os; os.setxattr('/srv/new', 'user.rock', b'v\xff\x00x')"
echo cap > /srv/capfile
python3 -c "import os; os.setxattr('/srv/capfile', 'security.capability',
    bytes.fromhex('0000000200200000000000000000000000000000'))"
"""
STEP_2 = """
set -e
echo two > /srv/new && rm /srv/renamed && mkdir -p /srv/moved/b && echo more > /srv/moved/b/f
chmod 0750 /srv/dir/sub
"""
STEP_3 = """
set -e
rm -rf /srv/moved && echo three > /srv/dir/sub/file && rm /srv/h1
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def engine(snapshot_engine):
    return snapshot_engine


async def _sh(engine: SandboxManager, sandbox_id: str, script: str) -> str:
    answer = await engine.rocklet(sandbox_id).execute(
        Command(command=["sh", "-c", script], timeout=120)
    )
    assert answer.exit_code == 0, answer.stderr
    return answer.stdout.strip()


async def _manifest(engine: SandboxManager, sandbox_id: str) -> str:
    answer = await engine.rocklet(sandbox_id).execute(
        Command(command=["python3", "-c", MANIFEST, *ROOTS], timeout=120)
    )
    assert answer.exit_code == 0, answer.stderr
    return answer.stdout


async def _fork_matches(engine: SandboxManager, parent: str) -> SnapshotInfo:
    """Fork ``parent`` once; the fork's files are the parent's. Returns the snapshot."""
    snap, (child,) = await engine.fork(parent, 1)
    await engine.wait_until_running(child.sandbox_id, timeout=120)
    assert await _manifest(engine, child.sandbox_id) == await _manifest(engine, parent)
    await engine.stop(child.sandbox_id)
    return snap


def _layers(docker_client: Any, snap: SnapshotInfo) -> list[str]:
    return list(docker_client.api.inspect_image(snap.image)["RootFS"]["Layers"])


def _top_layer_bytes(docker_client: Any, snap: SnapshotInfo) -> int:
    return int(docker_client.api.history(snap.image)[0]["Size"])


async def test_forks_after_changes_copy_only_the_changes_and_equal_the_parent(
    engine, docker_client
):
    # SETFCAP: to give a file a capability (security.capability, cap_net_raw).
    request = SandboxStartRequest(**SMALL, cap_add=["SETFCAP"])
    parent = str((await engine.start(request)).sandbox_id)
    await _sh(engine, parent, PREPARE)
    first = await engine.snapshot(parent)  # a full commit: the sandbox had none
    base = docker_client.api.inspect_image("python:3.11")["RootFS"]["Layers"]
    assert _layers(docker_client, first)[:-1] == base
    assert _top_layer_bytes(docker_client, first) > BIG_MIB * 2**20

    await _sh(engine, parent, STEP_1)
    second = await _fork_matches(engine, parent)
    assert _layers(docker_client, second)[:-1] == _layers(docker_client, first)
    assert _top_layer_bytes(docker_client, second) < 2**20  # the big file is shared

    # The layer holds the links themselves, not the host's files they name.
    upper = docker_client.api.inspect_image(second.image)["GraphDriver"]["Data"]["UpperDir"]
    assert os.readlink(os.path.join(upper, "srv", "shadowlink")) == "/etc/shadow"
    assert os.readlink(os.path.join(upper, "srv", "rootlink")) == "/"
    shown = await _manifest(engine, parent)
    assert "/srv/shadowlink" in shown and "-> /etc/shadow" in shown
    assert "/etc/issue gone" in shown and "/etc/rock-s1only gone" in shown
    assert "['/srv/h1', '/srv/h2']" in shown and "/srv/olddir/inside" not in shown
    assert "/srv/moved/a/leaf" in shown and "('user.rock', '76ff0078')" in shown
    assert "('security.capability', '0000000200200000000000000000000000000000')" in shown

    # A chain: each snapshot is the one before plus one small layer.
    chain = [second]
    for step in (STEP_2, STEP_3):
        await _sh(engine, parent, step)
        chain.append(await _fork_matches(engine, parent))
        assert _layers(docker_client, chain[-1])[:-1] == _layers(docker_client, chain[-2])
        assert _top_layer_bytes(docker_client, chain[-1]) < 2**20
    await engine.stop(parent)

    # A sandbox started from the last of them (an image of five layers) does the same.
    child = await engine.start(SandboxStartRequest(**SMALL, snapshot=chain[-1].name))
    child_id = str(child.sandbox_id)
    await _sh(engine, child_id, "echo child > /srv/child && sleep 1.1")
    own = await engine.snapshot(child_id)
    await _sh(engine, child_id, "rm /srv/keep /srv/child && echo again > /srv/new")
    again = await _fork_matches(engine, child_id)
    assert _layers(docker_client, again)[:-1] == _layers(docker_client, own)
    assert _layers(docker_client, own)[:-1] == _layers(docker_client, chain[-1])
    assert "/srv/keep" not in await _manifest(engine, child_id)
    await engine.stop(child_id)


async def test_a_change_the_delta_does_not_handle_falls_back_to_a_full_commit_as_right(
    engine, docker_client
):
    parent = str((await engine.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await _sh(engine, parent, "echo one > /srv/one && sleep 1.1")
    first = await engine.snapshot(parent)
    deep = "/srv/" + "/".join(["d"] * (MAX_DEPTH + 2))
    await _sh(engine, parent, f"mkdir -p {deep} && echo bottom > {deep}/f && rm /srv/one")
    second = await _fork_matches(engine, parent)
    base = docker_client.api.inspect_image("python:3.11")["RootFS"]["Layers"]
    assert _layers(docker_client, second)[:-1] == base  # over the image, not over the first
    assert second.name != first.name
    await engine.stop(parent)
