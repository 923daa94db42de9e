"""Each distribution builds a wheel on its own and imports without the other rock packages."""

from __future__ import annotations

import configparser
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
    "rock-postgres": "rock_postgres",
    "rock-e2b": "rock_e2b",
}


def _uv() -> str:
    uv = shutil.which("uv") or shutil.which(
        "uv", path=str(ROOT / ".rock-state" / "uv-venv" / "bin")
    )
    if uv is None:
        pytest.fail("uv is not on PATH; `make test` installs it (scripts/ensure-uv.sh)")
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # One build per package, as a user of that package alone would run it; the builds run at
    # the same time (each waits mostly on its own build environment).
    builds = {
        dist: subprocess.Popen(
            [_uv(), "build", "--package", dist, "--wheel", "--out-dir", str(out), "--quiet"],
            cwd=ROOT,
            env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        )
        for dist in PACKAGES
    }
    failed = [dist for dist, build in builds.items() if build.wait(timeout=600) != 0]
    assert not failed, f"uv build failed for {failed}"
    built = {}
    for dist in PACKAGES:
        (wheel,) = out.glob(f"{dist.replace('-', '_')}-*.whl")
        built[dist] = wheel
    return built


def test_workspace_members_are_the_nine_packages():
    found = {p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")}
    assert found == set(PACKAGES)
    for dist, module in PACKAGES.items():
        base = ROOT / "packages" / dist
        meta = tomllib.loads((base / "pyproject.toml").read_text())["project"]
        assert meta["name"] == dist
        assert (base / "README.md").is_file()
        assert (base / "src" / module / "py.typed").is_file()
        assert (base / "tests").is_dir()


def test_rock_core_depends_only_on_its_six_libraries():
    meta = tomllib.loads((ROOT / "packages/rock-core/pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].strip() for dep in meta["dependencies"]}
    assert names == {"attrs", "cattrs", "pluggy", "anyio", "httpx", "orjson"}


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


#: The extras a distribution's every module needs (its own optional dependencies).
EXTRAS = {
    "rock-core": "testing",
    "rock-sdk": "admin",
    "rock-nomad": "testing",
    "rock-postgres": "testing",
}


def _venv_with(tmp_path: Path, *requirements: str) -> Path:
    """A fresh venv holding ``requirements`` (wheels as PEP 508 direct references); its python."""
    venv = tmp_path / "venv"
    subprocess.run([_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [_uv(), "pip", "install", "--quiet", "--python", str(python), *requirements], check=True
    )
    return python


def _modules_of(wheel: Path) -> list[str]:
    """Every module a wheel holds, by dotted name."""
    with zipfile.ZipFile(wheel) as whl:
        names = [n for n in whl.namelist() if n.endswith(".py") and ".dist-info/" not in n]
    modules = []
    for name in names:
        parts = name[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    return sorted(modules)


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_every_module_of_a_wheel_imports_with_its_declared_dependencies_alone(
    dist, wheels, tmp_path
):
    """Installed alone (with rock-core, and its own extras), every module of the wheel imports:
    each package declares everything it imports. Its command-line entry points run."""
    extra = f"[{EXTRAS[dist]}]" if dist in EXTRAS else ""
    requirements = [f"{dist}{extra} @ {wheels[dist].as_uri()}"]
    if dist != "rock-core":
        requirements.append(f"rock-core @ {wheels['rock-core'].as_uri()}")
    python = _venv_with(tmp_path, *requirements)
    modules = _modules_of(wheels[dist])
    probe = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint(len(sys.argv) - 1)\n"
    out = subprocess.run(
        [str(python), "-c", probe, *modules], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(modules) > 0
    entry_points = configparser.ConfigParser()
    with zipfile.ZipFile(wheels[dist]) as whl:
        for name in whl.namelist():
            if name.endswith(".dist-info/entry_points.txt"):
                entry_points.read_string(whl.read(name).decode())
    scripts = (
        list(entry_points["console_scripts"]) if entry_points.has_section("console_scripts") else []
    )
    assert scripts == (["rock"] if dist == "rock-sdk" else [])
    for script in scripts:
        for args in (["--version"], ["--help"]):
            ran = subprocess.run(
                [str(python.parent / script), *args], capture_output=True, text=True, timeout=120
            )
            assert ran.returncode == 0, (script, args, ran.stderr)


def test_rock_sdk_without_its_admin_extra_says_what_to_install(wheels, tmp_path):
    """The SDK and the CLI work without the web stack; the admin server names the extra."""
    python = _venv_with(
        tmp_path,
        f"rock-sdk @ {wheels['rock-sdk'].as_uri()}",
        f"rock-core @ {wheels['rock-core'].as_uri()}",
    )
    probe = "import rock.sdk, rock.sdk.sandbox.client, rock.admin.config, rock.admin.daemon; print('ok')"
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.strip() == "ok", out.stderr
    rock = python.parent / "rock"
    assert (
        subprocess.run(
            [str(rock), "--version"], capture_output=True, text=True, timeout=120
        ).returncode
        == 0
    )
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path / "state")}
    for command in ("serve", "start"):
        done = subprocess.run(
            [str(rock), "admin", command], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode != 0
        assert "pip install 'rock-sdk[admin]'" in done.stderr and "starlette" in done.stderr, (
            done.stderr
        )


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
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.1.0"
