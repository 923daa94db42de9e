"""rock_core.testing is importable without any backend, and tells a runtime author what is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_importing_the_suite_pulls_in_no_backend():
    code = (
        "import sys, rock_core.testing\n"
        "found = sorted(m for m in ('docker', 'nomad', 'boto3', 'rock_docker') if m in sys.modules)\n"
        "print(found)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_subclass_without_a_runtime_fixture_is_told_to_define_one(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
        from rock_core.testing import RuntimeConformance

        class TestMine(RuntimeConformance):
            pass
        """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "published_ports",
            "test_mine.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert (
        "TestMine must define a class-scoped `runtime` fixture returning the runtime to test"
        in result.stdout
    )
