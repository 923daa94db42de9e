"""Docs that cannot go stale (issue #30 point 2): every ```python, ```sh / ```bash and ```console
block of README.md, docs/*.md and packages/*/README.md runs here as written, against real parts
(the embedded SDK on the Docker engine, a real ``rock admin serve``, the ``rock`` command), or
carries a marker with the reason it cannot. Printed results are checked where the block shows
them. The markers and rules are in ``tests/docs_blocks.py``.

A new block needs nothing to be checked: it is found and run. One that cannot run as written
fails here until it is fixed or marked ``<!-- docs-test: skip (why) -->``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


docs = _load("docs_blocks")
BLOCKS = docs.all_blocks()
RUNNER = Path(__file__).with_name("docs_block_runner.py")

#: What a shell block's words become here, and why: the block stays as a reader types it.
SHELL_SUBSTITUTIONS = [
    # `uv run X` is X in the workspace's venv; uv itself would sync that shared venv first.
    (re.compile(r"\buv run "), ""),
]


def _runnable(*langs: set[str]) -> list[Any]:
    wanted = set().union(*langs)
    return [pytest.param(b, id=b.id) for b in BLOCKS if b.lang in wanted and b.runs]


# ---- the inventory: every block is found, named and, when not run, says why ---------------------


def test_the_walk_finds_the_blocks_of_every_doc():
    files = {b.path.relative_to(REPO).as_posix() for b in BLOCKS}
    assert {"README.md", "docs/plugins.md", "packages/rock-sdk/README.md"} <= files
    assert sum(b.lang in docs.PYTHON for b in BLOCKS) >= 20
    assert sum(b.lang in docs.SHELL | docs.CONSOLE for b in BLOCKS) >= 8


def test_every_fence_names_its_language_so_no_command_hides_in_a_plain_block():
    known = docs.PYTHON | docs.SHELL | docs.CONSOLE | docs.INERT
    unnamed = [f"{b.id} ({b.lang or 'no language'})" for b in BLOCKS if b.lang not in known]
    assert not unnamed, (
        f"fences without a known language (use ```text for a diagram or a listing): {unnamed}"
    )


def test_every_marker_is_understood_and_every_skip_says_why():
    wrong = {b.id: b.problems for b in BLOCKS if b.problems}
    assert not wrong, wrong
    inert = [b.id for b in BLOCKS if b.marker is not None and b.lang in docs.INERT]
    assert not inert, f"markers on blocks that never run: {inert}"
    orphans = {
        str(path.relative_to(REPO)): lines
        for path in docs.doc_files()
        if (lines := docs.orphan_markers(path))
    }
    assert not orphans, f"docs-test markers (or misspelt ones) with no block right below: {orphans}"


def test_every_python_block_compiles_and_top_level_await_says_what_it_runs_in():
    wrong = {}
    for block in _python_blocks():
        awaits = {"sandbox", "async"} & set(block.tokens)
        try:
            compile(block.text, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            wrong[block.id] = f"does not compile: {exc}"
            continue
        if not awaits and "skip" not in block.tokens:
            try:
                compile(block.text, block.id, "exec")
            except SyntaxError as exc:
                wrong[block.id] = f"top-level await needs `sandbox` or `async` (or skip): {exc}"
    assert not wrong, wrong


def _python_blocks() -> list[Any]:
    return [b for b in BLOCKS if b.lang in docs.PYTHON]


def test_the_output_matcher_takes_ellipses_for_text_and_for_lines():
    assert docs.matches(["Python 3.11... 0"], ["Python 3.11.2", " 0"]) is False
    assert docs.matches(["Python 3.11... 0"], ["Python 3.11.2  0"])
    assert docs.matches(["a", "...", "c"], ["a", "b1", "b2", "c"])
    assert docs.matches(["a", "...", "c"], ["a", "c"])
    assert not docs.matches(["a", "c"], ["a", "b", "c"])


def test_a_new_block_is_found_and_run_and_a_bad_marker_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)  # 1\n```\n\n"
        "<!-- docs-test: skip -->\n```sh\nrock nothing\n```\n\n"
        "- a list item:\n\n  <!-- docs-test: sandbox; sessions x -->\n  ```python\n  x = 1\n  ```\n"
        "```\nrock admin start\n```\n"
    )
    new, bare_skip, indented, unnamed = docs.blocks_of(page)
    assert (new.lang, new.runs, new.marker, docs.expected_prints(new.text)) == (
        "python",
        True,
        None,
        {1: "1"},
    )
    assert bare_skip.problems == ["`skip` needs its reason in parentheses: skip (why)"]
    assert indented.text == "x = 1\n" and "unknown token 'sessions'" in indented.problems[0]
    assert unnamed.lang == ""  # refused by the fence test above
    page.write_text("```sh\necho hi\n```\n\n```text\nhi\n```\n\nprose\n\n```text\nnot it\n```\n")
    shown, below, later = docs.blocks_of(page)
    assert (shown.output, below.output, later.output) == ("hi\n", None, None)
    page.write_text(
        "<!-- docs-test: sandbox -->\nprose\n\n```python\nx = 1\n```\n\n"
        "<!-- docs_test: async -->\n```python\nx = 1\n```\n\n"
        "<!-- docs-test: session main -->\n```python\nx = 1\n```\n"
    )
    assert docs.orphan_markers(page) == [1, 8]
    assert list(docs.blocks_of(page))[2].problems == ["session only with `sandbox`"]


def _rock_commands_named() -> set[str]:
    """What follows ``rock`` in the docs' inline code and in the lines of shell blocks that do not
    run (a benchmark, an interactive command): ``sandbox top --sort cpu``, ..."""
    named = set()
    for path in docs.doc_files():
        text = path.read_text(encoding="utf-8")
        prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
        named |= set(re.findall(r"`(?:\.venv/bin/)?rock ([^`]+)`", prose))
    for block in BLOCKS:
        if block.lang in docs.SHELL | docs.CONSOLE and not block.runs:
            for line in block.text.splitlines():
                found = re.match(r"^(?:\$ )?(?:\.venv/bin/)?rock ([^#]+)", line.strip())
                if found:
                    named.add(found.group(1))
    return named


def test_every_rock_command_and_option_the_docs_name_exists():
    import click

    from rock.cli import main as cli

    wrong = []
    for named in sorted(_rock_commands_named()):
        command: click.Command = cli
        context = click.Context(cli, info_name="rock")
        path = ["rock"]
        tokens = named.replace("[", " ").replace("]", " ").split()
        for at, token in enumerate(tokens):
            if path == ["rock", "model-service"]:  # passed on to the sandbox's argparse program
                wrong += _model_service_mistakes(named, tokens[at:])
                break
            if token.startswith("--"):
                options = {"--help"} | {
                    o for p in command.params for o in p.opts + p.secondary_opts
                }
                if token.split("=")[0] not in options:
                    wrong.append(f"`rock {named}`: {' '.join(path)} has no option {token}")
            elif isinstance(command, click.Group) and re.fullmatch(r"[a-z][a-z-]*", token):
                sub = command.get_command(context, token)
                if sub is None:
                    wrong.append(f"`rock {named}`: {' '.join(path)} has no command {token!r}")
                    break
                path.append(token)
                context = click.Context(sub, parent=context, info_name=token)
                command = sub
    assert len(_rock_commands_named()) >= 40
    assert not wrong, "\n".join(wrong)


def _model_service_mistakes(named: str, tokens: list[str]) -> list[str]:
    """What `rock model-service ...` names that its argparse program (the one the sandbox runs,
    :mod:`rock.sdk.model.cli`) lacks: a subcommand or an option."""
    import argparse

    from rock.sdk.model.cli import parser

    def subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    command = subparsers(parser())["model-service"]
    path = ["rock", "model-service"]
    for token in tokens:
        if token.startswith("--"):
            if token.split("=")[0] not in {"--help", *command._option_string_actions}:
                return [f"`rock {named}`: {' '.join(path)} has no option {token}"]
        elif re.fullmatch(r"[a-z][a-z-]*", token) and subparsers(command):
            if token not in subparsers(command):
                return [f"`rock {named}`: {' '.join(path)} has no command {token!r}"]
            command = subparsers(command)[token]
            path.append(token)
    return []


def test_the_files_and_make_targets_that_blocks_not_run_name_exist():
    """A shell block that does not run still names real things: each repository path it names
    (``packages/...``, ``scripts/...``) exists, and each ``make TARGET`` is a Makefile target."""
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    wrong = []
    for block in BLOCKS:
        if block.lang not in docs.SHELL | docs.CONSOLE or block.runs:
            continue
        for line in block.text.splitlines():
            command = line.split("#")[0].removeprefix("$ ")
            for word in command.split():
                word = re.sub(r"\[.*\]$", "", word.strip("'\""))
                path = re.match(r"^(?:\./)?((?:packages|scripts|deploy|docs|tests)/\S+)", word)
                if path and not (REPO / path.group(1)).exists():
                    wrong.append(f"{block.id}: no {path.group(1)}")
            make = re.match(r"^\s*make\s+([\w-]+)", command)
            if make and make.group(1) not in targets:
                wrong.append(f"{block.id}: the Makefile has no target {make.group(1)}")
    assert not wrong, wrong


def test_every_toml_block_parses():
    broken = {}
    for block in BLOCKS:
        if block.lang == "toml":
            try:
                tomllib.loads(block.text)
            except tomllib.TOMLDecodeError as exc:
                broken[block.id] = str(exc)
    assert not broken, broken


def test_every_admin_config_block_loads_with_the_admins_reader(tmp_path: Path) -> None:
    """A TOML block with ``[admin]``, ``[engine]`` or ``[plugins.x]`` tables is read as the admin
    reads its ``--config`` file (unknown keys and bad values refused); each ``"<hex ...>"``
    placeholder becomes a digest of its own."""
    from rock.admin.config import load_settings

    digests = itertools.count(1)
    checked, wrong = 0, {}
    for block in BLOCKS:
        if block.lang != "toml" or not re.search(r"^\[(admin|engine|plugins)", block.text, re.M):
            continue
        text = re.sub(r'"<hex[^"]*>"', lambda _: f'"{next(digests):064x}"', block.text)
        (tmp_path / "admin.toml").write_text(text)
        try:
            load_settings(tmp_path / "admin.toml", environ={})
        except Exception as exc:  # noqa: BLE001 - reported with its block
            wrong[block.id] = f"{type(exc).__name__}: {exc}"
        checked += 1
    assert checked >= 5
    assert not wrong, wrong


# ---- Python blocks -------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("block", _runnable(docs.PYTHON))
def test_python_block_runs_and_prints_what_it_shows(
    block: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "admin-plugin" in block.tokens:
        _serve_plugin_block(block, tmp_path, request.getfixturevalue("docker_client"))
        return
    env = _environment(block, request, home=tmp_path / "home")
    (tmp_path / "block.py").write_text(block.text)
    (tmp_path / "setup.json").write_text(json.dumps(block.tokens))
    done = subprocess.run(
        [sys.executable, str(RUNNER), *(str(tmp_path / n) for n in ("block.py", "setup.json"))]
        + [str(tmp_path / "result.json")],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stderr[-4000:]}"
    printed: dict[int, list[str]] = {}
    for line, text in json.loads((tmp_path / "result.json").read_text())["prints"]:
        printed.setdefault(line, []).append(text)
    if block.output is not None:
        _check_output(block, done.stdout)
    for line, expected in docs.expected_prints(block.text).items():
        got = printed.get(line)
        assert got, f"{block.id}: line {line} of the block never printed (it shows {expected!r})"
        for text in got:
            assert docs.matches([expected], [" ".join(text.split())]), (
                f"{block.id}: line {line} printed {text!r}, the doc shows {expected!r}"
            )


# ---- shell and console blocks --------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("block", _runnable(docs.SHELL))
def test_shell_block_runs(block: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    workdir = _workdir(tmp_path)
    script = block.text
    for pattern, replacement in SHELL_SUBSTITUTIONS:
        script = pattern.sub(replacement, script)
    port = str(_free_port())
    script = script.replace("8080", port)  # the doc's port may be taken here
    env = _environment(block, request, home=tmp_path / "home")
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=540,
            cwd=workdir,
            env=env,
        )
    finally:
        if (tmp_path / "home" / ".rock" / "admin").exists():  # an admin the block left running
            subprocess.run(
                [str(VENV_BIN / "rock"), "admin", "stop"], env=env, capture_output=True, timeout=120
            )
    assert done.returncode == 0, f"{block.id} failed ({done.returncode}):\n{done.stdout[-6000:]}"
    if block.output is not None:
        _check_output(block, done.stdout, {"8080": port})


def _check_output(block: Any, printed: str, replace: dict[str, str] | None = None) -> None:
    shown = block.output
    for old, new in (replace or {}).items():
        shown = shown.replace(old, new)
    expected = shown.rstrip("\n").splitlines()
    assert docs.matches(expected, printed.rstrip("\n").splitlines()), (
        f"{block.id} printed\n{printed}\nwhere the ```text block below it shows\n{block.output}"
    )


@pytest.mark.docker
@pytest.mark.parametrize("block", _runnable(docs.CONSOLE))
def test_console_block_prints_what_it_shows(
    block: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workdir = _workdir(tmp_path)
    env = _environment(block, request, home=tmp_path / "home")
    for command, expected in docs.console_steps(block.text):
        plugin = block.tokens.get("plugin")
        if plugin and re.fullmatch(rf"pip install {re.escape(plugin)}", command):
            continue  # what the `plugin` set-up did
        done = subprocess.run(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
            cwd=workdir,
            env=env,
        )
        assert done.returncode == 0, f"{block.id}: `{command}` failed:\n{done.stdout[-3000:]}"
        while expected and not expected[-1].strip():
            expected = expected[:-1]
        actual = done.stdout.rstrip("\n").splitlines()
        assert docs.matches(expected, actual), (
            f"{block.id}: `{command}` printed\n{done.stdout}\nwhere the doc shows\n"
            + "\n".join(expected)
        )


# ---- set-ups -------------------------------------------------------------------------------------


def _environment(
    block: Any, request: pytest.FixtureRequest, *, home: Path | None = None
) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("ROCK_BASE_URL", "ROCK_API_KEY", "ROCK_ADMIN_STATE_DIR"):
        env.pop(name, None)  # the block's own, or none: never the caller's admin
    if home is not None:
        home.mkdir(exist_ok=True)
        env["HOME"] = str(home)
    if "admin" in block.tokens:
        env["ROCK_BASE_URL"] = request.getfixturevalue("docs_admin")
    if "plugin" in block.tokens:
        site = request.getfixturevalue("foo_site")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def _workdir(tmp_path: Path) -> Path:
    """A folder that looks like a clone to a shell block: the repository's parts, linked (docs/
    copied, so a command that rewrites a page rewrites the copy)."""
    workdir = tmp_path / "clone"
    workdir.mkdir()
    for name in (".venv", "packages", "scripts", "deploy", "pyproject.toml", "Makefile"):
        (workdir / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "docs", workdir / "docs")
    return workdir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def docs_admin(tmp_path_factory: pytest.TempPathFactory, docker_client: Any) -> Iterator[str]:
    """One real ``rock admin serve`` (state in a temporary folder) for every ``admin`` block."""
    with _admin(tmp_path_factory.mktemp("docs-admin"), docker_client) as url:
        yield url


@contextlib.contextmanager
def _admin(state: Path, docker_client: Any, env: dict[str, str] | None = None) -> Iterator[str]:
    """``rock admin serve`` on a free port with its state in ``state``, until the block ends.

    An admin leaves its sandboxes running when it stops (by design): those still there at the
    end are removed by their owner label."""
    from rock_core.testing import eventually

    port = _free_port()
    environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state), **(env or {})}
    environ.pop("ROCK_BASE_URL", None)
    with open(state / "admin.log", "ab") as log:
        process = subprocess.Popen(
            [str(VENV_BIN / "rock"), "admin", "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, (state / "admin.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as answer:  # noqa: S310
                return bool(answer.status == 200)
        except OSError:
            return False

    try:
        eventually(healthy, what="the docs' admin healthy", timeout=60, interval=0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        owner = f"admin:{state / 'rock.db'}"
        for container in docker_client.containers.list(
            all=True, sparse=True, filters={"label": f"rock.owner={owner}"}
        ):
            container.remove(force=True)


def _serve_plugin_block(block: Any, tmp_path: Path, docker_client: Any) -> None:
    """An ``admin-plugin`` block: installed as the plugin ``docs-example`` of an admin (with the
    plugins of its ``disable`` token blocked), each route its ``rock_admin_routes`` returns is
    called with ``{}``: the admin must serve it (no 404 or 405) and its handler answer (no 5xx)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "docs_example_plugin.py").write_text(block.text)
    info = site / "docs_example-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: docs-example\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rock]\ndocs-example = docs_example_plugin\n")
    namespace: dict[str, Any] = {}
    exec(compile(block.text, block.id, "exec"), namespace)  # noqa: S102 - the docs' own block
    routes = namespace["rock_admin_routes"]()
    assert routes, f"{block.id}: rock_admin_routes returned no route"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "ROCK_DISABLE_PLUGINS": block.tokens.get("disable", "0"),
    }
    (tmp_path / "state").mkdir()
    with _admin(tmp_path / "state", docker_client, env) as url:
        for route in routes:
            path = re.sub(r"\{[^}]+\}", "x", route.path)
            request = urllib.request.Request(
                url + path,
                data=None if route.method == "GET" else b"{}",
                method=route.method,
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                    status, body = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            assert status not in (404, 405) and status < 500, (
                f"{block.id}: {route.method} {path} answered {status}: {body[:500]!r}"
            )


@pytest.fixture(scope="module")
def foo_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The distribution rock-foo of docs/plugins.md, installed into a folder for ``PYTHONPATH``:
    its ``pyproject.toml`` block gives the name, version and entry points, its ``plugin.py``
    block the module; ``rock_foo.runtime.FooRuntime`` is a runtime that holds nothing."""
    site = tmp_path_factory.mktemp("foo-site")
    plugins_doc = [b for b in BLOCKS if b.path == REPO / "docs" / "plugins.md"]
    project = next(b for b in plugins_doc if "# pyproject.toml of rock-foo" in b.text)
    plugin = next(b for b in plugins_doc if "# src/rock_foo/plugin.py" in b.text)
    meta = tomllib.loads(project.text)["project"]
    package = site / "rock_foo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(plugin.text)
    (package / "runtime.py").write_text(
        "from rock_core.testing import NullRuntime\n\n\n"
        "class FooRuntime(NullRuntime):\n    name = 'foo'\n"
    )
    info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    entry_points = "".join(f"{k} = {v}\n" for k, v in meta["entry-points"]["rock"].items())
    (info / "entry_points.txt").write_text(f"[rock]\n{entry_points}")
    return site
