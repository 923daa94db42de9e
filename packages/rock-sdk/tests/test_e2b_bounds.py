"""What one E2B caller may make the admin do for it, bounded (E2B's unmodified SDK against a real
admin with API keys and real Docker sandboxes): directory watchers, each a listing every 0.25 s,
are at most :data:`rock_e2b.watching.MAX_WATCHERS` per sandbox; a stopped one makes room."""

from __future__ import annotations

from typing import Any

from .test_e2b_sdk import KEY_A, e2b, e2b_python, keyed_admin  # noqa: F401 - fixtures


def test_a_sandbox_has_a_bounded_number_of_directory_watchers(
    e2b_python: str, keyed_admin: Any
) -> None:
    from rock_e2b.watching import MAX_WATCHERS

    out = e2b(e2b_python, keyed_admin, KEY_A, script="drive_watch_bounds.py")
    assert out["made"] == MAX_WATCHERS
    assert f"at most {MAX_WATCHERS} directory watchers" in out["refused"], out["refused"]
    assert out["after_stop"] == "made"
