"""What plugins give an engine besides its hooks: its runtime, its archive store, and the
environment providers of ``make_env``, each built from the plugin's table (``rock_configure``'s
options with ``ROCK_PLUGIN_*`` variables on top) and named in the error when it is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rock_core.engine.config import EngineConfig
from rock_core.errors import InvalidParameter
from rock_core.runtime import Runtime

if TYPE_CHECKING:
    from rock_core.engine.manager import SandboxManager

__all__ = ["build_archive_store", "build_runtime", "make_env"]

Tables = Mapping[str, Mapping[str, Any]]


def _build(cls: Any, where: str, args: tuple[Any, ...], options: Mapping[str, Any]) -> Any:
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


def build_runtime(config: EngineConfig, plugins: Any, tables: Tables | None = None) -> Runtime:
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


def build_archive_store(config: EngineConfig, plugins: Any, tables: Tables) -> Any:
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


async def make_env(engine: SandboxManager, env_id: str, **kwargs: Any) -> Any:
    """:meth:`SandboxManager.make_env <rock_core.engine.manager.SandboxManager.make_env>`: make
    ``env_id`` with the first provider that accepts it; providers are built once, as
    ``cls(engine, **table)``.

    :raises InvalidParameter: no provider serves ``env_id`` (``field="env_id"``).
    """
    if engine._env_providers is None:
        plugins = engine.plugins
        classes = plugins.env_providers()
        owners = plugins.registered_by("rock_register_env_providers")
        engine._env_providers = {
            name: _build(
                cls,
                f"plugins.{owners.get(name, name)}",
                (engine,),
                dict(engine._tables.get(owners.get(name, name), {})),
            )
            for name, cls in classes.items()
        }
    for provider in engine._env_providers.values():
        if provider.accepts(env_id):
            return await provider.make(env_id, **kwargs)
    known = ", ".join(sorted(engine._env_providers)) or "none installed"
    raise InvalidParameter(
        f"env_id: no environment provider serves {env_id!r} (providers: {known}; for GEM, pip install rock-gem)",
        field="env_id",
        value=env_id,
    )
