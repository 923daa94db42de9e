"""Every hook a rock plugin can implement.

A plugin is a module (or any object) announced in the entry-point group ``rock``; rock's plugin
manager (:func:`rock_core.plugins.get_plugin_manager`) imports it and calls the functions it marks
with :data:`hookimpl` whose names match the specs below::

    from rock_core import hookimpl

    @hookimpl
    def rock_register_runtimes(register):
        register("mine", MyRuntime)

Hooks are synchronous and cheap. Backends do not do their work in hooks: they register a *class*
that implements an abstract base class (:class:`rock_core.runtime.Runtime`,
:class:`rock_core.archive.ArchiveStore`, :class:`rock_core.records.RecordStore`,
:class:`rock_core.speedup.SpeedupStrategy`,
:class:`rock_core.envs.EnvProvider`), and the async contract lives on that class, because pluggy
has no async hooks.

An implementation may accept fewer parameters than the spec names (pluggy passes only those it
asks for), never other ones. ``docs/plugins.md`` documents the same signatures, and a test keeps
the two in step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from rock_core.models import SandboxRecord
    from rock_core.states import Event, State

__all__ = ["LOCAL_ADMIN_URL", "PROJECT_NAME", "Register", "hookimpl", "hookspec"]

#: The key, in the ``rock`` command's click context ``meta``, of a function answering the URL
#: of the admin running for this state directory (``None``: none runs): what a plugin's command
#: talks to when the user names no server, as ``rock sandbox`` does.
LOCAL_ADMIN_URL = "rock.local_admin_url"

#: The pluggy project name of rock's hooks, and the name of the entry-point group plugins use.
PROJECT_NAME = "rock"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a function in this module as a hook specification."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's function as the implementation of the rock hook of the same name."""

#: The callback passed to the ``rock_register_*`` hooks: ``register(name, cls)``.
Register = Callable[[str, type], None]


# ---------------------------------------------------------------------------------------------
# Backends: each hook registers classes by name


@hookspec
def rock_register_runtimes(register: Register) -> None:
    """Register runtime classes: the backends that hold sandboxes (``docker``, ``nomad``, ...).

    Called whenever rock needs the table of runtimes, typically once when an engine is built
    and by ``rock plugins``; it may be called more than once per process, so only call
    ``register``, nothing else.

    :param register: ``register(name, cls)`` adds the runtime class ``cls`` under ``name``, the
        name a configuration selects it by. ``cls`` must be a concrete subclass of
        :class:`rock_core.runtime.Runtime`. Registering a name another plugin already registered
        is an error that names both distributions.

    The return value is ignored.
    """


@hookspec
def rock_register_archive_stores(register: Register) -> None:
    """Register archive store classes: where archived sandboxes are kept (``s3``, ...).

    Called whenever rock needs the table of archive stores, e.g. when an engine with archiving
    enabled is built; it may be called more than once per process.

    :param register: ``register(name, cls)`` adds ``cls``, a concrete subclass of
        :class:`rock_core.archive.ArchiveStore`, under ``name``. Names are unique across plugins.

    The return value is ignored.
    """


@hookspec
def rock_register_record_stores(register: Register) -> None:
    """Register record store classes: where an engine keeps its sandbox records (``postgresql``).

    Called when an engine whose ``store`` setting is a URL is built (its scheme names the
    store), and by ``rock plugins``; it may be called more than once per process. The default
    store, SQLite (``store_path``), is rock-core's own and needs no plugin.

    :param register: ``register(name, cls)`` adds ``cls``, a concrete subclass of
        :class:`rock_core.records.RecordStore`, under ``name``: the URL scheme it serves
        (``store = "postgresql://..."``). Names are unique across plugins. The engine builds it
        as ``cls(url, **table)`` with the plugin's table (``[plugins.<name>]``).

    The return value is ignored.
    """


@hookspec
def rock_register_speedups(register: Register) -> None:
    """Register speedup strategies: mirror settings written into a sandbox (``apt``, ``pip``, ...).

    Called whenever rock needs the table of speedup strategies, e.g. when
    ``sandbox.network.speedup(...)`` resolves its type; it may be called more than once.

    :param register: ``register(name, cls)`` adds ``cls``, a concrete subclass of
        :class:`rock_core.speedup.SpeedupStrategy`, under ``name`` (the value of ``SpeedupType``
        it serves). Names are unique across plugins.

    The return value is ignored.
    """


@hookspec
def rock_register_env_providers(register: Register) -> None:
    """Register environment providers: families of environments ``rock.make`` can serve (``gem``).

    Called whenever rock needs the table of environment providers, e.g. by ``rock.make``; it
    may be called more than once.

    :param register: ``register(name, cls)`` adds ``cls``, a concrete subclass of
        :class:`rock_core.envs.EnvProvider`, under ``name``. Names are unique across plugins.

    The return value is ignored.
    """


# ---------------------------------------------------------------------------------------------
# Lifecycle notifications


@hookspec
def rock_sandbox_transition(record: SandboxRecord, event: Event, old: State, new: State) -> None:
    """Notification after every change of a sandbox's lifecycle state.

    Called by the engine right after a transition has been applied and recorded, on the
    engine's event loop: return quickly and never block (hand slow work to a thread or a task of
    your own). The transition has already happened, so an exception raised here cannot undo it:
    rock logs it on the ``rock.plugins`` logger and goes on notifying the other plugins.

    :param record: the sandbox's record as it is after the transition (read-only).
    :param event: the event that caused the transition (:class:`rock_core.states.Event`).
    :param old: the state before the transition (:class:`rock_core.states.State`).
    :param new: the state after the transition, never ``old``: a no-op event (a second stop
        or delete) changes nothing and is not announced.

    The return value is ignored.
    """


# ---------------------------------------------------------------------------------------------
# Surfaces: HTTP routes and CLI commands


@hookspec
def rock_admin_routes() -> list[Any] | None:
    """Return HTTP routes a plugin adds to the admin server.

    Called once when the admin server's application is built, before it serves requests.

    Takes no parameters.

    Return a list of route objects of the kind the admin application mounts (see ``rock.admin``)
    or ``None`` for none. The results of all plugins are collected into one list; a plugin must
    not return a path the admin already serves.
    """


@hookspec
def rock_cli_commands(cli: click.Group) -> None:
    """Add commands to the ``rock`` command line.

    Called when the ``rock`` command needs a command that is not built in (or lists its
    commands for ``--help``), at most once per invocation; never for ``rock --version``.

    :param cli: a :class:`click.Group`; add commands with ``cli.add_command(command)``. A
        command whose name is built into ``rock`` is ignored with a warning.

    A command that talks to an admin should use the one the built-in commands use when the user
    names none: ``click.get_current_context().meta[LOCAL_ADMIN_URL]()`` answers the URL of the
    admin ``rock admin start`` runs for this state directory, or ``None``.

    The return value is ignored.
    """


# ---------------------------------------------------------------------------------------------
# Configuration


@hookspec
def rock_configure(config: Mapping[str, Any]) -> None:
    """Let a plugin read its settings.

    Called once by the program that owns rock's configuration (the admin server, an embedded
    engine: :class:`~rock_core.engine.manager.SandboxManager`) after the plugin manager is built
    and before any registered class is used.

    :param config: the plugin's own table, read-only: ``[plugins.<name>]`` of the admin's TOML
        file, ``EngineConfig(plugin_options={"<name>": {...}})``, with ``ROCK_PLUGIN_<NAME>_<KEY>``
        variables on top, where ``<name>`` is the plugin's entry-point name; empty when nothing
        configures it. Raise :class:`rock_core.errors.InvalidParameter` naming the field when a
        setting is invalid: the error stops start-up.

    The return value is ignored.
    """
