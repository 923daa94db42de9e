"""The hook specs are the plugin author's contract: each documented, in the code and in docs/plugins.md."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy
import pytest

import rock_core
from rock_core import hookspecs

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


def _hookspecs() -> dict[str, object]:
    return {
        name: fn
        for name, fn in vars(hookspecs).items()
        if inspect.isfunction(fn) and getattr(fn, "rock_spec", None) is not None
    }


def _render(name: str, fn: object) -> str:
    # With postponed annotations every annotation is the source text, so this is the exact
    # signature as written in hookspecs.py.
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    params = ", ".join(
        p.name if p.annotation is inspect.Parameter.empty else f"{p.name}: {p.annotation}"
        for p in sig.parameters.values()
    )
    return f"{name}({params}) -> {sig.return_annotation}"


def test_the_hooks_are_the_ones_the_architecture_lists() -> None:
    assert set(_hookspecs()) == {
        "rock_register_runtimes",
        "rock_register_archive_stores",
        "rock_register_record_stores",
        "rock_register_speedups",
        "rock_register_env_providers",
        "rock_sandbox_transition",
        "rock_admin_routes",
        "rock_cli_commands",
        "rock_configure",
    }


def test_every_function_in_the_spec_module_is_a_marked_hookspec() -> None:
    # A rock_ function without @hookspec would silently not be a hook.
    functions = {
        name
        for name, fn in vars(hookspecs).items()
        if inspect.isfunction(fn) and name.startswith("rock_")
    }
    assert functions == set(_hookspecs())


@pytest.mark.parametrize("name", sorted(_hookspecs()))
def test_every_hook_docstring_says_when_it_is_called_its_parameters_and_its_return(
    name: str,
) -> None:
    fn = _hookspecs()[name]
    doc = inspect.getdoc(fn)
    assert doc, f"{name} has no docstring"
    assert "Called" in doc, f"{name}'s docstring does not say when it is called"
    for param in inspect.signature(fn).parameters:  # type: ignore[arg-type]
        assert f":param {param}:" in doc, f"{name}'s docstring does not describe {param!r}"
    if not inspect.signature(fn).parameters:  # type: ignore[arg-type]
        assert "no parameters" in doc
    assert re.search(r"return value is ignored|are collected|first non-None", doc), (
        f"{name}'s docstring does not say what its return value means"
    )


def test_docs_show_the_exact_signature_of_every_hook_and_no_other() -> None:
    documented = re.findall(
        r"^### `(rock_\w+\(.*\).*)`$", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE
    )
    expected = [_render(name, fn) for name, fn in _hookspecs().items()]
    assert sorted(documented) == sorted(expected)


def test_rendered_signatures_carry_the_annotations() -> None:
    # Guards the comparison above: it must see types, not only parameter names.
    assert _render("rock_sandbox_transition", hookspecs.rock_sandbox_transition) == (
        "rock_sandbox_transition(record: SandboxRecord, event: Event, old: State, new: State) -> None"
    )


def test_plugin_authors_import_hookimpl_from_rock_core() -> None:
    assert rock_core.hookimpl is hookspecs.hookimpl
    assert isinstance(rock_core.hookimpl, pluggy.HookimplMarker)
    assert rock_core.hookimpl.project_name == "rock"


SOURCES = sorted(Path(__file__).resolve().parents[3].glob("packages/*/src/**/*.py"))


def _callers(method: str) -> list[str]:
    """Source files (outside tests and rock_core.plugins itself) that call ``.method(``."""
    pattern = re.compile(rf"\.{method}\(")
    return [
        str(path)
        for path in SOURCES
        if path.name != "plugins.py"
        and "/testing/" not in str(path)
        and pattern.search(path.read_text(encoding="utf-8"))
    ]


@pytest.mark.parametrize("name", sorted(_hookspecs()))
def test_every_hook_has_a_host_that_calls_it(name: str) -> None:
    """A hook nothing calls is a defect: each is called by a method of ``Plugins`` that some
    host in the packages' sources (the engine, the admin, the CLI) calls."""
    from rock_core.plugins import Plugins

    methods = [
        method
        for method, fn in vars(Plugins).items()
        if inspect.isfunction(fn) and re.search(rf"[\"']{name}[\"']", inspect.getsource(fn))
    ]
    assert methods, f"no method of Plugins calls {name}"
    hosts = {method: _callers(method) for method in methods}
    assert any(hosts.values()), (
        f"{name} is called by Plugins.{'/'.join(methods)}, which no host calls: {hosts}"
    )
