"""One test per hook, each proving through pluggy's call monitoring that a plugin's implementation ran.

``@exercises(hook)`` declares which hook a test is about; the ``calls`` fixture records every hook
call that reached at least one implementation, and fails the test at teardown when the declared
hook was never called. The last test checks that the declared hooks are exactly the specs, so a
new hook without a test fails the suite.

Those tests call the hooks through the :class:`~rock_core.plugins.Plugins` facade. :data:`HOSTS`
names, for every hook, the tests that call it through the program that calls it for real (the
engine, the admin over a socket, the ``rock`` command as a subprocess, the SDK), each with a
throwaway plugin installed as a distribution; a test checks that every hook has them.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import click.testing
import pluggy
import pytest

from rock_core import hookimpl, hookspecs
from rock_core.archive import ArchiveStore
from rock_core.engine.store import SqliteRecordStore
from rock_core.envs import Environment, EnvProvider
from rock_core.plugins import Plugins, get_plugin_manager
from rock_core.speedup import SpeedupStrategy
from rock_core.states import Event, State
from rock_core.testing import NullRuntime

_F = TypeVar("_F", bound=Callable[..., Any])
EXERCISED: dict[str, list[str]] = {}


def exercises(hook: str) -> Callable[[_F], _F]:
    """Declare that the decorated test calls ``hook`` on a plugin (checked by the ``calls`` fixture)."""

    def mark(test: _F) -> _F:
        EXERCISED.setdefault(hook, []).append(test.__name__)
        test.exercises = hook  # type: ignore[attr-defined]
        return test

    return mark


class HookCalls:
    """Records the hooks called on the managers it watches, when at least one plugin implements them."""

    def __init__(self) -> None:
        self.called: set[str] = set()

    def plugins(self, *plugins: object) -> Plugins:
        pm = get_plugin_manager(load_entrypoints=False, plugins=plugins)
        pm.add_hookcall_monitoring(self._before, lambda *args: None)
        return Plugins(pm)

    def _before(self, hook_name: str, impls: list[pluggy.HookImpl], kwargs: dict[str, Any]) -> None:
        if impls:
            self.called.add(hook_name)


def check_exercised(test: Callable[..., Any], recorder: HookCalls) -> None:
    """Fail unless ``test`` declared a hook with @exercises and ``recorder`` saw it called."""
    hook = getattr(test, "exercises", None)
    assert hook is not None, f"{test.__name__} uses `calls` without @exercises"
    assert hook in recorder.called, f"{test.__name__} declares {hook} but never called it"


@pytest.fixture
def calls(request: pytest.FixtureRequest) -> Iterator[HookCalls]:
    recorder = HookCalls()
    yield recorder
    check_exercised(request.function, recorder)


# ---------------------------------------------------------------------------------------------
# tiny concrete backends (and rock_core.testing.NullRuntime)


class MemoryStore(ArchiveStore):
    name = "memory"

    async def put(self, sandbox_id: str, part: str, data: Any) -> None:
        pass

    async def get(self, sandbox_id: str, part: str) -> Any:
        raise AssertionError

    async def exists(self, sandbox_id: str, part: str) -> bool:
        return False

    async def delete(self, sandbox_id: str) -> None:
        pass


class Pip(SpeedupStrategy):
    name = "pip"

    def precheck_command(self) -> str:
        return "pip --version"

    def script(self, value: str) -> str:
        return f"pip config set global.index-url {value}/pypi/simple/"


class Games(EnvProvider):
    name = "games"

    def accepts(self, env_id: str) -> bool:
        return env_id.startswith("game:")

    async def make(self, env_id: str, **kwargs: Any) -> Environment:
        raise AssertionError


# ---------------------------------------------------------------------------------------------
# one test per hook


@exercises("rock_register_runtimes")
def test_rock_register_runtimes(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_register_runtimes(self, register: hookspecs.Register) -> None:
            register("null", NullRuntime)

    assert calls.plugins(Plugin()).runtimes() == {"null": NullRuntime}


@exercises("rock_register_archive_stores")
def test_rock_register_archive_stores(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_register_archive_stores(self, register: hookspecs.Register) -> None:
            register("memory", MemoryStore)

    assert calls.plugins(Plugin()).archive_stores() == {"memory": MemoryStore}


@exercises("rock_register_record_stores")
def test_rock_register_record_stores(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_register_record_stores(self, register: hookspecs.Register) -> None:
            register("sqlite-again", SqliteRecordStore)

    assert calls.plugins(Plugin()).record_stores() == {"sqlite-again": SqliteRecordStore}


@exercises("rock_register_speedups")
def test_rock_register_speedups(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_register_speedups(self, register: hookspecs.Register) -> None:
            register("pip", Pip)

    strategies = calls.plugins(Plugin()).speedups()
    assert strategies == {"pip": Pip}
    assert (
        strategies["pip"]().script("http://mirror")
        == "pip config set global.index-url http://mirror/pypi/simple/"
    )


@exercises("rock_register_env_providers")
def test_rock_register_env_providers(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_register_env_providers(self, register: hookspecs.Register) -> None:
            register("games", Games)

    providers = calls.plugins(Plugin()).env_providers()
    assert providers == {"games": Games}
    assert providers["games"]().accepts("game:Sokoban-v0-easy")


@exercises("rock_sandbox_transition")
def test_rock_sandbox_transition(calls: HookCalls) -> None:
    seen: list[tuple[object, Event, State, State]] = []

    class Plugin:
        @hookimpl
        def rock_sandbox_transition(
            self, record: object, event: Event, old: State, new: State
        ) -> None:
            seen.append((record, event, old, new))

    record = object()
    calls.plugins(Plugin()).notify_transition(record, Event.STOP, State.RUNNING, State.STOPPED)
    assert seen == [(record, Event.STOP, State.RUNNING, State.STOPPED)]


@exercises("rock_admin_routes")
def test_rock_admin_routes(calls: HookCalls) -> None:
    class First:
        @hookimpl
        def rock_admin_routes(self) -> list[str]:
            return ["/first/a", "/first/b"]

    class Nothing:
        @hookimpl
        def rock_admin_routes(self) -> None:
            return None

    class Second:
        @hookimpl
        def rock_admin_routes(self) -> tuple[str, ...]:
            return ("/second",)

    routes = calls.plugins(First(), Nothing(), Second()).admin_routes()
    assert sorted(routes) == ["/first/a", "/first/b", "/second"]


@exercises("rock_cli_commands")
def test_rock_cli_commands(calls: HookCalls) -> None:
    class Plugin:
        @hookimpl
        def rock_cli_commands(self, cli: click.Group) -> None:
            @cli.command()
            def greet() -> None:
                click.echo("hi")

    group = click.Group("rock")
    calls.plugins(Plugin()).add_cli_commands(group)
    result = click.testing.CliRunner().invoke(group, ["greet"])
    assert result.output == "hi\n"


@exercises("rock_configure")
def test_rock_configure(calls: HookCalls) -> None:
    settings: list[Any] = []

    class Plugin:
        @hookimpl
        def rock_configure(self, config: Any) -> None:
            settings.append(dict(config))

    calls.plugins(("plugin", Plugin()), ("other", Plugin())).configure({"plugin": {"level": 7}})
    assert sorted(settings, key=len) == [{}, {"level": 7}]  # each its own table; none: empty


# ---------------------------------------------------------------------------------------------


def _specs() -> set[str]:
    return {
        name
        for name, fn in vars(hookspecs).items()
        if inspect.isfunction(fn) and getattr(fn, "rock_spec", None) is not None
    }


def test_every_hookspec_has_an_exercising_test() -> None:
    assert set(EXERCISED) == _specs()


_ENGINE_HOOKS = "packages/rock-core/tests/engine/test_hooks_in_the_engine.py"
_ADMIN_PLUGINS = "packages/rock-sdk/tests/test_admin_plugins.py"

#: Every hook, and the tests (``path::name`` from the repository's root) that call it through its
#: real host with a throwaway plugin installed as a distribution.
HOSTS: dict[str, list[str]] = {
    # the engine builds its runtime from the plugin named by EngineConfig.runtime
    "rock_register_runtimes": [
        f"{_ENGINE_HOOKS}::test_the_engine_configures_the_plugin_and_places_sandboxes_with_its_runtime",
    ],
    # the engine builds its archive store and environment providers from plugins
    "rock_register_archive_stores": [
        f"{_ADMIN_PLUGINS}::test_the_engine_builds_its_archive_store_and_environment_providers_from_plugins",
    ],
    # the engine builds its record store from the plugin serving the scheme of EngineConfig.store
    "rock_register_record_stores": [
        "packages/rock-core/tests/engine/test_record_store_plugin.py::test_the_engine_keeps_its_records_in_the_store_a_plugin_registered",
    ],
    "rock_register_env_providers": [
        f"{_ADMIN_PLUGINS}::test_the_engine_builds_its_archive_store_and_environment_providers_from_plugins",
    ],
    # the SDK's sandbox.network.speedup runs a strategy a plugin registered
    "rock_register_speedups": [
        "packages/rock-sdk/tests/test_sdk_speedup.py::test_a_third_party_strategy_is_found_and_run_the_same_way",
    ],
    # the engine, on every change of state it makes (and not on a no-op)
    "rock_sandbox_transition": [
        f"{_ENGINE_HOOKS}::test_the_engine_announces_each_transition_once_after_storing_it",
        f"{_ENGINE_HOOKS}::test_two_deletes_at_once_delete_and_announce_once",
    ],
    # the admin server (`rock admin serve`, over a socket)
    "rock_admin_routes": [
        f"{_ADMIN_PLUGINS}::test_the_admin_configures_the_plugin_and_serves_its_routes"
    ],
    # the `rock` command, run as a subprocess
    "rock_cli_commands": [
        "packages/rock-sdk/tests/test_cli_plugins.py::test_a_plugin_command_runs"
    ],
    # the admin, and an embedded engine
    "rock_configure": [
        f"{_ADMIN_PLUGINS}::test_the_admin_configures_the_plugin_and_serves_its_routes",
        f"{_ADMIN_PLUGINS}::test_an_embedded_engine_hands_the_plugin_its_table",
        f"{_ENGINE_HOOKS}::test_the_engine_configures_the_plugin_and_places_sandboxes_with_its_runtime",
    ],
}


def test_every_hook_is_tested_through_its_host() -> None:
    assert set(HOSTS) == _specs()
    root = Path(__file__).resolve().parents[3]
    for hook, tests in HOSTS.items():
        for test in tests:
            path, name = test.split("::")
            tree = ast.parse((root / path).read_text(encoding="utf-8"))
            defined = {
                node.name
                for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            assert name in defined, f"{hook}: {test} does not exist"
            source = (root / path).read_text(encoding="utf-8")
            assert f"def {hook}(" in source, f"{hook}: {path} installs no plugin implementing it"


def test_a_test_that_does_not_call_its_hook_is_caught() -> None:
    # The check above is only worth something if @exercises is enforced.
    def test_lazy() -> None:
        pass

    declared = exercises("rock_configure")(test_lazy)
    EXERCISED["rock_configure"].remove("test_lazy")  # keep the registry to real tests
    recorder = HookCalls()
    recorder.plugins()  # builds a manager, calls nothing
    with pytest.raises(AssertionError, match="declares rock_configure but never called it"):
        check_exercised(declared, recorder)

    class Plugin:
        @hookimpl
        def rock_configure(self) -> None:
            pass

    recorder.plugins()  # a manager without an implementation does not count either
    recorder.plugins().configure({})
    with pytest.raises(AssertionError):
        check_exercised(declared, recorder)
    recorder.plugins(Plugin()).configure({})
    check_exercised(declared, recorder)
