"""The conformance suite fails runtimes that get things wrong (it is not a suite that always passes).

Runs a few of its checks, in a separate pytest, against DockerRuntime subclasses each broken in
one way, and expects exactly the check that covers that behaviour to fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.docker

BROKEN = """
import attrs
import pytest
from rock_core.models import UnitState
from rock_core.testing import RuntimeConformance
from rock_core.sizes import GiB
from rock_docker import DockerRuntime


class MissingLooksExited(DockerRuntime):
    async def inspect(self, handle):
        status = await super().inspect(handle)
        return attrs.evolve(status, state=UnitState.EXITED) if status.state is UnitState.MISSING else status


class NoMemoryLimit(DockerRuntime):
    async def create(self, spec, **kw):
        return await super().create(attrs.evolve(spec, memory=2 * GiB), **kw)


class HidesAppPort(DockerRuntime):
    @staticmethod
    def _hide(status):
        return attrs.evolve(
            status,
            port_mapping={k: v for k, v in status.port_mapping.items() if k != 8080},
            forwarded_ports=tuple(p for p in status.forwarded_ports if p != 8080),
        )

    async def start(self, handle, *, on_phase=None):
        status = await super().start(handle, on_phase=on_phase)
        return None if status is None else self._hide(status)

    async def inspect(self, handle):
        return self._hide(await super().inspect(handle))


def suite_for(cls):
    class Suite(RuntimeConformance):
        @pytest.fixture(scope="class")
        @classmethod
        async def runtime(cls_, tmp_path_factory):
            async with cls(rocklet_dir=tmp_path_factory.mktemp("rocklet")) as runtime:
                yield runtime

        @pytest.fixture(scope="class")
        @classmethod
        def image(cls_):
            return "python:3.11"

    return Suite


TestMissingLooksExited = suite_for(MissingLooksExited)
TestNoMemoryLimit = suite_for(NoMemoryLimit)
TestHidesAppPort = suite_for(HidesAppPort)
"""

CHECKS = (
    "test_stop_and_remove",
    "test_memory_limit_is_enforced",
    "test_started_unit_runs_with_published_ports",
)


SUITES = ("TestMissingLooksExited", "TestNoMemoryLimit", "TestHidesAppPort")


def test_each_broken_runtime_fails_the_check_for_its_flaw(tmp_path, docker_client):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_broken.py").write_text(textwrap.dedent(BROKEN))
    # One pytest per broken runtime, all at once (each with a folder of its own), the same checks.
    runs = {
        suite: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--basetemp={tmp_path / ('tmp-' + suite)}",
                f"--junitxml={tmp_path / (suite + '.xml')}",
                "-k",
                " or ".join(CHECKS),
                f"test_broken.py::{suite}",
            ],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for suite in SUITES
    }
    for run in runs.values():
        run.wait(timeout=300)
    outcomes = {}
    for suite in SUITES:
        for case in ET.parse(tmp_path / (suite + ".xml")).getroot().iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            outcomes[(case.get("classname").rsplit(".", 1)[-1], case.get("name"))] = (
                "failed" if failed else "passed"
            )
    assert outcomes == {
        ("TestMissingLooksExited", "test_stop_and_remove"): "failed",
        ("TestMissingLooksExited", "test_memory_limit_is_enforced"): "passed",
        ("TestMissingLooksExited", "test_started_unit_runs_with_published_ports"): "passed",
        ("TestNoMemoryLimit", "test_stop_and_remove"): "passed",
        ("TestNoMemoryLimit", "test_memory_limit_is_enforced"): "failed",
        ("TestNoMemoryLimit", "test_started_unit_runs_with_published_ports"): "passed",
        ("TestHidesAppPort", "test_stop_and_remove"): "passed",
        ("TestHidesAppPort", "test_memory_limit_is_enforced"): "passed",
        ("TestHidesAppPort", "test_started_unit_runs_with_published_ports"): "failed",
    }
