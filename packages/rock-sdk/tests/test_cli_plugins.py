"""`rock --version` and `rock plugins`, with a real third-party plugin installed for the test.

The throwaway distribution ``rock-throwaway`` is installed into a temporary directory with
rock-core's :class:`~rock_core.testing.PluginSite` (a module and its ``.dist-info``, as an
installer leaves them), never into the workspace's environment; the ``rock`` console script then
runs as a subprocess with that directory on ``PYTHONPATH``, exactly as a user's installed plugin
would be found.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from rock.cli import main
from rock_core.plugins import Plugins, get_plugin_manager
from rock_core.testing import PluginSite

# The in-process tests install distributions with the `plugin_site` fixture of rock's testing plugin.
pytest_plugins = ["rock_core.testing.fixtures"]

ROCK = Path(sys.executable).with_name("rock")
THROWAWAY_VERSION = "0.3.1"

THROWAWAY_MODULE = '''
"""A throwaway rock plugin: one runtime that holds nothing, one CLI command."""

import click
from rock_core import hookimpl
from rock_core.testing import NullRuntime


class ThrowawayRuntime(NullRuntime):
    name = "throwaway"


@hookimpl
def rock_register_runtimes(register):
    register("throwaway", ThrowawayRuntime)


@hookimpl
def rock_cli_commands(cli):
    @cli.command()
    def hello():
        """Say hello from the throwaway plugin."""
        click.echo("hello from rock-throwaway")
'''


@pytest.fixture(scope="module")
def throwaway_site(tmp_path_factory: pytest.TempPathFactory) -> PluginSite:
    """A directory with rock-throwaway installed into it (its module is ``rock_throwaway``)."""
    site = PluginSite(tmp_path_factory.mktemp("throwaway"))
    site.install(
        "rock-throwaway", THROWAWAY_VERSION, module="rock_throwaway", source=THROWAWAY_MODULE
    )
    return site


def _rock(
    *args: str, site: PluginSite | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``rock`` console script with rock's plugin variables cleared, plus ``env``."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("ROCK_") and k != "PYTHONPATH"
    }
    if site is not None:
        environ["PYTHONPATH"] = str(site.path)
    environ.update(env)
    return subprocess.run(
        [str(ROCK), *args], env=environ, capture_output=True, text=True, check=False
    )


def _listed(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    assert proc.returncode == 0, proc.stderr
    return {entry["plugin"]: entry for entry in json.loads(proc.stdout)}


# ---------------------------------------------------------------------------------------------
# rock --version


def test_version_prints_sdk_and_core_versions() -> None:
    proc = _rock("--version")
    assert proc.returncode == 0
    sdk, core = importlib.metadata.version("rock-sdk"), importlib.metadata.version("rock-core")
    assert proc.stdout == f"rock-sdk {sdk}, rock-core {core}\n"


def test_a_broken_plugin_does_not_break_version_or_builtins_but_is_reported(tmp_path: Path) -> None:
    site = PluginSite(tmp_path)
    site.install("rock-broken", "9.9", source="raise RuntimeError('broken on purpose')\n")
    assert _rock("--version", site=site).returncode == 0
    # Only the broken plugin is allowed, so that the error is about it whatever else is installed.
    listing = _rock("plugins", site=site, ROCK_PLUGINS="broken")
    assert listing.returncode == 1
    assert "rock plugin 'broken' from rock-broken 9.9 failed to import" in listing.stderr
    assert "broken on purpose" in listing.stderr
    unknown = _rock("hello", site=site, ROCK_PLUGINS="broken")
    assert unknown.returncode == 2
    assert (
        "plugin commands unavailable" in unknown.stderr
        and "No such command 'hello'" in unknown.stderr
    )
    skipped = _rock("plugins", "--json", site=site, ROCK_DISABLE_PLUGINS="broken")
    assert _listed(skipped)["broken"]["blocked"] is True


# ---------------------------------------------------------------------------------------------
# rock plugins, with the throwaway plugin installed


def test_plugins_json_lists_the_installed_plugin_with_its_hooks(throwaway_site: PluginSite) -> None:
    entry = _listed(_rock("plugins", "--json", site=throwaway_site))["throwaway"]
    assert entry == {
        "plugin": "throwaway",
        "distribution": "rock-throwaway",
        "version": THROWAWAY_VERSION,
        "entry_point": "rock_throwaway",
        "hooks": ["rock_cli_commands", "rock_register_runtimes"],
        "blocked": False,
    }


def test_plugins_table_shows_plugin_distribution_version_and_hooks(
    throwaway_site: PluginSite,
) -> None:
    proc = _rock("plugins", site=throwaway_site)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["plugin", "distribution", "version", "hooks"]
    (row,) = [r for r in rows if r.startswith("throwaway ")]
    assert row.split(None, 3) == [
        "throwaway",
        "rock-throwaway",
        THROWAWAY_VERSION,
        "rock_cli_commands, rock_register_runtimes",
    ]


def test_a_plugin_command_runs(throwaway_site: PluginSite) -> None:
    proc = _rock("hello", site=throwaway_site)
    assert (proc.returncode, proc.stdout) == (0, "hello from rock-throwaway\n"), proc.stderr
    assert "hello" in _rock("--help", site=throwaway_site).stdout


@pytest.mark.parametrize(
    "env",
    [
        {"ROCK_PLUGINS": "other"},
        {"ROCK_DISABLE_PLUGINS": "throwaway"},
        {"ROCK_DISABLE_PLUGINS": "rock-throwaway"},
        {"ROCK_DISABLE_PLUGINS": "1"},
    ],
    ids=lambda env: "=".join(next(iter(env.items()))),
)
def test_a_blocked_plugin_is_listed_as_blocked_and_its_command_is_gone(
    throwaway_site: PluginSite, env: dict[str, str]
) -> None:
    entry = _listed(_rock("plugins", "--json", site=throwaway_site, **env))["throwaway"]
    assert (entry["blocked"], entry["hooks"]) == (True, [])
    row = next(
        r
        for r in _rock("plugins", site=throwaway_site, **env).stdout.splitlines()
        if r.startswith("throwaway ")
    )
    assert row.endswith("(blocked)")
    proc = _rock("hello", site=throwaway_site, **env)
    assert proc.returncode == 2 and "No such command 'hello'" in proc.stderr


def test_the_allow_list_loads_the_named_plugin(throwaway_site: PluginSite) -> None:
    proc = _rock("hello", site=throwaway_site, ROCK_PLUGINS="throwaway")
    assert proc.stdout == "hello from rock-throwaway\n"


def test_trace_names_the_plugin_and_the_hook_calls(throwaway_site: PluginSite) -> None:
    proc = _rock("hello", site=throwaway_site, ROCK_TRACE_PLUGINS="1")
    assert proc.stdout == "hello from rock-throwaway\n"
    assert f"loaded rock plugin 'throwaway' from rock-throwaway {THROWAWAY_VERSION}" in proc.stderr
    assert "rock_cli_commands [hook]" in proc.stderr
    assert "finish rock_cli_commands" in proc.stderr
    assert _rock("hello", site=throwaway_site).stderr == ""


def test_get_plugin_manager_in_process_finds_the_installed_plugin(
    throwaway_site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "ROCK_PLUGINS", "throwaway"
    )  # the workspace's own plugins are not under test here
    monkeypatch.delenv("ROCK_DISABLE_PLUGINS", raising=False)
    with throwaway_site.importable():
        plugins = Plugins(get_plugin_manager())
        runtime_cls = plugins.runtimes()["throwaway"]
        assert runtime_cls.__module__ == "rock_throwaway"
        handle = anyio.run(lambda: runtime_cls().create(None, labels={}, rocklet_token="t"))
        assert (handle.runtime, handle.sandbox_id) == ("throwaway", "sandbox-1")
        info = next(i for i in plugins.describe() if i.name == "throwaway")
        assert (info.distribution, info.version, info.blocked) == (
            "rock-throwaway",
            THROWAWAY_VERSION,
            False,
        )


# ---------------------------------------------------------------------------------------------
# in-process, with only hand-made distributions on sys.path


def test_no_plugins_installed(plugin_site: PluginSite) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["plugins"]).output == "no plugins installed\n"
    assert json.loads(runner.invoke(main, ["plugins", "--json"]).output) == []


def test_a_plugin_cannot_replace_a_builtin_command(plugin_site: PluginSite) -> None:
    plugin_site.install(
        "rock-usurper",
        source=textwrap.dedent(
            """
            import click
            from rock_core import hookimpl

            @hookimpl
            def rock_cli_commands(cli):
                @cli.command("plugins")
                def fake():
                    click.echo("fake plugins listing")
            """
        ),
    )
    result = CliRunner().invoke(main, ["--help"])
    assert "a plugin's command 'plugins' is ignored: it is built in" in result.stderr
    listing = CliRunner().invoke(main, ["plugins"])
    assert "fake plugins listing" not in listing.output
    assert listing.output.splitlines()[1].split()[:3] == ["usurper", "rock-usurper", "1.0"]
