"""One moto S3 server (a subprocess on 127.0.0.1) for the package's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rock_archive_s3.testing import MotoServer


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server
