"""The code blocks of rock's docs (README.md, docs/*.md, packages/*/README.md) and their markers.

``tests/test_docs_blocks.py`` runs every ```python, ```sh / ```bash and ```console block found
here (issue #30 point 2: docs that cannot go stale). A block runs as written unless the HTML
comment right above it (blank lines between are allowed) says otherwise::

    <!-- docs-test: skip (needs a real Nomad agent) -->
    <!-- docs-test: sandbox; session main -->

Tokens, separated by ``;``; any may end with a note in parentheses, for the reader:

``skip (REASON)``
    not run; the reason is required and says why (a real Nomad agent, AWS, a benchmark).
``sandbox``
    Python: ``sandbox`` is a started ``python:3.11`` sandbox (512m, 0.5 CPU), ``Sandbox`` and
    ``SandboxConfig`` are imported, and top-level ``await`` works.
``session NAME``
    with ``sandbox``: a bash session NAME is made first.
``listen PORT``
    with ``sandbox``: a TCP service (python's http.server) accepts on PORT in the sandbox first.
``offline``
    with ``sandbox``: the sandbox has ``network="none"``, so a block that would reach a package
    index fails at once the same way everywhere (what it shows must hold then too).
``async``
    Python: top-level ``await`` works (no sandbox made).
``admin``
    ``ROCK_BASE_URL`` names a real ``rock admin serve`` on a free port, shared by every such block.
``admin-plugin``
    Python: the block is a plugin module with a ``rock_admin_routes`` hook; a real admin serves it
    (as the plugin ``docs-example``) and each of its routes, called with ``{}``, must be served
    and answered without a server error.
``disable NAMES``
    with ``admin-plugin``: the admin blocks these plugins (``ROCK_DISABLE_PLUGINS``), e.g. one
    that serves the same path.
``plugin rock-foo``
    the throwaway distribution rock-foo that docs/plugins.md describes is importable (its
    ``pyproject.toml`` and ``plugin.py`` blocks, a ``FooRuntime``); a ``$ pip install rock-foo``
    line is what this set-up does.

Printed results are checked: a Python ``print(...)  # TEXT`` line must print TEXT, the lines
after a ``$ command`` in a console block are its output, and a ```text block right below a
Python or shell block (nothing but blank lines between) is that block's whole output (for a
shell block, standard output and error together). ``...`` stands for any text, and a line
that is only ``...`` for any number of lines.

Where blocks run: each in a process of its own, with a temporary ``HOME`` and the workspace's
venv first on ``PATH``. A Python block's ``test_*`` functions are called after it. A shell block
runs under ``bash -euo pipefail`` in a temporary folder that looks like a clone (``.venv``,
``packages``, ``scripts``, ... linked; ``docs`` copied), where ``uv run X`` is X (uv would sync
the shared venv) and port 8080 is a free port, in the block and in the output it shows.

Blocks that do not run are still checked where they can be: Python blocks compile, TOML blocks
parse (and those with ``[admin]``, ``[engine]`` or ``[plugins.x]`` load with the admin's own
reader), and every ``rock`` command and option the docs name, inline too, exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Languages whose blocks run.
PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell"}
CONSOLE = {"console"}
#: Languages whose blocks are not code to run (a fence must name one of these or a runnable one).
INERT = {"text", "toml", "json", "mermaid", "ini", "yaml", "hcl"}
TOKENS = {
    "skip",
    "sandbox",
    "session",
    "listen",
    "offline",
    "async",
    "admin",
    "admin-plugin",
    "disable",
    "plugin",
}

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")


def doc_files() -> list[Path]:
    """Every markdown file whose blocks are checked."""
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "packages").glob("*/README.md")),
    ]


@dataclass
class Block:
    """One fenced block: where it is, its language, its text (dedented) and its marker."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None = None  # the marker's body, as written
    tokens: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    output: str | None = None  # what a ```text block right below it shows it prints

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in PYTHON | SHELL | CONSOLE and "skip" not in self.tokens


def parse_marker(body: str) -> tuple[dict[str, str], list[str]]:
    """The tokens of a marker's body (``name -> argument``) and what is wrong with it."""
    tokens: dict[str, str] = {}
    problems: list[str] = []
    for part in (p.strip() for p in _split_tokens(body)):
        if not part:
            continue
        name, _, argument = part.partition(" ")
        argument = argument.strip()
        if name not in TOKENS:
            problems.append(f"unknown token {name!r} (known: {', '.join(sorted(TOKENS))})")
            continue
        if name == "skip":
            reason = re.fullmatch(r"\((.*)\)", argument, re.S)
            if reason is None or not reason.group(1).strip():
                problems.append("`skip` needs its reason in parentheses: skip (why)")
                continue
            argument = reason.group(1).strip()
        else:
            argument = re.sub(r"\s*\(.*\)$", "", argument, flags=re.S)  # a note, for the reader
        if name in ("session", "listen", "plugin", "disable") and not argument:
            problems.append(f"`{name}` needs a name")
        tokens[name] = argument
    needs = {"session", "listen", "offline"} & set(tokens)
    if needs and "sandbox" not in tokens:
        problems.append(f"{', '.join(sorted(needs))} only with `sandbox`")
    if "disable" in tokens and "admin-plugin" not in tokens:
        problems.append("disable only with `admin-plugin`")
    return tokens, problems


def orphan_markers(path: Path) -> list[int]:
    """Lines of ``path`` with a ``docs-test`` marker that no block below takes (prose between)."""
    taken = {block.line for block in blocks_of(path) if block.marker is not None}
    lines = path.read_text(encoding="utf-8").splitlines()
    orphans = []
    for number, line in enumerate(lines, start=1):
        if not re.match(r"^\s*<!--\s*docs[-_ ]?tests?\b", line, re.I):
            continue
        below = number
        while below < len(lines) and not lines[below].strip():
            below += 1
        if _MARKER.match(line) is None or below + 1 not in taken:
            orphans.append(number)
    return orphans


def _split_tokens(body: str) -> list[str]:
    """``body`` cut at each ``;`` that is not inside parentheses (a reason may hold ``;``)."""
    parts, depth, current = [], 0, ""
    for char in body:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def blocks_of(path: Path) -> Iterator[Block]:
    """The fenced blocks of ``path``, in order, each with the marker right above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    previous: tuple[Block, int] | None = None  # the last block and the line after its fence
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = opening.group("indent")
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in lines[index + 1 : end]
        ]
        block = Block(path, index + 1, opening.group("lang"), "\n".join(body) + "\n")
        above = index - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        marker = _MARKER.match(lines[above]) if above >= 0 else None
        if marker is not None:
            block.marker = marker.group("body").strip()
            block.tokens, block.problems = parse_marker(block.marker)
        if (
            block.lang == "text"
            and previous is not None
            and previous[0].lang in PYTHON | SHELL
            and not any(line.strip() for line in lines[previous[1] : index])
        ):
            previous[0].output = block.text  # a ```text block right below shows the output
        if previous is not None:
            yield previous[0]
        previous = (block, end + 1)
        index = end + 1
    if previous is not None:
        yield previous[0]


def all_blocks() -> list[Block]:
    """Every block of every checked markdown file."""
    return [block for path in doc_files() for block in blocks_of(path)]


def _line_pattern(expected: str) -> re.Pattern[str]:
    pieces = [re.escape(" ".join(piece.split())) for piece in expected.split("...")]
    return re.compile(".*".join(pieces), re.S)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` lines are what ``expected`` shows (``...`` as described above).

    Runs of whitespace count as one space and leading or trailing ones are ignored.
    """
    got = [" ".join(line.split()) for line in actual]
    want = [line.strip() for line in expected]
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(want):
                result = j == len(got)
            elif want[i] == "...":
                result = any(match(i + 1, k) for k in range(j, len(got) + 1))
            else:
                result = j < len(got) and bool(_line_pattern(want[i]).fullmatch(got[j]))
                result = result and match(i + 1, j + 1)
            memo[i, j] = result
        return memo[i, j]

    return match(0, 0)


def expected_prints(text: str) -> dict[int, str]:
    """The Python block's ``print(...)  # TEXT`` lines: 1-based line number -> TEXT."""
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        hit = re.match(r"^\s*print\(.*\)\s*#\s*(?:prints\s+)?(.*)$", line)
        if hit:
            found[number] = hit.group(1).strip()
    return found


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """A console block's ``$ command`` lines, each with the output lines shown after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:].strip(), []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"a console block's first line must be a `$ ` command: {line!r}")
    return steps
