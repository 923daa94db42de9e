"""rock's plugin manager, and :class:`Plugins`, the typed way the rest of rock calls hooks.

:func:`get_plugin_manager` builds a fresh :class:`pluggy.PluginManager` each time it is called
(never at import time): it adds the specs of :mod:`rock_core.hookspecs`, registers the plugin
objects it is given, loads the modules announced in the entry-point group ``rock``, and ends with
``check_pending()`` so that a misspelt hook fails at load time, not silently. Tests build their own
manager with exactly the plugins they want (``load_entrypoints=False, plugins=[...]``).

Three environment variables steer entry-point loading (they never affect ``plugins=``):

``ROCK_DISABLE_PLUGINS``
    ``1``/``true``/``yes``/``on``/``all``/``*`` loads no entry point at all; ``0``/``false``/
    ``no``/``off`` or empty loads them all; anything else is a comma-separated list of plugins
    not to load. A plugin is named by its entry-point name (``docker``) or by its distribution
    name (``rock-docker``; ``-``, ``_`` and ``.`` are the same and case does not matter).
``ROCK_PLUGINS``
    A comma-separated allow-list, with the same names: when set and not empty, every other
    entry point is blocked. ``ROCK_DISABLE_PLUGINS`` wins over it.
``ROCK_TRACE_PLUGINS``
    Any value but empty/``0``/``false``/``no``/``off`` writes a trace of plugin loading and of
    every hook call (hook, arguments, results) to standard error.

Blocked entry points are not imported; they stay visible in :meth:`Plugins.describe` so that
``rock plugins`` shows what is installed but switched off.

Each plugin has a configuration table of its own, named like its entry point (``archive-s3``):
``EngineConfig(plugin_options={"archive-s3": {...}})``, ``[plugins.archive-s3]`` in the admin's
TOML file, and ``ROCK_PLUGIN_<NAME>_<KEY>`` variables (``ROCK_PLUGIN_ARCHIVE_S3_BUCKET=b``; the
name upper-cased with ``-`` as ``_``), which win. :func:`plugin_tables` merges them;
:meth:`Plugins.configure` hands each plugin its own table through ``rock_configure``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import itertools
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from rock_core import hookspecs
from rock_core.archive import ArchiveStore
from rock_core.envs import EnvProvider
from rock_core.errors import InvalidParameter, PluginError, RockError
from rock_core.records import RecordStore
from rock_core.runtime import Runtime
from rock_core.speedup import SpeedupStrategy

if TYPE_CHECKING:
    import click

    from rock_core.models import SandboxRecord
    from rock_core.states import Event, State

__all__ = [
    "PLUGIN_ENV_PREFIX",
    "plugin_tables",
    "ALLOW_ENV",
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "TRACE_ENV",
    "PluginInfo",
    "Plugins",
    "RockPluginManager",
    "get_plugin_manager",
]

#: The entry-point group rock plugins are announced in.
ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
DISABLE_ENV = "ROCK_DISABLE_PLUGINS"
ALLOW_ENV = "ROCK_PLUGINS"
TRACE_ENV = "ROCK_TRACE_PLUGINS"

log = logging.getLogger("rock.plugins")

_ALL = frozenset({"1", "true", "yes", "on", "all", "*"})
_NONE = frozenset({"", "0", "false", "no", "off"})


@attrs.frozen
class _EntryPoint:
    """One entry point of the ``rock`` group as the manager saw it."""

    name: str
    value: str
    distribution: str | None
    version: str | None
    blocked: bool

    def describe(self) -> str:
        if self.distribution is None:
            return f"rock plugin {self.name!r} ({self.value})"
        return f"rock plugin {self.name!r} from {self.distribution} {self.version}"


@attrs.frozen
class PluginInfo:
    """What ``rock plugins`` shows about one plugin.

    :param name: the entry-point name, or the registered name of a plugin given in-process.
    :param distribution: the distribution that announced it (``None`` for in-process plugins).
    :param version: that distribution's version.
    :param entry_point: the entry point's target (``"rock_docker.plugin"``), if any.
    :param hooks: the rock hooks the plugin implements, sorted; empty when blocked.
    :param blocked: whether ``ROCK_DISABLE_PLUGINS`` / ``ROCK_PLUGINS`` kept it from loading.
    """

    name: str
    distribution: str | None
    version: str | None
    entry_point: str | None
    hooks: tuple[str, ...]
    blocked: bool


class RockPluginManager(pluggy.PluginManager):
    """A :class:`pluggy.PluginManager` for rock's hooks that remembers the entry points it saw."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        # In load order, blocked ones included, so that describe() can show them.
        self.entry_points: list[_EntryPoint] = []
        # Entry-point name -> the object it loaded (registered under that name unless it was
        # also given in plugins=, then under pluggy's default name).
        self.loaded: dict[str, object] = {}

    def describe_plugin(self, name: str) -> str:
        """Name a registered plugin for an error message, with its distribution when known."""
        for ep in self.entry_points:
            if ep.name == name and not ep.blocked:
                return ep.describe()
        return _describe_in_process(self, name)


def _describe_in_process(pm: pluggy.PluginManager, name: str) -> str:
    plugin = pm.get_plugin(name)
    if plugin is None or isinstance(plugin, types.ModuleType):
        return f"rock plugin {name!r}"
    return f"rock plugin {plugin!r}"  # pluggy names other objects by id(), which says nothing


def get_plugin_manager(
    load_entrypoints: bool = True, plugins: Iterable[object] = ()
) -> RockPluginManager:
    """Build a new plugin manager for rock's hooks.

    :param load_entrypoints: load the plugins announced in the entry-point group ``rock``,
        filtered by ``ROCK_DISABLE_PLUGINS`` and ``ROCK_PLUGINS``.
    :param plugins: plugin objects (modules, classes, instances) to register first, under
        pluggy's default names, or ``(name, object)`` pairs to give a plugin a name (its
        configuration table's); the environment variables do not filter them.
    :raises rock_core.errors.PluginError: a plugin failed to import, two distributions announce
        the same entry-point name, or a plugin implements a hook rock does not specify (or with
        parameters its spec does not have). The message names the entry point and distribution.
    """
    pm = RockPluginManager()
    pm.add_hookspecs(hookspecs)
    if _truthy(os.environ.get(TRACE_ENV, "")):
        pm.trace.root.setwriter(_write_trace)
        pm.enable_tracing()
    for plugin in plugins:
        name = None
        if isinstance(plugin, tuple) and len(plugin) == 2 and isinstance(plugin[0], str):
            name, plugin = plugin
        _register(pm, plugin, name, f"plugin {plugin!r}")
    if load_entrypoints:
        _load_entry_points(pm, _Filter.from_environ(os.environ))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        where = pm.describe_plugin(pm.get_name(exc.plugin) or repr(exc.plugin))
        raise PluginError(
            f"{where} implements a hook rock does not specify ({exc}); check its name against rock_core.hookspecs",
            attempted="load plugins",
        ) from exc
    return pm


def _truthy(value: str) -> bool:
    return value.strip().lower() not in _NONE


def _normalize(name: str) -> str:
    # PEP 503 normalization, so that "rock_docker", "Rock.Docker" and "rock-docker" are one name.
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(value: str) -> frozenset[str]:
    return frozenset(_normalize(part.strip()) for part in value.split(",") if part.strip())


@attrs.frozen
class _Filter:
    """Which entry points may load, read from ``ROCK_DISABLE_PLUGINS`` and ``ROCK_PLUGINS``."""

    disable_all: bool
    disabled: frozenset[str]
    allowed: frozenset[str] | None  # None: no allow-list

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> _Filter:
        disable = environ.get(DISABLE_ENV, "").strip().lower()
        allow = environ.get(ALLOW_ENV, "")
        return cls(
            disable_all=disable in _ALL,
            disabled=frozenset() if disable in _NONE or disable in _ALL else _names(disable),
            allowed=_names(allow) or None,
        )

    def blocks(self, entry_point: str, distribution: str | None) -> bool:
        names = {_normalize(entry_point)} | ({_normalize(distribution)} if distribution else set())
        if self.disable_all or names & self.disabled:
            return True
        return self.allowed is not None and not names & self.allowed


def _load_entry_points(pm: RockPluginManager, filt: _Filter) -> None:
    trace = pm.trace.root.get("plugins")
    # Sorted by name so that the call order of hooks does not depend on sys.path order.
    found = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    records = []
    for ep in found:
        dist_name = ep.dist.name if ep.dist is not None else None
        records.append(
            _EntryPoint(
                name=ep.name,
                value=ep.value,
                distribution=dist_name,
                version=ep.dist.version if ep.dist is not None else None,
                blocked=filt.blocks(ep.name, dist_name),
            )
        )
    if not filt.disable_all:
        # Checked before anything loads: pluggy names plugins by entry-point name, so blocking
        # one of two same-named entry points would also unregister the other.
        for first, second in itertools.pairwise(records):
            if first.name == second.name:
                raise PluginError(
                    f"two distributions announce the rock plugin {first.name!r}: {first.distribution} "
                    f"{first.version} and {second.distribution} {second.version}; uninstall one of them",
                    attempted="load plugins",
                )
    for ep, record in zip(found, records):
        pm.entry_points.append(record)
        if record.blocked:
            pm.set_blocked(ep.name)
            trace(f"blocked {record.describe()}")
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            raise PluginError(
                f"{record.describe()} failed to import {ep.value!r}: {type(exc).__name__}: {exc} "
                f"(skip it with {DISABLE_ENV}={ep.name})",
                attempted="load plugins",
            ) from exc
        pm.loaded[ep.name] = plugin
        if pm.is_registered(plugin):
            continue  # already given in plugins=
        _register(pm, plugin, ep.name, record.describe())
        trace(f"loaded {record.describe()} ({ep.value})")


def _register(pm: pluggy.PluginManager, plugin: object, name: str | None, where: str) -> None:
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"{where} has an invalid hook implementation: {exc}", attempted="load plugins"
        ) from exc
    except ValueError as exc:  # pluggy: name or object already registered
        raise PluginError(f"{where} cannot be registered: {exc}", attempted="load plugins") from exc


def _write_trace(text: str) -> None:
    # Looked up at each call so that redirecting sys.stderr (pytest's capsys) applies.
    sys.stderr.write("".join(f"rock-trace: {line}" for line in text.splitlines(keepends=True)))


#: Environment variables ``ROCK_PLUGIN_<NAME>_<KEY>`` set key ``<key>`` of plugin ``<name>``'s table.
PLUGIN_ENV_PREFIX = "ROCK_PLUGIN_"


def plugin_tables(
    options: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str],
    names: Iterable[str],
) -> dict[str, dict[str, Any]]:
    """Each plugin's configuration table: ``options[name]``, then ``ROCK_PLUGIN_<NAME>_<KEY>``
    variables on top (values as text; the key lower-cased).

    :param names: the plugins that may be configured (a variable must name one of them).
    :raises InvalidParameter: a ``ROCK_PLUGIN_`` variable names no such plugin, or names no key.
    """
    tables = {
        name: dict(table) if isinstance(table, Mapping) else table
        for name, table in options.items()
    }
    prefixes = {
        PLUGIN_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_": name for name in names
    }
    for variable, value in sorted(environ.items()):
        if not variable.startswith(PLUGIN_ENV_PREFIX):
            continue
        # The longest matching prefix wins: plugins "s3" and "s3-extra" stay apart.
        matches = [p for p in prefixes if variable.startswith(p)]
        if not matches:
            known = ", ".join(sorted(prefixes.values())) or "none"
            raise InvalidParameter(
                f"{variable}: names no installed plugin (plugins: {known}; the variable is "
                f"{PLUGIN_ENV_PREFIX}<NAME>_<KEY>, the name upper-cased with '-' as '_')",
                field=variable,
                value=value,
            )
        prefix = max(matches, key=len)
        key = variable[len(prefix) :].lower()
        if not key:
            raise InvalidParameter(
                f"{variable}: names no key after the plugin's name", field=variable, value=value
            )
        table = tables.setdefault(prefixes[prefix], {})
        if isinstance(table, dict):
            table[key] = value
    return tables


class Plugins:
    """The typed facade over a plugin manager's hooks; the rest of rock calls hooks through it.

    Each plugin's implementation is called on its own, so that what it registers, returns or
    raises is attributed to it by name and distribution. An exception a plugin raises that is
    not a :class:`~rock_core.errors.RockError` becomes a :class:`~rock_core.errors.PluginError`
    naming the plugin (except in :meth:`notify_transition`, which logs it).

    :param pm: a manager from :func:`get_plugin_manager` (or any pluggy manager with rock's specs).
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm

    @classmethod
    def load(cls, load_entrypoints: bool = True, plugins: Iterable[object] = ()) -> Plugins:
        """Build a manager with :func:`get_plugin_manager` and wrap it."""
        return cls(get_plugin_manager(load_entrypoints=load_entrypoints, plugins=plugins))

    # -- registries ---------------------------------------------------------------------------

    def runtimes(self) -> dict[str, type[Runtime]]:
        """The runtime classes plugins register (``rock_register_runtimes``), by name."""
        return self._collect("rock_register_runtimes", Runtime, "runtime")

    def archive_stores(self) -> dict[str, type[ArchiveStore]]:
        """The archive store classes plugins register (``rock_register_archive_stores``), by name."""
        return self._collect("rock_register_archive_stores", ArchiveStore, "archive store")

    def record_stores(self) -> dict[str, type[RecordStore]]:
        """The record store classes plugins register (``rock_register_record_stores``), by scheme."""
        return self._collect("rock_register_record_stores", RecordStore, "record store")

    def speedups(self) -> dict[str, type[SpeedupStrategy]]:
        """The speedup strategy classes plugins register (``rock_register_speedups``), by name."""
        return self._collect("rock_register_speedups", SpeedupStrategy, "speedup strategy")

    def env_providers(self) -> dict[str, type[EnvProvider]]:
        """The environment provider classes plugins register (``rock_register_env_providers``), by name."""
        return self._collect("rock_register_env_providers", EnvProvider, "environment provider")

    def registered_by(self, hook_name: str) -> dict[str, str]:
        """For each name registered through ``hook_name`` (``"rock_register_archive_stores"``),
        the plugin that registered it: whose configuration table builds it."""
        owners: dict[str, str] = {}
        for plugin_name, call in self._each(hook_name):
            self._guarded(
                plugin_name,
                hook_name,
                call,
                register=lambda name, cls, _p=plugin_name: owners.setdefault(name, _p),
            )
        return owners

    # -- notifications and surfaces -----------------------------------------------------------

    def notify_transition(
        self, record: SandboxRecord, event: Event, old: State, new: State
    ) -> None:
        """Call ``rock_sandbox_transition`` of every plugin; a failing plugin is logged and skipped."""
        for plugin_name, call in self._each("rock_sandbox_transition"):
            try:
                call(record=record, event=event, old=old, new=new)
            except Exception:
                log.exception(
                    "%s failed in rock_sandbox_transition (sandbox %s, %s -> %s, event %s); the transition stands",
                    self._where(plugin_name),
                    getattr(record, "sandbox_id", "?"),
                    getattr(old, "value", old),
                    getattr(new, "value", new),
                    getattr(event, "value", event),
                )

    def admin_routes(self) -> list[Any]:
        """The routes of all plugins' ``rock_admin_routes``, in one list (call order)."""
        routes: list[Any] = []
        for plugin_name, call in self._each("rock_admin_routes"):
            for result in self._guarded(plugin_name, "rock_admin_routes", call):
                if not isinstance(result, (list, tuple)):
                    raise PluginError(
                        f"{self._where(plugin_name)} returned {result!r} from rock_admin_routes; "
                        "return a list of routes or None",
                        attempted="rock_admin_routes",
                    )
                routes.extend(result)
        return routes

    def add_cli_commands(self, cli: click.Group) -> None:
        """Let every plugin add its commands to the click group ``cli`` (``rock_cli_commands``)."""
        for plugin_name, call in self._each("rock_cli_commands"):
            self._guarded(plugin_name, "rock_cli_commands", call, cli=cli)

    def names(self) -> list[str]:
        """The names of the plugins loaded (entry-point names, or the names given in process)."""
        return [name for name, plugin in self.pm.list_name_plugin() if plugin is not None]

    def configure(self, tables: Mapping[str, Mapping[str, Any]]) -> None:
        """Hand every plugin its own table of ``tables`` (``rock_configure``), read-only; a plugin
        without a table gets an empty one.

        :raises InvalidParameter: a table names no loaded plugin (``plugins.<name>``), or a
            plugin refused its settings (its own error, naming the field).
        """
        loaded = self.names()
        for name, table in tables.items():
            if name not in loaded:
                known = ", ".join(sorted(loaded)) or "none"
                raise InvalidParameter(
                    f"plugins.{name}: no plugin named {name!r} is installed (loaded: {known})",
                    field=f"plugins.{name}",
                    value=dict(table) if isinstance(table, Mapping) else table,
                )
            if not isinstance(table, Mapping):
                raise InvalidParameter(
                    f"plugins.{name}: expected a table of settings, got {table!r}",
                    field=f"plugins.{name}",
                    value=table,
                )
        for plugin_name, call in self._each("rock_configure"):
            frozen = types.MappingProxyType(dict(tables.get(plugin_name, {})))
            self._guarded(plugin_name, "rock_configure", call, config=frozen)

    # -- introspection ------------------------------------------------------------------------

    def describe(self) -> list[PluginInfo]:
        """Every plugin the manager knows: entry points (loaded or blocked), then in-process ones."""
        infos: list[PluginInfo] = []
        seen: list[object] = []
        rock_pm = self.pm if isinstance(self.pm, RockPluginManager) else RockPluginManager()
        for ep in rock_pm.entry_points:
            plugin = None if ep.blocked else rock_pm.loaded.get(ep.name)
            if plugin is not None:
                seen.append(plugin)
            infos.append(
                PluginInfo(
                    name=ep.name,
                    distribution=ep.distribution,
                    version=ep.version,
                    entry_point=ep.value,
                    hooks=self._hooks_of(plugin),
                    blocked=ep.blocked,
                )
            )
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None or any(plugin is s for s in seen):
                continue  # None: a blocked name
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=None,
                    version=None,
                    entry_point=None,
                    hooks=self._hooks_of(plugin),
                    blocked=False,
                )
            )
        return infos

    # -- internals ----------------------------------------------------------------------------

    def _hooks_of(self, plugin: object | None) -> tuple[str, ...]:
        if plugin is None:
            return ()
        return tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()))

    def _where(self, plugin_name: str) -> str:
        if isinstance(self.pm, RockPluginManager):
            return self.pm.describe_plugin(plugin_name)
        return _describe_in_process(self.pm, plugin_name)

    def _each(self, hook_name: str) -> Iterator[tuple[str, Callable[..., list[Any]]]]:
        """Yield ``(plugin name, caller)`` per implementation, in pluggy's call order.

        Each caller runs one plugin's implementation (plus any wrappers) through the manager, so
        tracing and monitoring still see the call.
        """
        impls = [
            i
            for i in getattr(self.pm.hook, hook_name).get_hookimpls()
            if not (i.hookwrapper or i.wrapper)
        ]
        for impl in reversed(impls):  # pluggy calls the last registered first
            others = [i.plugin for i in impls if i.plugin is not impl.plugin]
            yield impl.plugin_name, self.pm.subset_hook_caller(hook_name, others)

    def _guarded(
        self, plugin_name: str, hook_name: str, call: Callable[..., list[Any]], **kwargs: Any
    ) -> list[Any]:
        try:
            return call(**kwargs)
        except RockError:
            raise
        except Exception as exc:
            raise PluginError(
                f"{self._where(plugin_name)} failed in {hook_name}: {type(exc).__name__}: {exc}",
                attempted=hook_name,
            ) from exc

    # `base` is an abstract class, which mypy will not accept as type[T]: hence `type` and Any.
    def _collect(self, hook_name: str, base: type, kind: str) -> dict[str, Any]:
        found: dict[str, tuple[type, str]] = {}
        for plugin_name, call in self._each(hook_name):
            register = self._registrar(found, plugin_name, base, kind)
            self._guarded(plugin_name, hook_name, call, register=register)
        return {name: cls for name, (cls, _) in found.items()}

    def _registrar(
        self, found: dict[str, tuple[type, str]], plugin_name: str, base: type, kind: str
    ) -> hookspecs.Register:
        where = self._where(plugin_name)
        attempted = f"register {kind}"

        def register(name: str, cls: type) -> None:
            if not isinstance(name, str) or not name:
                raise PluginError(
                    f"{where} registered a {kind} under {name!r}; names are non-empty strings",
                    attempted=attempted,
                )
            if not inspect.isclass(cls):
                raise PluginError(
                    f"{where} registered {cls!r} as {kind} {name!r}; register the class itself",
                    attempted=attempted,
                )
            if not issubclass(cls, base):
                raise PluginError(
                    f"{where} registered {cls.__qualname__} as {kind} {name!r}, "
                    f"but it is not a subclass of {base.__module__}.{base.__qualname__}",
                    attempted=attempted,
                )
            if inspect.isabstract(cls):
                missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
                raise PluginError(
                    f"{where} registered {cls.__qualname__} as {kind} {name!r}, but it does not implement: {missing}",
                    attempted=attempted,
                )
            if name in found:
                raise PluginError(
                    f"{kind} {name!r} is registered twice: by {self._where(found[name][1])} "
                    f"({found[name][0].__qualname__}) and by {where} ({cls.__qualname__})",
                    attempted=attempted,
                )
            found[name] = (cls, plugin_name)

        return register
