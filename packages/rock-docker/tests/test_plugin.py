"""rock finds the Docker runtime through its entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import rock_docker
from rock_core.plugins import Plugins, get_plugin_manager
from rock_docker import DockerRuntime


def test_version_matches_distribution():
    assert rock_docker.__version__ == distribution("rock-docker").version


def test_plugin_manager_finds_the_docker_runtime():
    runtimes = Plugins(get_plugin_manager()).runtimes()
    assert runtimes["docker"] is DockerRuntime


def test_disabling_the_plugin_hides_the_runtime(monkeypatch):
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "rock-docker")
    assert "docker" not in Plugins(get_plugin_manager()).runtimes()


def test_rock_plugins_lists_rock_docker():
    rock = Path(sys.executable).with_name("rock")
    out = subprocess.run(
        [str(rock), "plugins", "--json"], capture_output=True, text=True, check=True
    ).stdout
    [entry] = [p for p in json.loads(out) if p["distribution"] == "rock-docker"]
    assert entry["plugin"] == "docker"
    assert entry["entry_point"] == "rock_docker.plugin"
    assert entry["hooks"] == ["rock_register_runtimes"]
    assert entry["blocked"] is False
