"""The walk that writes an incremental snapshot's layer keeps what changed since the mark, keeps
symbolic links as links (never reading what they name, on the host or elsewhere), and gives up
(a full commit instead) on what it does not handle."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from rock_docker._delta_layer import Fallback, LayerView, write_delta_layer

_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)
_SECOND = 1_000_000_000


def _mark_in_the_next_second() -> int:
    """A mark after everything written so far, in a later second than any of it (the walk
    rounds the mark down to the second)."""
    now = time.clock_gettime_ns(_COARSE)
    mark = now - now % _SECOND + _SECOND
    while time.clock_gettime_ns(_COARSE) < mark + 10_000_000:
        time.sleep(0.05)
    return mark


def _layer(upper: Path, mark: int) -> dict[str, tarfile.TarInfo]:
    out = io.BytesIO()
    with LayerView([]) as base, LayerView([]) as own:
        write_delta_layer(str(upper), base, own, mark, out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return {member.name: member for member in tar.getmembers()}


def test_only_what_changed_since_the_mark_is_in_the_layer_and_links_stay_links(tmp_path):
    upper, outside = tmp_path / "upper", tmp_path / "outside"
    (upper / "srv").mkdir(parents=True)
    (upper / "old").mkdir()
    outside.mkdir()
    (upper / "old" / "before").write_text("written before the mark")
    mark = _mark_in_the_next_second()
    (upper / "srv" / "new").write_text("after")
    (upper / "srv" / "shadow").symlink_to("/etc/shadow")
    (upper / "srv" / "out").symlink_to(outside, target_is_directory=True)
    (outside / "secret").write_text("not in the layer")
    members = _layer(upper, mark)
    assert set(members) == {"srv", "srv/.wh..wh..opq", "srv/new", "srv/shadow", "srv/out"}
    assert members["srv/shadow"].issym() and members["srv/shadow"].linkname == "/etc/shadow"
    assert members["srv/out"].issym() and members["srv/out"].size == 0


def test_a_hard_link_whose_other_name_did_not_change_falls_back(tmp_path):
    upper = tmp_path / "upper"
    (upper / "kept").mkdir(parents=True)
    (upper / "moved").mkdir()
    (upper / "kept" / "a").write_text("one inode, two names")
    os.link(upper / "kept" / "a", upper / "moved" / "b")
    mark = _mark_in_the_next_second()
    (upper / "moved" / "c").write_text("a change in the other name's directory")
    with pytest.raises(Fallback, match="hard link"):
        _layer(upper, mark)


def test_a_file_named_like_a_whiteout_falls_back(tmp_path):
    upper = tmp_path / "upper"
    upper.mkdir()
    mark = _mark_in_the_next_second()
    (upper / ".wh.trick").write_text("would delete 'trick' in a layer")
    with pytest.raises(Fallback, match="whiteout"):
        _layer(upper, mark)
