"""Throwaway rock plugins: small distributions installed into a folder for one test.

rock finds a plugin through the ``rock`` entry-point group of an installed distribution.
:class:`PluginSite` installs such distributions the way an installer leaves them (a module next
to a ``<name>-<version>.dist-info`` folder holding ``METADATA`` and ``entry_points.txt``) into a
folder of its own. A test then loads them in its own process, with the folder on ``sys.path``
(:meth:`PluginSite.importable`), or in a subprocess, with ``PYTHONPATH`` set to
:attr:`PluginSite.path`: both find them through :mod:`importlib.metadata`, as they would find
any installed plugin.

:class:`NullRuntime` is a runtime that holds nothing, for plugins (and tests) that need a
runtime to register but never run a sandbox in it.

The pytest fixture :func:`~rock_core.testing.fixtures.plugin_site` gives a test an empty site
that is the only place plugins are installed while the test runs.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rock_core.models import RuntimeStatus, UnitState
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle

__all__ = ["NullRuntime", "PluginSite"]


class NullRuntime(Runtime):
    """A runtime that holds nothing: only the methods every runtime must have, each doing nothing.

    :meth:`create` hands back the handle ``(name, "unit-1", "sandbox-1")`` every time, and
    :meth:`inspect` reports every unit missing. The optional methods keep the base class's
    behaviour (``NotSupported``). Subclass it with another :attr:`name` to give a throwaway plugin a
    runtime of its own.
    """

    name = "null"

    async def create(
        self,
        spec: Any,
        *,
        labels: Mapping[str, str],
        rocklet_token: str,
        on_phase: PhaseCallback | None = None,
    ) -> UnitHandle:
        """Make nothing; return the same handle every time."""
        return UnitHandle(self.name, "unit-1", "sandbox-1")

    async def start(self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None) -> None:
        """Do nothing."""

    async def stop(self, handle: UnitHandle, *, timeout: float) -> None:
        """Do nothing."""

    async def remove(self, handle: UnitHandle) -> None:
        """Do nothing."""

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        """Report the unit missing: this runtime holds none."""
        return RuntimeStatus(state=UnitState.MISSING)

    async def list(self, labels: Mapping[str, str]) -> Sequence[UnitHandle]:
        """No units."""
        return []

    async def logs(self, handle: UnitHandle, tail: int | None = None) -> str:
        """No output."""
        return ""


class PluginSite:
    """A folder into which a test installs throwaway distributions announcing rock plugins.

    :param path: the folder (made if missing). Put it on ``PYTHONPATH`` for a subprocess, or use
        :meth:`importable` to load its plugins in this process.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        #: The names of the modules installed here, in order.
        self.modules: list[str] = []

    def install(
        self,
        dist: str,
        version: str = "1.0",
        *,
        source: str = "",
        entry_points: Mapping[str, str] | None = None,
        module: str | None = None,
    ) -> str:
        """Install the distribution ``dist`` with one module whose code is ``source``; return the module's name.

        :param module: the module's name; by default a new one made from ``dist`` and a random
            suffix, so that no two installs (in one test run) share an import.
        :param entry_points: the distribution's ``rock`` entry points, ``{name: target}``, where
            ``{module}`` in a target stands for the module's name. By default one entry point,
            named like the distribution without its ``rock-`` prefix, pointing at the module.
        """
        module = module or f"{dist.replace('-', '_')}_{uuid.uuid4().hex[:10]}"
        (self.path / f"{module}.py").write_text(source, encoding="utf-8")
        self.modules.append(module)
        info = self.path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
        )
        if entry_points is None:
            entry_points = {dist.removeprefix("rock-"): "{module}"}
        lines = "".join(
            f"{name} = {target.format(module=module)}\n" for name, target in entry_points.items()
        )
        (info / "entry_points.txt").write_text(f"[rock]\n{lines}", encoding="utf-8")
        importlib.invalidate_caches()  # import and importlib.metadata must see the new files
        return module

    @contextlib.contextmanager
    def importable(self, *, alone: bool = False) -> Iterator[PluginSite]:
        """Within the block, this folder comes first on ``sys.path``.

        :param alone: also take every ``site-packages`` folder off ``sys.path``, so that the
            distributions installed here are the only ones announcing rock plugins (modules
            already imported stay imported).

        Afterwards ``sys.path`` is as it was and the modules installed here are forgotten
        (taken out of ``sys.modules``), so that the next test imports its own.
        """
        saved = list(sys.path)
        sys.path[:] = [str(self.path), *(p for p in saved if not (alone and "site-packages" in p))]
        importlib.invalidate_caches()
        try:
            yield self
        finally:
            sys.path[:] = saved
            for module in self.modules:
                sys.modules.pop(module, None)
