"""docs/architecture.md cites only what exists, and the import rules it states hold.

The page names files (``rock_core/engine/starting.py``, ``admin/config.py``, ``scripts/...``),
modules (``rock_core.tenancy``), and code (``SandboxManager.start_async``, ``converters.read_types``). Each
is looked up here: a path among the repository's files, a dotted name by importing its module
and following attributes, a bare name among the names the packages' sources define. A rename
that leaves the page behind fails this test; what the page quotes but is no name of the code (a
state, a setting's key, a shell command) is either not extracted (routes, commands, values
with spaces or slashes) or listed in ``NOT_NAMES`` with its reason.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import os
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"

#: The import name of each package's code, by the folder under packages/.
PACKAGES = {
    "rock-core": "rock_core",
    "rock-sdk": "rock",
    "rock-docker": "rock_docker",
    "rock-speedup": "rock_speedup",
    "rock-archive-s3": "rock_archive_s3",
    "rock-gem": "rock_gem",
    "rock-nomad": "rock_nomad",
    "rock-postgres": "rock_postgres",
    "rock-e2b": "rock_e2b",
}
PLUGINS = [
    "rock-docker",
    "rock-speedup",
    "rock-archive-s3",
    "rock-gem",
    "rock-nomad",
    "rock-postgres",
    "rock-e2b",
]

#: Quoted words that are not names of the code, each with why.
NOT_NAMES = {
    # states, capabilities, archive parts, entry points and stores: values, not identifiers
    "pending": "a State's value",
    "running": "a State's value",
    "watch": "a runtime capability's value",
    "disk_usage": "a runtime capability's value",
    "rootfs": "an archive part's name",
    "logs": "an archive part's name",
    "fs": "the fs archive store's name",
    "s3": "the s3 archive store's name",
    "nomad": "the nomad runtime's entry point",
    "E2B": "a company and its API (rock-e2b serves it), not a class",
    "rock": "the entry-point group and the CLI",
    "testing": "rock-nomad's extra",
    "rocklet": "SandboxManager.rocklet, quoted beside call",
    # third-party names
    "attrs": "a dependency",
    "cattrs": "a dependency",
    "pluggy": "a dependency",
    "anyio": "a dependency",
    "httpx": "a dependency",
    "click": "a dependency of rock-sdk",
    "pytest": "a dependency of the test kits",
    "typing_extensions": "a library for type hints",
    "TYPE_CHECKING": "typing.TYPE_CHECKING",
    "wsproto": "uvicorn's WebSocket protocol",
    "NewType": "typing.NewType",
    "SQLite": "a word of the diagrams",
    "OpenAI": "a word of the diagrams",
    "HashiCorp": "a word of the diagrams",
    "PostgreSQL": "a word of the diagrams",
    "WebSocket": "a word of the diagrams",
}

#: Variables of the diagrams and what they hold.
ALIASES = {
    "manager": "rock_core.engine.manager.SandboxManager",
    "runtime": "rock_core.runtime.Runtime",
    "engine": "rock.sdk._drivers.base.Driver",
    "driver": "rock.sdk._drivers.base.Driver",
    "sandbox": "rock.sdk.sandbox.client.Sandbox",
    "sandbox.network": "rock.sdk.sandbox.network.Network",  # set per instance
    "network": "rock.sdk.sandbox.network.Network",
}

_PATH = re.compile(
    r"(?<![\w/.-])(?:\.\./)?[\w.-]+(?:/[\w.{},*-]+)*(?:\.(?:py|md|sh|txt|toml|json|pyz)|/)(?![\w/])"
)
_CODE = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_CAMEL = re.compile(
    r"(?<![\w.])[A-Z][a-z0-9]+(?:(?:[A-Z][a-z0-9]*)+(?:\.[A-Za-z_]\w*)*|\.[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
)  # SandboxManager, RockletClient.open_tunnel, Event.ALIVE
_CALLED = re.compile(r"(?<![\w./])[a-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w/])")
_FILE = re.compile(r"[\w.]+\.(?:py|md|sh|txt|json|toml|pyz)")
_ENVIRONMENT = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*\*?")


def _page() -> str:
    return PAGE.read_text()


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```(?:text)?\n(.*?)^```", text, flags=re.S | re.M)


def _prose(text: str) -> str:
    return re.sub(r"^```(?:text)?\n.*?^```", "", text, flags=re.S | re.M)


@cache
def _files() -> tuple[str, ...]:
    """The repository's files, from its root (hidden folders, caches and runs left out)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in ("__pycache__", "runs", "node_modules")
        ]
        found.extend(str((Path(folder) / name).relative_to(ROOT)) for name in files)
    return tuple(found)


def _expand(path: str) -> list[str]:
    """``rock/sdk/_drivers/{embedded,remote}.py`` -> both paths."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def cited_paths(text: str) -> list[str]:
    """Every file or folder path the page names, in prose or in its diagrams."""
    found = []
    for match in _PATH.finditer(text):
        path = match.group(0)
        if "/" not in path and not path.endswith(".py") and not path.endswith(".md"):
            continue  # a word ending in a dot-something that is no file (rocklet.pyz stands alone)
        if re.fullmatch(r"[\d.]+/?", path) or path.startswith(("http", "HTTP")):
            continue
        found.extend(_expand(path))
    return found


def path_exists(path: str) -> bool:
    """A path exists from the repository's root, or as the end of one of its files' paths
    (``engine/pool.py``, ``admin/config.py``, ``store.py``)."""
    path = path.removeprefix("./")
    if path.endswith("/"):
        return (ROOT / path).is_dir() or any(f"/{path}" in f"/{name}" for name in _files())
    return path in _files() or any(name.endswith(f"/{path}") for name in _files())


@cache
def _defined() -> dict[str, set[str]]:
    """Each name a module of the packages defines at its top or in a class body, to the dotted
    names of the modules that define it (from the sources, nothing imported)."""
    names: dict[str, set[str]] = {}
    for package, top in PACKAGES.items():
        src = ROOT / "packages" / package / "src"
        for file in (src / top).rglob("*.py"):
            module = ".".join(file.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
            for part in module.split("."):
                names.setdefault(part, set()).add(module)
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.setdefault(node.name, set()).add(module)
                elif isinstance(node, ast.arg):
                    names.setdefault(node.arg, set()).add(module)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.setdefault(node.target.id, set()).add(module)
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            names.setdefault(target.id, set()).add(module)
                        elif isinstance(target, ast.Attribute):
                            names.setdefault(target.attr, set()).add(module)
    return names


def _attribute(obj: object, name: str) -> object:
    """``getattr``; or an attrs class's field (a slotted field with no default is no attribute);
    or, of a class, an attribute its module sets on instances (``self.config = ...``)."""
    try:
        return getattr(obj, name)
    except AttributeError:
        for field in getattr(obj, "__attrs_attrs__", ()):
            if field.name == name:
                return field
        if isinstance(obj, type) and obj.__module__ in _defined().get(name, ()):
            return object()  # what an instance holds: nothing further to follow
        raise


def _follow(start: str, rest: list[str]) -> bool:
    """Import the longest module prefix of ``start`` and follow ``rest`` by attribute."""
    parts = start.split(".") + rest
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = _attribute(obj, name)
        except AttributeError:
            return False
        return True
    return False


def name_exists(dotted: str) -> bool:
    """``rock_core.tenancy``, ``SandboxManager.start_async``, ``stopping.stop_locked``,
    ``manager.rocklet``, ``converters.read_types``: resolved by importing and following attributes."""
    head, *rest = dotted.split(".")
    if head in PACKAGES.values():
        return _follow(dotted, [])
    for cut in range(len(rest), -1, -1):
        prefix = ".".join([head, *rest[:cut]])
        if prefix in ALIASES:
            return _follow(ALIASES[prefix], rest[cut:])
    if _ENVIRONMENT.fullmatch(dotted):
        return any(dotted.rstrip("*") in text for text in _strings())
    modules = _defined().get(head, set())
    if not rest:
        return bool(modules)  # a function, class, field, attribute, parameter or module
    for module in modules:
        short = module.rsplit(".", 1)[-1]
        if short == head and _follow(module, rest):
            return True  # a module named by its last part: starting.start_async
        if short != head and _follow(f"{module}.{head}", rest):
            return True
    return False


def cited_names(text: str) -> list[str]:
    """The code the page quotes: identifiers and dotted names in backticks (a call's arguments
    and a leading ``rock.`` SDK path included), and class-like and dotted names in its diagrams."""
    found = []
    for quoted in _CODE.findall(_prose(text)):
        if (
            " " in quoted.strip()
            or "/" in quoted
            or ":" in quoted
            or quoted.startswith(("-", ".", "/"))
        ):
            continue  # commands, routes, paths, images, flags, an answer's wording
        match = _DOTTED.match(quoted)
        if match and not _FILE.fullmatch(match.group(0)):
            found.append(match.group(0) + ("*" if quoted.endswith("_*") else ""))
    for block in _code_blocks(text):
        found.extend(_CAMEL.findall(block))
        found.extend(
            name
            for name in _CALLED.findall(block)
            if name.split(".")[0] in _callables() and not _FILE.fullmatch(name)
        )
    return found


@cache
def _strings() -> tuple[str, ...]:
    """Every string constant of the packages' sources (settings read from the environment)."""
    found = []
    for package, top in PACKAGES.items():
        for file in (ROOT / "packages" / package / "src" / top).rglob("*.py"):
            tree = ast.parse(file.read_text(), str(file))
            found.extend(
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    return tuple(found)


@cache
def _callables() -> frozenset[str]:
    """Lower-case heads a diagram's dotted name may start with: aliases and module names."""
    modules = {module.rsplit(".", 1)[-1] for found in _defined().values() for module in found}
    return frozenset(ALIASES) | frozenset(modules)


#: The first design, beside the repository (the page says where they differ).
OUTSIDE = {"../shared/ARCHITECTURE.md"}


def missing_paths(text: str) -> list[str]:
    """The paths ``text`` cites that name no file or folder of the repository."""
    return sorted({path for path in cited_paths(text) if not path_exists(path)} - OUTSIDE)


def missing_names(text: str) -> list[str]:
    """The names ``text`` quotes that the code does not define."""
    return sorted(
        {name for name in cited_names(text) if name not in NOT_NAMES and not name_exists(name)}
    )


def test_every_cited_path_exists():
    """Every file and folder the page names is in the repository (bare file names such as
    ``store.py`` end some tracked file's path)."""
    assert not (missing := missing_paths(_page())), (
        f"docs/architecture.md cites paths that do not exist: {missing}"
    )


def test_every_cited_name_exists():
    """Every module, class, function, attribute and setting the page quotes is one of the code."""
    assert not (missing := missing_names(_page())), (
        f"docs/architecture.md quotes names the code does not define: {missing}"
    )


@pytest.mark.parametrize(
    ("cited", "renamed", "check"),
    [
        (
            "rock_core/engine/starting.py",
            "rock_core/engine/launching.py",
            missing_paths,
        ),  # in a diagram
        (
            "the sample table in admin/config.py's",
            "the sample table in admin/settings.py's",
            missing_paths,
        ),  # in prose, short
        (
            "`converters.read_types(EngineConfig)`",
            "`converters.read_kinds(EngineConfig)`",
            missing_names,
        ),
        ("`RockletClient.open_tunnel`", "`RockletClient.open_tunnels`", missing_names),
        ("`rock_core.testing.ScriptedRuntime`", "`rock_core.testing.ScriptRuntime`", missing_names),
        (
            "-> SandboxManager.start_async ",
            "-> SandboxManager.launch_async ",
            missing_names,
        ),  # in a diagram
        ("Event.ALIVE", "Event.LIVE", missing_names),
    ],
)
def test_the_check_sees_a_renamed_path_or_name(cited, renamed, check):
    """The checks are not blind: the page with one citation renamed fails them, naming it."""
    page = _page()
    assert cited in page, f"the page no longer cites {cited!r}: pick another example"
    missing = check(page.replace(cited, renamed, 1))
    assert missing and all(name in renamed for name in missing), missing


# -- the import rules the page states ---------------------------------------------------------

#: What rock-core may import besides the standard library and itself (its ``testing`` kit,
#: shipped under the extra of that name, also pytest and, in its docker_client fixture, docker).
CORE_DEPENDENCIES = {"attrs", "cattrs", "pluggy", "anyio", "httpx", "orjson"}


def _imports(file: Path) -> set[str]:
    """The top-level modules ``file`` imports at run time (not under ``if TYPE_CHECKING:``)."""
    return {module.split(".")[0] for module in _imported_modules(file)} - {"__future__"}


def _imported_modules(file: Path) -> set[str]:
    """The modules ``file`` imports at run time, by their full dotted names."""
    tree = ast.parse(file.read_text(), str(file))
    checking = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking.update(id(inner) for child in node.body for inner in ast.walk(child))
    modules = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / "packages" / package / "src").rglob("*.py"))


def test_rock_core_imports_only_its_dependencies():
    """rock-core imports attrs, cattrs, pluggy, anyio, httpx, orjson and the standard library,
    never a plugin or rock-sdk (the rocklet, standard library only, is checked in its zipapp by
    packages/rock-core/tests/rocklet/test_zipapp.py)."""
    allowed = set(sys.stdlib_module_names) | CORE_DEPENDENCIES | {"rock_core"}
    wrong = {}
    for file in _sources("rock-core"):
        parts = file.parts
        if "rocklet" in parts:
            continue
        extra = {"pytest", "docker"} if "testing" in parts else set()
        if stray := _imports(file) - allowed - extra:
            wrong[str(file.relative_to(ROOT))] = sorted(stray)
    assert not wrong, f"rock-core imports what the page says it does not: {wrong}"


def test_the_rocklet_is_standard_library_only():
    """The rocklet's own modules import the standard library and themselves only (its GEM worker
    runs in the image's python and imports GEM there: env_worker.py)."""
    wrong = {}
    for file in _sources("rock-core"):
        if "rocklet" not in file.parts or file.name == "env_worker.py":
            continue
        if stray := _imports(file) - set(sys.stdlib_module_names):
            wrong[str(file.relative_to(ROOT))] = sorted(stray)
    assert not wrong, f"the rocklet imports beyond the standard library: {wrong}"


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_plugin_imports_no_other_plugin_nor_rock_sdk(plugin):
    """A plugin stands on rock-core's public modules only: no other plugin, no ``rock``
    (rock-sdk), no private ``rock_core._...`` module."""
    others = {PACKAGES[name] for name in PLUGINS if name != plugin} | {"rock"}
    wrong = {}
    for file in _sources(plugin):
        modules = _imported_modules(file)
        stray = {m for m in modules if m.split(".")[0] in others}
        stray |= {
            m
            for m in modules
            if m.startswith("rock_core.") and any(p.startswith("_") for p in m.split("."))
        }
        if stray:
            wrong[str(file.relative_to(ROOT))] = sorted(stray)
    assert not wrong, f"{plugin} imports what the page says plugins do not: {wrong}"


def test_rock_sdk_imports_plugins_only_in_its_benches():
    """rock-sdk reaches plugins through rock_core.plugins; only a bench imports one by name
    (``rock bench cluster``'s stand-in Nomad, ``rock_nomad.testing``)."""
    plugins = {PACKAGES[name] for name in PLUGINS}
    wrong = {}
    for file in _sources("rock-sdk"):
        if "bench" in file.relative_to(ROOT / "packages" / "rock-sdk" / "src").parts:
            continue
        if stray := _imports(file) & plugins:
            wrong[str(file.relative_to(ROOT))] = sorted(stray)
    assert not wrong, f"rock-sdk imports plugins by name: {wrong}"


def test_the_import_check_reads_run_time_imports_only(tmp_path):
    """An import at run time is seen, also inside a function; one for type hints only is not."""
    module = tmp_path / "module.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nimport attrs\nif TYPE_CHECKING:\n    import click\n"
        "def later():\n    from rock_docker.runtime import DockerRuntime\n"
    )
    assert _imports(module) == {"typing", "attrs", "rock_docker"}
