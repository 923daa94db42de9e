"""The distribution: its `rock` plugin, its testing extra, and what importing it loads."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution

import rock_nomad


def test_version_matches_distribution():
    assert rock_nomad.__version__ == distribution("rock-nomad").version


def test_the_rock_entry_point_registers_the_nomad_runtime():
    from rock_core.plugins import Plugins

    eps = [ep for ep in distribution("rock-nomad").entry_points if ep.group == "rock"]
    assert [(ep.name, ep.value) for ep in eps] == [("nomad", "rock_nomad.plugin")]
    from rock_nomad.runtime import NomadRuntime

    assert Plugins.load().runtimes()["nomad"] is NomadRuntime
    assert NomadRuntime.name == "nomad"


def test_the_testing_extra_names_the_stand_ins_libraries():
    requires = distribution("rock-nomad").requires or []
    testing = {
        r.split(">")[0].split("=")[0].strip()
        for r in requires
        if "extra == 'testing'" in r.replace('"', "'")
    }
    # python-nomad: the contract suite also drives the API through it (python_nomad_contract).
    assert testing == {"starlette", "uvicorn", "docker", "httpx", "pytest", "python-nomad"}


def test_importing_rock_nomad_loads_no_testing_library():
    code = (
        "import sys, rock_nomad, rock_nomad.runtime, rock_nomad.plugin; "
        "print(sorted(m for m in ('starlette', 'uvicorn', 'docker', 'nomad', 'requests', 'rock_nomad.testing') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
