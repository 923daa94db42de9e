"""The zipapp: deterministic, standard library only, Python 3.8 syntax, runnable."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rock_core.rocklet import __version__, build_zipapp

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rock_core" / "rocklet"

# Names that exist only in Python 3.9+ (attributes, functions, keyword arguments); a module of
# the rocklet must not use them, because the sandbox's python3 may be 3.8.
NEWER_THAN_38 = {
    "removeprefix",
    "removesuffix",
    "waitstatus_to_exitcode",
    "pidfd_open",
    "is_relative_to",
    "with_stem",
    "bit_count",
    "stdlib_module_names",
    "cache",
    "pairwise",
    "process_group",
    "extra_groups",
    "pipesize",
    "zoneinfo",
    "graphlib",
    "TypeAlias",
    "ParamSpec",
}
# Keyword arguments added in 3.9+ to functions the rocklet calls (subprocess, zip, hashlib).
NEWER_KEYWORDS = {
    "strict",
    "process_group",
    "user",
    "group",
    "extra_groups",
    "pipesize",
    "usedforsecurity",
}
CALLS_WITH_NEWER_KEYWORDS = {
    "Popen",
    "run",
    "call",
    "check_call",
    "check_output",
    "zip",
    "sha256",
    "md5",
}
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def pyz_modules(pyz: Path) -> dict[str, str]:
    with zipfile.ZipFile(pyz) as zf:
        return {name: zf.read(name).decode() for name in zf.namelist() if name.endswith(".py")}


def test_build_is_deterministic_and_cached(tmp_path):
    first = build_zipapp(tmp_path / "a.pyz", cache_dir=tmp_path / "cache1")
    second = build_zipapp(tmp_path / "b.pyz", cache_dir=tmp_path / "cache2")
    assert first.read_bytes() == second.read_bytes()
    again = build_zipapp(tmp_path, cache_dir=tmp_path / "cache1")
    assert again == tmp_path / "rocklet.pyz"
    assert again.read_bytes() == first.read_bytes()


def test_archive_layout(pyz):
    names = zipfile.ZipFile(pyz).namelist()
    assert "__main__.py" in names
    assert "rocklet/__init__.py" in names
    assert "rocklet/server.py" in names
    assert "rocklet/zipapp.py" not in names  # host-only
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")


# The env worker is not the rocklet: a separate python3 with the image's site-packages runs it,
# and it imports the environment's runtime (rocklet/envs.py).
# Run as a script, it imports env_generators.py, which the rocklet writes beside it.
ENV_WORKER_IMPORTS = {"gem", "numpy", "nltk", "reasoning_gym", "env_generators"}


def test_only_standard_library_imports(pyz):
    stdlib = set(sys.stdlib_module_names)
    for name, source in pyz_modules(pyz).items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    assert name.startswith("rocklet/"), (
                        "relative import outside the package in %s" % name
                    )
                    continue
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if name == "__main__.py" and root == "rocklet":
                    continue  # the archive's entry point imports the package itself
                if name == "rocklet/env_worker.py" and root in ENV_WORKER_IMPORTS:
                    continue
                assert root in stdlib or root == "__future__", "%s imports %s" % (name, root)


def test_package_uses_relative_imports_only():
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not node.module.startswith(("rock_core", "rocklet")), (
                    "%s: absolute import of %s" % (path.name, node.module)
                )


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_sources_are_python_38(path):
    source = path.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source
    annotation_nodes = set()
    for node in ast.walk(tree):
        for ann in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if ann is not None:
                annotation_nodes.update(id(n) for n in ast.walk(ann))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert node.attr not in NEWER_THAN_38, "%s:%d uses .%s (Python 3.9+)" % (
                path.name,
                node.lineno,
                node.attr,
            )
        if isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname in CALLS_WITH_NEWER_KEYWORDS:
                for kw in node.keywords:
                    assert kw.arg not in NEWER_KEYWORDS, "%s:%d uses %s(%s=) (Python 3.9+)" % (
                        path.name,
                        node.lineno,
                        fname,
                        kw.arg,
                    )
        if isinstance(node, ast.Subscript) and id(node) not in annotation_nodes:
            value = node.value
            assert not (isinstance(value, ast.Name) and value.id in BUILTIN_GENERICS), (
                "%s:%d subscripts builtin %s at run time (Python 3.9+)"
                % (path.name, node.lineno, value.id)
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            assert not (isinstance(node.left, ast.Dict) or isinstance(node.right, ast.Dict)), (
                "%s:%d dict | dict" % (path.name, node.lineno)
            )


def test_pyz_runs_with_a_plain_python(pyz, plain_python):
    out = subprocess.run(
        [plain_python, "-I", "-S", str(pyz), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == __version__
    bad = subprocess.run(
        [plain_python, "-I", str(pyz), "--bogus"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2
    assert "unknown argument" in bad.stderr
