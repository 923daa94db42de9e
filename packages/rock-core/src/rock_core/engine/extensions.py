"""What plugins give an engine besides its hooks: its runtime, its record store (SQLite unless
``store`` names a plugin's), its archive store, and the environment providers of ``make_env``, each built from the plugin's table (``rock_configure``'s
options with ``ROCK_PLUGIN_*`` variables on top) and named in the error when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from rock_core.engine.config import EngineConfig
from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import InvalidParameter
from rock_core.records import RecordStore, mask_url, store_scheme
from rock_core.runtime import Runtime

if TYPE_CHECKING:
    from rock_core.archive import ArchiveStore
    from rock_core.envs import Environment, EnvProvider
    from rock_core.plugins import Plugins

__all__ = ["EnvProviders", "build_archive_store", "build_record_store", "build_runtime"]

Tables = Mapping[str, Mapping[str, Any]]
_T = TypeVar("_T")


def _build(
    cls: Callable[..., _T], where: str, args: tuple[Any, ...], options: Mapping[str, Any]
) -> _T:
    """``cls(*args, **options)``, an unknown or missing keyword named as the setting it came from
    (``plugins.archive-s3: unexpected keyword 'bukket'``) instead of a bare ``TypeError``."""
    import inspect

    try:
        inspect.signature(cls).bind(*args, **options)
    except TypeError as exc:
        raise InvalidParameter(
            f"{where}: {exc} (given: {', '.join(sorted(options)) or 'nothing'})", field=where
        ) from None
    except ValueError:  # no signature to check (a builtin): let the call say
        pass
    return cls(*args, **options)


def build_runtime(config: EngineConfig, plugins: Plugins, tables: Tables | None = None) -> Runtime:
    """The runtime registered under ``config.runtime``, built with the table of the plugin that
    registered it (``[plugins.<name>]``, ``ROCK_PLUGIN_<NAME>_*`` variables on top) and
    ``config.runtime_options`` on top of that.

    :param tables: the plugins' tables as the engine made them (default: made here the same
        way, from ``config.plugin_options`` and the environment).
    :raises InvalidParameter: no installed plugin provides it (``field="runtime"``), or a
        setting its class does not take (named with its table).
    """
    runtimes = plugins.runtimes()
    if config.runtime not in runtimes:
        known = ", ".join(sorted(runtimes)) or "none installed"
        raise InvalidParameter(
            f"runtime: no runtime named {config.runtime!r} (installed: {known}); "
            f"install the plugin that provides it (`rock plugins` lists what is installed)",
            field="runtime",
            value=config.runtime,
        )
    if tables is None:
        import os

        from rock_core.plugins import plugin_tables

        tables = plugin_tables(config.plugin_options, os.environ, plugins.names())
    owner = plugins.registered_by("rock_register_runtimes").get(config.runtime, config.runtime)
    table = dict(tables.get(owner) or {})
    options = {**table, **dict(config.runtime_options)}
    where = "runtime_options" if not table else f"plugins.{owner} (with runtime_options on top)"
    return _build(runtimes[config.runtime], where, (), options)


def build_record_store(config: EngineConfig, plugins: Plugins, tables: Tables) -> RecordStore:
    """The engine's record store: SQLite (``config.store_path``, or memory) unless
    ``config.store`` is a URL, then the store a plugin registered for its scheme, built as
    ``cls(url, **table)`` with that plugin's table. Not opened yet (:meth:`RecordStore.open`).

    :raises InvalidParameter: naming ``store`` and its value (password masked): not a URL, or
        no installed plugin serves its scheme.
    """
    url = config.store
    if url is None:
        return SqliteRecordStore(config.store_path)
    scheme = store_scheme(url)
    stores = plugins.record_stores()
    if scheme not in stores:
        known = ", ".join(sorted(stores)) or "none installed"
        raise InvalidParameter(
            f"store: no record store serves {scheme}:// in {mask_url(url)!r} (installed: {known}); "
            f"for PostgreSQL, pip install rock-postgres",
            field="store",
            value=mask_url(url),
        )
    owner = plugins.registered_by("rock_register_record_stores").get(scheme, scheme)
    return _build(stores[scheme], f"plugins.{owner}", (url,), dict(tables.get(owner, {})))


def build_archive_store(
    config: EngineConfig, plugins: Plugins, tables: Tables
) -> ArchiveStore | None:
    """The configured archive store (``config.archive_store``), or ``None`` when archiving is off.

    :raises InvalidParameter: no installed plugin provides it (``field="archive_store"``).
    """
    name = config.archive_store
    if name is None:
        return None
    stores = plugins.archive_stores()
    if name not in stores:
        known = ", ".join(sorted(stores)) or "none installed"
        raise InvalidParameter(
            f"archive_store: no archive store named {name!r} (installed: {known}); for S3, pip install rock-archive-s3",
            field="archive_store",
            value=name,
        )
    owner = plugins.registered_by("rock_register_archive_stores").get(name, name)
    return _build(stores[name], f"plugins.{owner}", (), dict(tables.get(owner, {})))


class EnvProviders:
    """The environment providers plugins registered (``rock_register_env_providers``), built at
    the first :meth:`make`, each as ``cls(host, **table)``.

    :param plugins: where the providers' classes come from.
    :param tables: the plugins' tables (``rock_configure``'s options, variables on top).
    :param host: what each provider is built with (the engine's facade,
        :class:`~rock_core.engine.manager.SandboxManager`: providers start sandboxes with it).
    """

    def __init__(self, plugins: Plugins, tables: Tables, host: object) -> None:
        self._plugins = plugins
        self._tables = tables
        self._host = host
        #: The providers by name, once built (``None`` before the first :meth:`make`).
        self.built: dict[str, EnvProvider] | None = None

    async def make(self, env_id: str, **kwargs: Any) -> Environment:
        """:meth:`SandboxManager.make_env <rock_core.engine.manager.SandboxManager.make_env>`:
        make ``env_id`` with the first provider that accepts it.

        :raises InvalidParameter: no provider serves ``env_id`` (``field="env_id"``).
        """
        if self.built is None:
            classes = self._plugins.env_providers()
            owners = self._plugins.registered_by("rock_register_env_providers")
            self.built = {
                name: _build(
                    cls,
                    f"plugins.{owners.get(name, name)}",
                    (self._host,),
                    dict(self._tables.get(owners.get(name, name), {})),
                )
                for name, cls in classes.items()
            }
        for provider in self.built.values():
            if provider.accepts(env_id):
                return await provider.make(env_id, **kwargs)
        known = ", ".join(sorted(self.built)) or "none installed"
        raise InvalidParameter(
            f"env_id: no environment provider serves {env_id!r} (providers: {known}; for GEM, pip install rock-gem)",
            field="env_id",
            value=env_id,
        )
