"""pytest fixtures for the stand-in Nomad server: ``pytest_plugins = ["rock_nomad.testing.fixtures"]``.

- ``stand_in_nomad``: a :class:`~rock_nomad.testing.StandInNomad` with 3 nodes for one test;
  every container it made is gone when the test ends.
- ``stand_in_nomad_factory``: call it with :class:`StandInNomad`'s arguments for other shapes
  (ACL on, small nodes, ``algorithm="spread"``); all are closed when the test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rock_nomad.testing.server import StandInNomad


@pytest.fixture
def stand_in_nomad_factory() -> Iterator[Callable[..., StandInNomad]]:
    made: list[StandInNomad] = []

    def make(**kwargs: Any) -> StandInNomad:
        nomad = StandInNomad(**kwargs).start()
        made.append(nomad)
        return nomad

    try:
        yield make
    finally:
        for nomad in made:
            nomad.close()


@pytest.fixture
def stand_in_nomad(stand_in_nomad_factory: Callable[..., StandInNomad]) -> StandInNomad:
    return stand_in_nomad_factory(nodes=3)
