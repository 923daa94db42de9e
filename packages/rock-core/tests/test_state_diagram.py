"""The docs' lifecycle diagram and table are generated from the table, and kept fresh."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rock_core._diagram import REGENERATE_COMMAND, main, update_document
from rock_core.errors import InvalidTransition
from rock_core.states import (
    TRANSITIONS,
    Event,
    State,
    next_state,
    render_markdown_table,
    render_mermaid,
)


def _repo_root() -> Path:
    # The workspace root is the nearest pyproject.toml that declares the uv workspace, wherever
    # this file sits below it.
    for parent in Path(__file__).resolve().parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file() and "[tool.uv.workspace]" in pyproject.read_text(encoding="utf-8"):
            return parent
    raise AssertionError(f"no workspace pyproject.toml above {__file__}")


ROOT = _repo_root()
DOC = ROOT / "docs" / "lifecycle.md"

STALE_PAGE = """# Lifecycle

Prose before.

<!-- BEGIN state-diagram: generated -->
```mermaid
stateDiagram-v2
    pending --> deleted: delete
```
<!-- END state-diagram -->

Prose between.

<!-- BEGIN state-table: generated -->
| old | table |
<!-- END state-table -->

Prose after.
"""


def test_docs_lifecycle_page_is_up_to_date() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert update_document(text) == text, (
        f"{DOC} is stale: its state diagram/table no longer match rock_core.states.TRANSITIONS. "
        f"Regenerate it with `cd {ROOT} && {REGENERATE_COMMAND}`"
    )


def test_mermaid_diagram_has_exactly_the_table_edges() -> None:
    text = render_mermaid()
    assert text.splitlines()[0] == "stateDiagram-v2"
    edges = re.findall(r"^\s+(\w+) --> (\w+): (.+)$", text, re.MULTILINE)
    expected = [
        (src.value, dst.value, f"{event.value} (no-op)" if dst is src else event.value)
        for (src, event), dst in TRANSITIONS.items()
    ]
    assert sorted(edges) == sorted(expected)
    assert ("stopped", "stopped", "stop (no-op)") in edges
    assert ("deleted", "deleted", "delete (no-op)") in edges
    # The start and the final state are marked.
    assert "[*] --> pending" in text and "deleted --> [*]" in text


def test_markdown_table_states_every_pair() -> None:
    header, _rule, *rows = render_markdown_table().splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")][1:]
    assert columns == [s.value for s in State]
    assert [row.split("|")[1].strip() for row in rows] == [f"`{e.value}`" for e in Event]
    for event, row in zip(Event, rows, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        for state, cell in zip(State, cells, strict=True):
            try:
                dst = next_state(state, event)
            except InvalidTransition:
                assert cell == "—", (state, event)
            else:
                assert cell == ("no-op" if dst is state else f"→ {dst.value}"), (state, event)


def test_update_replaces_only_the_generated_blocks() -> None:
    new = update_document(STALE_PAGE)
    assert "```mermaid\n" + render_mermaid() + "```\n<!-- END state-diagram -->" in new
    assert (
        "<!-- BEGIN state-table: generated -->\n"
        + render_markdown_table()
        + "<!-- END state-table -->"
        in new
    )
    assert "pending --> deleted" not in new and "| old | table |" not in new
    for prose in (
        "# Lifecycle\n\nProse before.\n\n",
        "\n\nProse between.\n\n",
        "\n\nProse after.\n",
    ):
        assert prose in new
    assert update_document(new) == new


@pytest.mark.parametrize("block", ["state-diagram", "state-table"])
def test_missing_markers_are_named(block: str) -> None:
    page = STALE_PAGE.replace(f"<!-- END {block} -->", "")
    with pytest.raises(ValueError, match=block):
        update_document(page)


def test_check_reports_a_stale_page_and_the_command_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "lifecycle.md"
    page.write_text(STALE_PAGE, encoding="utf-8")

    assert main([str(page), "--check"]) == 1
    assert REGENERATE_COMMAND in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == STALE_PAGE

    assert main([str(page)]) == 0
    assert page.read_text(encoding="utf-8") == update_document(STALE_PAGE)
    assert main([str(page), "--check"]) == 0


def test_without_a_path_the_nearest_docs_page_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "docs" / "lifecycle.md"
    page.parent.mkdir()
    page.write_text(STALE_PAGE, encoding="utf-8")
    deep = tmp_path / "packages" / "somewhere"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)

    assert main([]) == 0
    assert page.read_text(encoding="utf-8") == update_document(STALE_PAGE)


def test_page_without_markers_is_an_error_not_a_rewrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "lifecycle.md"
    page.write_text("# no markers here\n", encoding="utf-8")
    assert main([str(page)]) == 2
    assert "state-diagram" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == "# no markers here\n"


def test_python_m_rock_core_states_regenerates(tmp_path: Path) -> None:
    page = tmp_path / "lifecycle.md"
    page.write_text(STALE_PAGE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "rock_core.states", str(page)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8") == update_document(STALE_PAGE)
