"""Every source module of every package stays at most 600 lines (issue #23): a module that grows
past it has taken on a second job, and is split by job before it lands."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600


def _source_modules() -> list[Path]:
    return sorted(ROOT.glob("packages/*/src/**/*.py"))


def _generated(path: Path) -> bool:
    """Code a generator wrote (rock-e2b's envd stubs, from ``.proto`` files): not split by hand."""
    head = path.read_text(encoding="utf-8")[:200]
    return head.startswith("# Generated from") and "DO NOT EDIT" in head


def test_the_walk_finds_every_package_s_sources():
    packages = {path.relative_to(ROOT).parts[1] for path in _source_modules()}
    assert packages == {p.name for p in (ROOT / "packages").iterdir() if (p / "src").is_dir()}
    assert len(packages) >= 8


def test_every_source_module_is_at_most_600_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _source_modules()
        if not _generated(path)
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not long, f"modules over {LIMIT} lines (split them by job): {long}"
