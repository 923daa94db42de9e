"""The walk that tells a writable layer unchanged since a snapshot's mark follows no path the
sandbox could have swapped, and gives up (answering "changed") past its depth limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rock_docker._snapshot_reuse import _MAX_DEPTH, _changed_at_or_after

_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)


def _mark_after_a_pause() -> int:
    time.sleep(0.05)
    mark = time.clock_gettime_ns(_COARSE)
    time.sleep(0.05)
    return mark


def test_a_tree_untouched_since_the_mark_is_unchanged_and_a_new_file_is_a_change(tmp_path):
    upper = tmp_path / "upper"
    (upper / "a" / "b").mkdir(parents=True)
    (upper / "a" / "b" / "f").write_text("x")
    mark = _mark_after_a_pause()
    assert not _changed_at_or_after(str(upper), mark)
    (upper / "a" / "b" / "g").write_text("y")
    assert _changed_at_or_after(str(upper), mark)


def test_a_symlink_to_a_directory_outside_the_layer_is_not_walked(tmp_path):
    upper, outside = tmp_path / "upper", tmp_path / "outside"
    upper.mkdir()
    outside.mkdir()
    (upper / "link").symlink_to(outside, target_is_directory=True)
    mark = _mark_after_a_pause()
    (outside / "new").write_text("changed after the mark, but not in the layer")
    assert not _changed_at_or_after(str(upper), mark)


def test_a_tree_deeper_than_the_limit_answers_changed(tmp_path):
    upper = tmp_path / "upper"
    deep = upper
    for _ in range(_MAX_DEPTH + 2):
        deep = deep / "d"
    os.makedirs(deep)
    shallow = tmp_path / "shallow"
    os.makedirs(shallow / Path(*["d"] * 20))
    mark = _mark_after_a_pause()
    assert _changed_at_or_after(str(upper), mark)
    assert not _changed_at_or_after(str(shallow), mark)
