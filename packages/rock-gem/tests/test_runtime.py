"""GEM's runtime zip (for images without GEM): prepared once per Python version and CPU."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from rock_gem.runtime import REQUIREMENTS, runtime_dir, runtime_zip


def test_a_python_gem_cannot_run_on_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="Python 3.8"):
        runtime_zip("3.8")


def test_requirements_are_pinned() -> None:
    lines = [
        line for line in REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")
    ]
    assert "gem-llm==0.1.0" in lines and all("==" in line for line in lines)


def test_not_prepared_and_no_fetch_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_GEM_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="-m rock_gem.runtime 3.11`"):
        runtime_zip("3.11", fetch=False)
    with pytest.raises(RuntimeError, match=f"-m rock_gem.runtime 3.11 --dir {tmp_path / 'x'}`"):
        runtime_zip("3.11", fetch=False, directory=tmp_path / "x")


def test_the_runtime_is_looked_for_outside_any_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCK_GEM_RUNTIME_DIR", raising=False)
    assert runtime_dir() == Path(sys.prefix) / "share" / "rock-gem" / "runtime"
    assert runtime_dir("/srv/gem") == Path("/srv/gem")
    monkeypatch.setenv("ROCK_GEM_RUNTIME_DIR", "/opt/gem")
    assert runtime_dir() == Path("/opt/gem") and runtime_dir("/srv/gem") == Path("/srv/gem")


def test_the_prepared_zip_holds_gem_and_numpy() -> None:
    try:
        path = runtime_zip("3.11", fetch=False)  # scripts/ensure-gem-image.sh prepares it
    except RuntimeError:
        pytest.skip("GEM's runtime is not prepared on this machine (scripts/ensure-gem-image.sh)")
    names = set(zipfile.ZipFile(path).namelist())
    assert "gem/__init__.py" in names and "numpy/__init__.py" in names
    assert not any("/tests/" in name for name in names)
