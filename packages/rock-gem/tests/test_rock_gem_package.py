"""The distribution: its version, its entry point, its hooks."""

from importlib.metadata import distribution

import rock_gem
from rock_gem import plugin
from rock_gem.provider import GemProvider


def test_version_matches_distribution():
    assert rock_gem.__version__ == distribution("rock-gem").version


def test_entry_point_names_the_plugin_module():
    eps = {ep.name: ep.value for ep in distribution("rock-gem").entry_points if ep.group == "rock"}
    assert eps == {"gem": "rock_gem.plugin"}


def test_hooks_register_the_provider_and_rocks_gem_routes():
    registered = {}
    plugin.rock_register_env_providers(lambda name, cls: registered.setdefault(name, cls))
    assert registered == {"gem": GemProvider}
    paths = {(r.method, r.path) for r in plugin.rock_admin_routes()}
    assert {
        ("POST", f"/apis/v1/envs/gem/{op}")
        for op in ("make", "reset", "step", "close", "list", "batch")
    } <= paths
    assert {
        ("POST", "/env/register"),
        ("POST", "/env/get"),
        ("POST", "/env/list"),
        ("POST", "/env/delete"),
        ("GET", "/health"),
    } <= paths
    assert all(not r.envelope for r in plugin.rock_admin_routes())  # ROCK's raw JSON


def test_importing_the_package_loads_no_engine():
    import subprocess
    import sys

    code = "import sys, rock_gem, rock_gem.plugin; print('rock_core.engine.manager' in sys.modules, 'anyio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
