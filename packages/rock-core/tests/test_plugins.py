"""The plugin manager and the Plugins facade, against real (temporary) installed distributions."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import click
import pytest

from rock_core import hookimpl
from rock_core.errors import InvalidParameter, PluginError
from rock_core.plugins import PluginInfo, Plugins, get_plugin_manager, plugin_tables
from rock_core.runtime import Runtime, UnitHandle
from rock_core.speedup import SpeedupStrategy
from rock_core.testing import NullRuntime, PluginSite

# The tests install distributions with the `plugin_site` fixture of rock's testing plugin.
pytest_plugins = ["rock_core.testing.fixtures"]

RUNTIME_SOURCE = """
from rock_core import hookimpl
from rock_core.testing import NullRuntime


class {cls}(NullRuntime):
    name = {runtime!r}


@hookimpl
def rock_register_runtimes(register):
    register({runtime!r}, {cls})
"""


def _by_name(infos: list[PluginInfo]) -> dict[str, PluginInfo]:
    return {info.name: info for info in infos}


# ---------------------------------------------------------------------------------------------
# building the manager


def test_each_call_builds_a_fresh_manager() -> None:
    class One:
        @hookimpl
        def rock_admin_routes(self) -> list[str]:
            return ["/one"]

    first = get_plugin_manager(load_entrypoints=False, plugins=[One()])
    second = get_plugin_manager(load_entrypoints=False)
    assert first is not second
    assert Plugins(first).admin_routes() == ["/one"]
    assert Plugins(second).admin_routes() == []


def test_importing_rock_loads_no_plugin(tmp_path: Path) -> None:
    # A plugin that cannot even be imported must not break `import rock_core.plugins`: the
    # manager is only built when asked for.
    site = PluginSite(tmp_path)
    site.install("rock-broken", source="raise RuntimeError('boom at import')\n")
    code = (
        "import rock_core, rock_core.plugins\n"
        "print('imported')\n"
        "rock_core.plugins.get_plugin_manager()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(site.path), "PATH": "", "ROCK_PLUGINS": "broken"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout == "imported\n"
    assert "PluginError" in proc.stderr and "boom at import" in proc.stderr


def test_entry_point_plugins_load_and_are_described(plugin_site: PluginSite) -> None:
    module = plugin_site.install(
        "rock-alpha", "2.5.1", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    plugins = Plugins(get_plugin_manager())
    assert [cls.__name__ for cls in plugins.runtimes().values()] == ["AlphaRuntime"]
    assert plugins.describe() == [
        PluginInfo(
            name="alpha",
            distribution="rock-alpha",
            version="2.5.1",
            entry_point=module,
            hooks=("rock_register_runtimes",),
            blocked=False,
        )
    ]


def test_load_entrypoints_false_ignores_installed_plugins(plugin_site: PluginSite) -> None:
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    plugins = Plugins(get_plugin_manager(load_entrypoints=False))
    assert plugins.runtimes() == {}
    assert plugins.describe() == []


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", "all", "*"])
def test_rock_disable_plugins_truthy_loads_no_entry_point(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    module = plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", value)
    plugins = Plugins(get_plugin_manager())
    assert plugins.runtimes() == {}
    assert _by_name(plugins.describe())["alpha"].blocked
    assert module not in sys.modules  # blocked plugins are never imported


@pytest.mark.parametrize("value", ["0", "false", "no", "off", ""])
def test_rock_disable_plugins_falsy_loads_everything(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", value)
    assert set(Plugins(get_plugin_manager()).runtimes()) == {"alpha"}


@pytest.mark.parametrize("value", ["alpha", "rock-alpha", "Rock_Alpha", " other , alpha "])
def test_rock_disable_plugins_list_blocks_by_entry_point_or_distribution_name(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    plugin_site.install(
        "rock-beta", source=RUNTIME_SOURCE.format(cls="BetaRuntime", runtime="beta")
    )
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", value)
    plugins = Plugins(get_plugin_manager())
    assert set(plugins.runtimes()) == {"beta"}
    described = _by_name(plugins.describe())
    assert described["alpha"].blocked and described["alpha"].hooks == ()
    assert not described["beta"].blocked


@pytest.mark.parametrize("value", ["beta", "rock-beta", "beta,gamma"])
def test_rock_plugins_is_an_allow_list(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    alpha = plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    plugin_site.install(
        "rock-beta", source=RUNTIME_SOURCE.format(cls="BetaRuntime", runtime="beta")
    )
    monkeypatch.setenv("ROCK_PLUGINS", value)
    plugins = Plugins(get_plugin_manager())
    assert set(plugins.runtimes()) == {"beta"}
    assert _by_name(plugins.describe())["alpha"].blocked
    assert alpha not in sys.modules


def test_rock_disable_plugins_wins_over_the_allow_list(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_PLUGINS", "alpha")
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "alpha")
    assert Plugins(get_plugin_manager()).runtimes() == {}


def test_environment_variables_do_not_filter_plugins_given_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Given:
        @hookimpl
        def rock_admin_routes(self) -> list[str]:
            return ["/given"]

    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "1")
    monkeypatch.setenv("ROCK_PLUGINS", "nothing")
    assert Plugins(get_plugin_manager(plugins=[Given()])).admin_routes() == ["/given"]


def test_a_plugin_that_fails_to_import_names_entry_point_and_distribution(
    plugin_site: PluginSite,
) -> None:
    plugin_site.install("rock-broken", "0.0.7", source="import rock_no_such_module_anywhere\n")
    with pytest.raises(PluginError) as info:
        get_plugin_manager()
    message = str(info.value)
    assert "'broken'" in message and "rock-broken 0.0.7" in message
    assert "ROCK_DISABLE_PLUGINS=broken" in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_a_broken_plugin_can_be_disabled(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_site.install("rock-broken", source="raise RuntimeError('boom')\n")
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_DISABLE_PLUGINS", "broken")
    assert set(Plugins(get_plugin_manager()).runtimes()) == {"alpha"}


def test_two_distributions_announcing_one_plugin_name_is_an_error(plugin_site: PluginSite) -> None:
    plugin_site.install("rock-one", entry_points={"same": "{module}"})
    plugin_site.install("rock-two", entry_points={"same": "{module}"})
    with pytest.raises(
        PluginError, match=r"'same'.*rock-one 1.0.*rock-two 1.0|'same'.*rock-two 1.0.*rock-one 1.0"
    ):
        get_plugin_manager()


def test_a_misspelt_hook_fails_loading(plugin_site: PluginSite) -> None:
    plugin_site.install(
        "rock-typo",
        "3.0",
        source="from rock_core import hookimpl\n\n@hookimpl\ndef rock_register_runtime(register):\n    pass\n",
    )
    with pytest.raises(
        PluginError, match=r"rock plugin 'typo' from rock-typo 3.0.*rock_register_runtime"
    ):
        get_plugin_manager()


def test_a_hook_asking_for_a_parameter_the_spec_lacks_fails_loading() -> None:
    class Wrong:
        @hookimpl
        def rock_register_runtimes(self, register: object, engine: object) -> None:
            pass

    with pytest.raises(PluginError, match="engine"):
        get_plugin_manager(load_entrypoints=False, plugins=[Wrong()])


def test_trace_shows_loading_and_hook_calls_on_stderr(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin_site.install(
        "rock-alpha", "2.0", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_TRACE_PLUGINS", "1")
    Plugins(get_plugin_manager()).runtimes()
    err = capsys.readouterr().err
    assert "loaded rock plugin 'alpha' from rock-alpha 2.0" in err
    assert "rock_register_runtimes" in err
    assert "finish rock_register_runtimes" in err


def test_no_trace_without_rock_trace_plugins(
    plugin_site: PluginSite, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin_site.install(
        "rock-alpha", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="alpha")
    )
    monkeypatch.setenv("ROCK_TRACE_PLUGINS", "0")
    Plugins(get_plugin_manager()).runtimes()
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------
# the facade's checks on what plugins register


def _registering(name: object, cls: object, hook: str = "rock_register_runtimes") -> object:
    def impl(register):  # type: ignore[no-untyped-def]
        register(name, cls)

    impl.__name__ = hook
    return type("Registering", (), {hook: staticmethod(hookimpl(impl))})()


def test_registering_the_same_name_twice_names_both_distributions(plugin_site: PluginSite) -> None:
    plugin_site.install(
        "rock-alpha", "1.1", source=RUNTIME_SOURCE.format(cls="AlphaRuntime", runtime="same")
    )
    plugin_site.install(
        "rock-beta", "2.2", source=RUNTIME_SOURCE.format(cls="BetaRuntime", runtime="same")
    )
    plugins = Plugins(get_plugin_manager())
    with pytest.raises(PluginError) as info:
        plugins.runtimes()
    assert "runtime 'same' is registered twice" in str(info.value)
    assert "rock-alpha 1.1" in str(info.value) and "rock-beta 2.2" in str(info.value)


def test_registering_an_instance_instead_of_a_class_is_an_error() -> None:
    plugins = Plugins(
        get_plugin_manager(load_entrypoints=False, plugins=[_registering("fine", NullRuntime())])
    )
    with pytest.raises(PluginError, match="register the class itself"):
        plugins.runtimes()


def test_registering_a_class_of_the_wrong_kind_is_an_error() -> None:
    plugins = Plugins(
        get_plugin_manager(load_entrypoints=False, plugins=[_registering("fine", dict)])
    )
    with pytest.raises(PluginError, match=r"not a subclass of rock_core.runtime.Runtime"):
        plugins.runtimes()
    speedup = Plugins(
        get_plugin_manager(
            load_entrypoints=False,
            plugins=[_registering("apt", NullRuntime, "rock_register_speedups")],
        )
    )
    with pytest.raises(PluginError, match=r"not a subclass of rock_core.speedup.SpeedupStrategy"):
        speedup.speedups()


def test_registering_an_abstract_class_lists_what_is_missing() -> None:
    class Half(Runtime):
        name = "half"

        async def create(self, spec: object, *, labels: object, rocklet_token: str) -> UnitHandle:
            raise AssertionError

    plugins = Plugins(
        get_plugin_manager(load_entrypoints=False, plugins=[_registering("half", Half)])
    )
    with pytest.raises(
        PluginError, match=r"does not implement: inspect, list, logs, remove, start, stop"
    ):
        plugins.runtimes()


@pytest.mark.parametrize("name", ["", None, 3])
def test_registering_under_a_bad_name_is_an_error(name: object) -> None:
    plugins = Plugins(
        get_plugin_manager(load_entrypoints=False, plugins=[_registering(name, NullRuntime)])
    )
    with pytest.raises(PluginError, match="names are non-empty strings"):
        plugins.runtimes()


def test_an_exception_in_a_hook_becomes_a_plugin_error_naming_the_plugin(
    plugin_site: PluginSite,
) -> None:
    plugin_site.install(
        "rock-faulty",
        "0.2",
        source="from rock_core import hookimpl\n\n@hookimpl\ndef rock_register_speedups(register):\n    {}['x']\n",
    )
    plugins = Plugins(get_plugin_manager())
    with pytest.raises(
        PluginError,
        match=r"rock plugin 'faulty' from rock-faulty 0.2 failed in rock_register_speedups: KeyError",
    ) as info:
        plugins.speedups()
    assert isinstance(info.value.__cause__, KeyError)


def test_rock_errors_from_a_plugin_pass_through_unchanged() -> None:
    class Strict:
        @hookimpl
        def rock_configure(self, config: object) -> None:
            raise InvalidParameter(
                "docker.pull must be missing|always|never", field="docker.pull", value="sometimes"
            )

    with pytest.raises(InvalidParameter) as info:
        Plugins(
            get_plugin_manager(load_entrypoints=False, plugins=[("docker", Strict())])
        ).configure({"docker": {"pull": "sometimes"}})
    assert info.value.field == "docker.pull"


def test_a_failing_transition_listener_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[str] = []

    class Failing:
        @hookimpl
        def rock_sandbox_transition(self, record: object) -> None:
            raise RuntimeError("listener down")

    class Listening:
        @hookimpl
        def rock_sandbox_transition(self, new: object) -> None:
            heard.append(str(new))

    # Listening registered first is called last, after Failing raised.
    plugins = Plugins(get_plugin_manager(load_entrypoints=False, plugins=[Listening(), Failing()]))
    with caplog.at_level(logging.ERROR, logger="rock.plugins"):
        plugins.notify_transition(record=object(), event="stop", old="running", new="stopped")
    assert heard == ["stopped"]
    assert "failed in rock_sandbox_transition" in caplog.text and "listener down" in caplog.text


def test_admin_routes_must_be_a_list() -> None:
    class Single:
        @hookimpl
        def rock_admin_routes(self) -> str:
            return "/just-a-string"

    plugins = Plugins(get_plugin_manager(load_entrypoints=False, plugins=[Single()]))
    with pytest.raises(PluginError, match="return a list of routes or None"):
        plugins.admin_routes()


def test_configure_hands_out_a_read_only_mapping() -> None:
    seen: list[object] = []

    class Reader:
        @hookimpl
        def rock_configure(self, config: dict[str, object]) -> None:
            seen.append(dict(config))
            config["level"] = "changed"  # type: ignore[index]

    config = {"reader": {"level": 3}}
    with pytest.raises(PluginError, match="TypeError"):
        Plugins(
            get_plugin_manager(load_entrypoints=False, plugins=[("reader", Reader())])
        ).configure(config)
    assert seen == [{"level": 3}]
    assert config == {"reader": {"level": 3}}


def test_a_table_for_a_plugin_that_is_not_loaded_is_refused_naming_it() -> None:
    plugins = Plugins(get_plugin_manager(load_entrypoints=False, plugins=[("known", object())]))
    with pytest.raises(
        InvalidParameter,
        match=r"plugins\.unknwon: no plugin named 'unknwon' is installed \(loaded: known\)",
    ) as info:
        plugins.configure({"unknwon": {"x": 1}})
    assert info.value.field == "plugins.unknwon"


def test_plugin_tables_take_environment_variables_on_top() -> None:
    tables = plugin_tables(
        {"archive-s3": {"bucket": "a", "region": "r"}},
        {"ROCK_PLUGIN_ARCHIVE_S3_BUCKET": "b", "ROCK_PLUGIN_S3_KEY": "k", "PATH": "/bin"},
        ["archive-s3", "s3"],
    )
    assert tables == {"archive-s3": {"bucket": "b", "region": "r"}, "s3": {"key": "k"}}
    with pytest.raises(
        InvalidParameter, match=r"ROCK_PLUGIN_NOPE_X: names no installed plugin"
    ) as info:
        plugin_tables({}, {"ROCK_PLUGIN_NOPE_X": "1"}, ["archive-s3"])
    assert info.value.field == "ROCK_PLUGIN_NOPE_X"


def test_add_cli_commands_puts_plugin_commands_in_the_group() -> None:
    class Commands:
        @hookimpl
        def rock_cli_commands(self, cli: click.Group) -> None:
            cli.add_command(click.Command("one", callback=lambda: None))
            cli.add_command(click.Command("two", callback=lambda: None))

    group = click.Group("rock")
    Plugins(get_plugin_manager(load_entrypoints=False, plugins=[Commands()])).add_cli_commands(
        group
    )
    assert sorted(group.commands) == ["one", "two"]


def test_describe_lists_in_process_plugins_with_their_hooks() -> None:
    class Both:
        @hookimpl
        def rock_admin_routes(self) -> None:
            return None

        @hookimpl
        def rock_configure(self) -> None:
            pass

    pm = get_plugin_manager(load_entrypoints=False, plugins=[Both()])
    (info,) = Plugins(pm).describe()
    assert info.hooks == ("rock_admin_routes", "rock_configure")
    assert (info.distribution, info.version, info.entry_point, info.blocked) == (
        None,
        None,
        None,
        False,
    )


def test_speedup_registration_roundtrip() -> None:
    class Apt(SpeedupStrategy):
        name = "apt"

        def precheck_command(self) -> str:
            return "test -f /etc/debian_version"

        def script(self, value: str) -> str:
            return f"echo {value}"

    plugins = Plugins(
        get_plugin_manager(
            load_entrypoints=False, plugins=[_registering("apt", Apt, "rock_register_speedups")]
        )
    )
    assert plugins.speedups() == {"apt": Apt}
