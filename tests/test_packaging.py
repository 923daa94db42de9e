"""Each distribution builds a wheel on its own and imports without the other rock packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "rock-core": "rock_core",
    "rock-sdk": "rock",
    "rock-docker": "rock_docker",
    "rock-nomad": "rock_nomad",
    "rock-speedup": "rock_speedup",
    "rock-archive-s3": "rock_archive_s3",
    "rock-gem": "rock_gem",
}


def _uv() -> str:
    uv = shutil.which("uv") or shutil.which("uv", path=str(ROOT / ".rock-state" / "uv-venv" / "bin"))
    if uv is None:
        pytest.fail("uv is not on PATH; `make test` installs it (scripts/ensure-uv.sh)")
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    built = {}
    for dist in PACKAGES:
        # One build per package, as a user of that package alone would run it.
        subprocess.run(
            [_uv(), "build", "--package", dist, "--wheel", "--out-dir", str(out), "--quiet"],
            cwd=ROOT, check=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        )
        (wheel,) = out.glob(f"{dist.replace('-', '_')}-*.whl")
        built[dist] = wheel
    return built


def test_workspace_members_are_the_seven_packages():
    found = {p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert found == set(PACKAGES)
    for dist, module in PACKAGES.items():
        base = ROOT / "packages" / dist
        meta = tomllib.loads((base / "pyproject.toml").read_text())["project"]
        assert meta["name"] == dist
        assert (base / "README.md").is_file()
        assert (base / "src" / module / "py.typed").is_file()
        assert (base / "tests").is_dir()


def test_rock_core_depends_only_on_its_five_libraries():
    meta = tomllib.loads((ROOT / "packages/rock-core/pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].strip() for dep in meta["dependencies"]}
    assert names == {"attrs", "cattrs", "pluggy", "anyio", "httpx"}


def test_every_dependency_is_pinned_without_addresses():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = root["tool"]["uv"]["constraint-dependencies"]
    assert pins, "run scripts/pin_constraints.py"
    assert all("==" in pin and "://" not in pin and "@" not in pin for pin in pins)
    pinned = {pin.split("==")[0].lower() for pin in pins}
    for dist in PACKAGES:
        meta = tomllib.loads((ROOT / "packages" / dist / "pyproject.toml").read_text())["project"]
        for dep in meta["dependencies"]:
            requirement = Requirement(dep)
            name = requirement.name.lower()
            if requirement.marker is not None and not requirement.marker.evaluate():
                continue  # e.g. tomli on Python < 3.11: never installed in this workspace
            if not name.startswith("rock-"):
                assert name in pinned, f"{dist} depends on {name}, which is not pinned"
    assert not (ROOT / "uv.lock").exists() or "uv.lock" in (ROOT / ".gitignore").read_text()


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_wheel_installs_alone_into_a_fresh_venv(dist, wheels, tmp_path):
    module = PACKAGES[dist]
    with zipfile.ZipFile(wheels[dist]) as whl:
        assert f"{module}/py.typed" in whl.namelist()
    venv = tmp_path / "venv"
    subprocess.run([_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    to_install = [str(wheels[dist])]
    if dist != "rock-core":
        to_install.append(str(wheels["rock-core"]))
    subprocess.run(
        [_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *to_install],
        check=True,
    )
    others = [m for d, m in PACKAGES.items() if d not in (dist, "rock-core")]
    probe = (
        "import importlib.util, sys\n"
        f"import {module}\n"
        f"missing = [m for m in {others!r} if importlib.util.find_spec(m) is None]\n"
        f"assert missing == {others!r}, missing\n"
        f"print({module}.__version__)\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.1.0"
