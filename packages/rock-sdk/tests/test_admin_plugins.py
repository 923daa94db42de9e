"""Plugins configured and served by their hosts: a throwaway plugin, installed as a distribution,
gets its own table through ``rock_configure`` and adds routes (``rock_admin_routes``) to a real
admin server (``rock admin serve``, over a socket), and is configured by an embedded engine."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter
from rock_core.testing import NullRuntime, PluginSite

from .conftest import _rock_command

# The embedded test installs its distribution with the `plugin_site` fixture of rock's testing plugin.
pytest_plugins = ["rock_core.testing.fixtures"]

PLUGIN = """
from rock_core import hookimpl
from rock_core.errors import InvalidParameter
from rock_core.routes import AdminRoute, RouteResponse, RouteStream

SETTINGS = {}
CALLS = []


@hookimpl
def rock_configure(config):
    CALLS.append(dict(config))
    if config.get("greeting") == "forbidden":
        raise InvalidParameter("greeting: 'forbidden' is not a greeting", field="greeting", value="forbidden")
    SETTINGS.update(config)


async def echo(request):
    return {
        "name": request.path_params["name"], "body": request.json(), "query": dict(request.query),
        "settings": dict(SETTINGS), "sandboxes": request.engine.count_records(), "tenant": request.tenant,
    }


async def teapot(request):
    return RouteResponse({"detail": "short and stout"}, status=418)


async def wrapped(request):
    return {"ok": True}


async def invalid(request):
    raise InvalidParameter("env_id: unknown", field="env_id")


async def broken(request):
    raise RuntimeError("plugin bug")


async def streamed(request):
    async def chunks():
        for part in (b"one,", b"two,", b"three"):
            yield part

    return RouteStream(chunks(), status=207, headers={"x-parts": "3"}, media_type="text/x-parts")


@hookimpl
def rock_admin_routes():
    return [
        AdminRoute("POST", "/apis/v1/envs/echo/{name}", echo, summary="Echo what came"),
        AdminRoute("GET", "/apis/v1/envs/teapot", teapot),
        AdminRoute("get", "/apis/v1/envs/wrapped", wrapped, envelope=True),
        AdminRoute("POST", "/apis/v1/envs/invalid", invalid),
        AdminRoute("GET", "/apis/v1/envs/broken", broken),
        AdminRoute("GET", "/apis/v1/envs/streamed", streamed),
    ]
"""


@pytest.fixture
def site(tmp_path: Path) -> PluginSite:
    """A folder with the throwaway distribution ``rock-echo`` (entry point ``echo``)."""
    site = PluginSite(tmp_path / "site")
    site.install("rock-echo", source=PLUGIN, module="rock_echo_plugin")
    return site


@pytest.fixture
def served(
    site: PluginSite, tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> Iterator[Any]:
    """An admin with the plugin on its path, its table in the TOML file and one key from the environment."""
    launch_admin, stop_admin = admin_launcher
    env = {"PYTHONPATH": str(site.path), "ROCK_PLUGIN_ECHO_COLOR": "blue"}
    state = tmp_path / "state"
    state.mkdir()
    server = launch_admin(state, config='[plugins.echo]\ngreeting = "hi"\n', env=env)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def test_the_admin_configures_the_plugin_and_serves_its_routes(served: Any) -> None:
    with httpx.Client(base_url=served.url, timeout=60) as http:
        answer = http.post(
            "/apis/v1/envs/echo/sokoban?seed=42", json={"action": "up", "session": "ignored"}
        )
        assert answer.status_code == 200
        assert answer.json() == {
            "name": "sokoban",
            "body": {"action": "up", "session": "ignored"},
            "query": {"seed": "42"},
            "settings": {"greeting": "hi", "color": "blue"},
            "sandboxes": 0,
            "tenant": None,
        }
        teapot = http.get("/apis/v1/envs/teapot")
        assert (teapot.status_code, teapot.json()) == (418, {"detail": "short and stout"})
        wrapped = http.get("/apis/v1/envs/wrapped").json()
        assert wrapped == {
            "status": "Success",
            "message": None,
            "error": None,
            "result": {"ok": True},
        }
        invalid = http.post("/apis/v1/envs/invalid", json={})
        assert invalid.status_code == 400 and invalid.json()["detail"] == "env_id: unknown"
        broken = http.get("/apis/v1/envs/broken")
        assert (broken.status_code, broken.json()) == (500, {"detail": "RuntimeError: plugin bug"})
        streamed = http.get("/apis/v1/envs/streamed")  # a RouteStream: bytes as they come
        assert (streamed.status_code, streamed.content) == (207, b"one,two,three")
        assert streamed.headers["content-type"].startswith("text/x-parts")
        assert streamed.headers["x-parts"] == "3"
        paths = http.get("/openapi.json").json()["paths"]
        assert paths["/apis/v1/envs/echo/{name}"]["post"]["summary"] == "Echo what came"
        metrics = http.get("/metrics").text
        assert 'route="/apis/v1/envs/echo/{name}"' in metrics
    assert "plugin route GET /apis/v1/envs/broken failed" in served.log_file.read_text(
        errors="replace"
    )


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ('[plugins.echo]\ngreeting = "forbidden"\n', "greeting: 'forbidden' is not a greeting"),
        ("[plugins.nope]\nx = 1\n", "plugins.nope: no plugin named 'nope' is installed"),
        ("[plugins]\necho = 3\n", "plugins['echo']: expected an object, got 3"),
    ],
)
def test_a_bad_plugin_table_stops_the_admin_naming_it(
    site: PluginSite, tmp_path: Path, free_port: Any, config: str, said: str
) -> None:
    (tmp_path / "admin.toml").write_text(config)
    env = {**os.environ, "PYTHONPATH": str(site.path), "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_BASE_URL", None)
    done = subprocess.run(
        [
            *_rock_command(),
            "admin",
            "serve",
            "--port",
            str(free_port()),
            "--config",
            str(tmp_path / "admin.toml"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert said in done.stdout + done.stderr


def test_a_variable_naming_no_plugin_stops_the_admin(
    site: PluginSite, tmp_path: Path, free_port: Any
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(site.path),
        "ROCK_ADMIN_STATE_DIR": str(tmp_path),
        "ROCK_PLUGIN_ECHOO_X": "1",
    }
    env.pop("ROCK_BASE_URL", None)
    done = subprocess.run(
        [*_rock_command(), "admin", "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        done.returncode != 0
        and "ROCK_PLUGIN_ECHOO_X: names no installed plugin" in done.stdout + done.stderr
    )


@pytest.mark.anyio
async def test_an_embedded_engine_hands_the_plugin_its_table(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_site.install("rock-echo", source=PLUGIN, module="rock_echo_embedded")
    monkeypatch.setenv("ROCK_PLUGIN_ECHO_COLOR", "green")
    import rock_echo_embedded  # type: ignore[import-not-found]

    async with SandboxManager(
        EngineConfig(plugin_options={"echo": {"greeting": "hello"}}), runtime=NullRuntime()
    ):
        pass
    assert rock_echo_embedded.CALLS == [{"greeting": "hello", "color": "green"}]
    with pytest.raises(InvalidParameter, match="greeting: 'forbidden'"):
        SandboxManager(
            EngineConfig(plugin_options={"echo": {"greeting": "forbidden"}}), runtime=NullRuntime()
        )
    with pytest.raises(InvalidParameter, match=r"plugins\.other: no plugin named 'other'"):
        SandboxManager(EngineConfig(plugin_options={"other": {}}), runtime=NullRuntime())


STORE_AND_ENVS = """
from rock_core import hookimpl
from rock_core.archive import ArchiveStore
from rock_core.envs import Environment, EnvProvider


class MemoryStore(ArchiveStore):
    def __init__(self, bucket="none", **other_settings):
        self.bucket = bucket
        self.closed = False

    async def put(self, sandbox_id, part, data):
        pass

    async def get(self, sandbox_id, part):
        yield b""

    async def exists(self, sandbox_id, part):
        return False

    async def delete(self, sandbox_id):
        pass

    async def aclose(self):
        self.closed = True


class Counter(Environment):
    def __init__(self, start):
        self.value = start

    async def reset(self, seed=None):
        return self.value, {}

    async def step(self, action):
        self.value += 1
        return self.value, 1.0, False, False, {}

    async def close(self):
        pass


class Counters(EnvProvider):
    name = "counters"

    def __init__(self, engine, start="0", **other_settings):
        self.engine = engine
        self.start = int(start)

    def accepts(self, env_id):
        return env_id.startswith("count:")

    async def make(self, env_id, **kwargs):
        return Counter(self.start)


@hookimpl
def rock_register_archive_stores(register):
    register("memory", MemoryStore)


@hookimpl
def rock_register_env_providers(register):
    register("counters", Counters)
"""


@pytest.mark.anyio
async def test_the_engine_builds_its_archive_store_and_environment_providers_from_plugins(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_site.install("rock-kit", source=STORE_AND_ENVS)
    config = EngineConfig(archive_store="memory", plugin_options={"kit": {"bucket": "archives"}})
    async with SandboxManager(config, runtime=NullRuntime()) as engine:
        assert engine.archive_store.bucket == "archives"
        env = await engine.make_env("count:up")
        assert await env.reset() == (0, {})
        assert (await env.step("+1"))[0] == 1
        with pytest.raises(
            InvalidParameter,
            match=r"env_id: no environment provider serves 'game:X' \(providers: counters",
        ) as info:
            await engine.make_env("game:X")
        assert info.value.field == "env_id"
        # A store is configured but this runtime cannot snapshot: auto-archive is refused, saying so.
        with pytest.raises(
            InvalidParameter, match=r"auto_archive_seconds: .*the runtime 'null' cannot snapshot"
        ):
            await engine.start_async(
                SandboxStartRequest(image="python:3.11", auto_archive_seconds=60)
            )
        store = engine.archive_store
    assert store.closed
    # The plugin's variables go on top of its table, for what the engine builds too.
    monkeypatch.setenv("ROCK_PLUGIN_KIT_BUCKET", "from-the-environment")
    async with SandboxManager(config, runtime=NullRuntime()) as engine:
        assert engine.archive_store.bucket == "from-the-environment"
    monkeypatch.delenv("ROCK_PLUGIN_KIT_BUCKET")
    with pytest.raises(
        InvalidParameter, match=r"archive_store: no archive store named 's4' \(installed: memory"
    ) as info:
        SandboxManager(EngineConfig(archive_store="s4"), runtime=NullRuntime())
    assert info.value.field == "archive_store"
    async with SandboxManager(EngineConfig(), runtime=NullRuntime()) as engine:
        with pytest.raises(
            InvalidParameter, match=r"auto_archive_seconds: .*no archive store is configured"
        ):
            await engine.start_async(
                SandboxStartRequest(image="python:3.11", auto_archive_seconds=60)
            )
