"""The distribution as it stands: its test support is here, its runtime is not yet."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution

import rock_nomad


def test_version_matches_distribution():
    assert rock_nomad.__version__ == distribution("rock-nomad").version


def test_no_rock_entry_point_until_the_runtime_lands():
    eps = [ep for ep in distribution("rock-nomad").entry_points if ep.group == "rock"]
    assert eps == []


def test_the_testing_extra_names_the_stand_ins_libraries():
    requires = distribution("rock-nomad").requires or []
    testing = {r.split(">")[0].split("=")[0].strip() for r in requires if "extra == 'testing'" in r.replace('"', "'")}
    assert testing == {"starlette", "uvicorn", "docker", "httpx", "pytest"}


def test_importing_rock_nomad_loads_no_testing_library():
    code = (
        "import sys, rock_nomad; "
        "print(sorted(m for m in ('starlette', 'uvicorn', 'docker', 'rock_nomad.testing') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
