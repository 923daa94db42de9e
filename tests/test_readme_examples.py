"""Examples of the READMEs, run exactly as written (issue #30 point 2): a block that stops
working fails here, with the README it is in. Each block's printed result is checked against the
``# ...`` comment of its print line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.docker]


def marked_block(readme: Path, name: str) -> str:
    """The ```python block right after ``<!-- example: NAME -->`` in ``readme``."""
    found = re.search(
        rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", readme.read_text(), re.S
    )
    assert found is not None, f"{readme} has no example {name!r}"
    return found.group(1)


def python_blocks(readme: Path) -> list[str]:
    """The ```python blocks of ``readme``, in order."""
    return re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)


def expected_output(block: str) -> list[str]:
    """What a block says its print lines show: the comment after each ``print(...)``."""
    return [m.strip() for m in re.findall(r"^\s*print\(.*\)\s*#\s*(.*)$", block, flags=re.M)]


def test_rock_dockers_readme_example_runs_and_prints_what_it_says() -> None:
    block = python_blocks(REPO / "packages" / "rock-docker" / "README.md")[0]
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == expected_output(block)


def test_the_readmes_grpo_group_example_forks_8_and_collects_8_rewards() -> None:
    block = marked_block(REPO / "README.md", "grpo-group")
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == expected_output(block)
