"""Keep ``docs/lifecycle.md`` in step with :data:`rock_core.states.TRANSITIONS`.

The page holds two generated blocks, each between a pair of marker comments::

    <!-- BEGIN state-diagram ... -->
    ...generated, never edited by hand...
    <!-- END state-diagram -->

(and the same for ``state-table``). :func:`update_document` replaces what is between the markers
and leaves the rest of the page alone. The command line is ``python -m rock_core.states``
(``--check`` only reports, for CI).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rock_core.states import render_markdown_table, render_mermaid

__all__ = ["REGENERATE_COMMAND", "BLOCKS", "update_document", "find_lifecycle_doc", "main"]

#: What a developer runs, from the repository root, to refresh the page.
REGENERATE_COMMAND = "uv run python -m rock_core.states"


def _diagram_block() -> str:
    return "```mermaid\n" + render_mermaid() + "```\n"


#: Block name → function producing its content.
BLOCKS: dict[str, Callable[[], str]] = {
    "state-diagram": _diagram_block,
    "state-table": render_markdown_table,
}


def update_document(text: str) -> str:
    """``text`` with every generated block replaced by fresh content.

    :raises ValueError: a block's markers are missing or appear more than once, naming the block.
    """
    for name, render in BLOCKS.items():
        pattern = re.compile(
            rf"(^<!-- BEGIN {re.escape(name)}\b[^\n]*-->\n)(.*?)(^<!-- END {re.escape(name)} -->$)",
            re.DOTALL | re.MULTILINE,
        )
        found = list(pattern.finditer(text))
        if len(found) != 1:
            raise ValueError(
                f"expected exactly one '<!-- BEGIN {name} ... -->' ... '<!-- END {name} -->' block, found {len(found)}"
            )
        inside = found[0].span(2)
        text = text[: inside[0]] + render() + text[inside[1] :]
    return text


def find_lifecycle_doc(start: Path | None = None) -> Path:
    """The nearest ``docs/lifecycle.md`` at or above ``start`` (default: the working directory).

    Falls back to the directories above this module, which works in the repository's editable
    install wherever the command is run from.

    :raises FileNotFoundError: none was found.
    """
    here = (start or Path.cwd()).resolve()
    for base in (here, *here.parents, *Path(__file__).resolve().parents):
        candidate = base / "docs" / "lifecycle.md"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no docs/lifecycle.md at or above {here}; pass the path explicitly")


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or, with ``--check``, verify) the generated blocks of the lifecycle page.

    Returns the process exit code: 0 when the page is (now) up to date, 1 when ``--check`` finds
    it stale, 2 when the page or its markers cannot be found.
    """
    parser = argparse.ArgumentParser(
        prog="python -m rock_core.states",
        description="Regenerate the state diagram and table in docs/lifecycle.md from rock_core.states.TRANSITIONS.",
    )
    parser.add_argument(
        "path", nargs="?", type=Path, help="the page (default: the nearest docs/lifecycle.md)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only report whether the page is stale"
    )
    args = parser.parse_args(argv)

    try:
        path = args.path or find_lifecycle_doc()
        old = path.read_text(encoding="utf-8")
        new = update_document(old)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if new == old:
        print(f"{path}: up to date")
        return 0
    if args.check:
        print(f"{path}: stale; regenerate with `{REGENERATE_COMMAND}`", file=sys.stderr)
        return 1
    path.write_text(new, encoding="utf-8")
    print(f"{path}: regenerated")
    return 0
