"""The command-line stand-in (``python -m rock_nomad.testing``) tunes the garbage collector as
the admin does once it serves: what it made to start frozen out of collections, young
collections rarer (its tables grow with every start of a burst)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from rock_nomad.testing import __main__ as stand_in_main


class _FakeNomad:
    address = "http://192.0.2.1:4646"
    management_token = None

    def __init__(self, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _FakeNomad:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def nodes(self) -> list[dict[str, str]]:
        return []


class _StopAtOnce:
    def set(self) -> None:
        pass

    def wait(self, timeout: float) -> bool:
        return True


def test_the_command_line_stand_in_tunes_the_collector_once_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tuned: list[bool] = []
    monkeypatch.setattr(stand_in_main, "StandInNomad", _FakeNomad)
    monkeypatch.setattr(stand_in_main.threading, "Event", _StopAtOnce)
    monkeypatch.setattr(stand_in_main, "tune_gc", lambda: tuned.append(True))
    monkeypatch.setattr(stand_in_main.signal, "signal", lambda *args: None)
    assert stand_in_main.main(["--nodes", "1", "--simulate-tasks", "0.1,0.2"]) == 0
    assert tuned == [True]


def test_tune_gc_freezes_what_exists_and_sets_the_admins_thresholds() -> None:
    before = gc.get_threshold()
    try:
        stand_in_main.tune_gc()
        assert gc.get_threshold() == stand_in_main.GC_THRESHOLDS == (1_000_000, 50, 100)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
