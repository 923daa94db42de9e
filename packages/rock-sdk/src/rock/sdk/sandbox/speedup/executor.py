"""ROCK's ``SpeedupExecutor``: find the strategy for a speedup type and run it in a sandbox.

The strategies are :class:`rock_core.speedup.SpeedupStrategy` classes that plugins register with
the ``rock_register_speedups`` hook (``rock-speedup`` registers ``apt``, ``pip`` and ``github``),
plus any registered in-process with :meth:`SpeedupExecutor.register_strategy`. They are looked up
at each call, so ``ROCK_DISABLE_PLUGINS`` / ``ROCK_PLUGINS`` apply as they are set.

The flow, as ROCK's: check the value, run the strategy's precheck in the sandbox, then run the
script it renders with ``sandbox.process.execute_script(..., wait_timeout=30, cleanup=True)``.
Every failure comes back as ``Observation(exit_code=1, failure_reason=...)``, never raised; the
reason starts with ROCK's words (``Invalid speedup type``, ``Precheck failed``, ``Script
generation failed``) and goes on to say what was wrong. Nothing in the sandbox is changed unless
the precheck passed.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from typing import Any, ClassVar

from rock.sdk.sandbox.speedup.types import SpeedupType
from rock_core.actions import Command, Observation
from rock_core.errors import InvalidParameter, RockError
from rock_core.plugins import Plugins, RockPluginManager, get_plugin_manager
from rock_core.speedup import SpeedupStrategy

__all__ = ["SCRIPT_WAIT_TIMEOUT", "SPEEDUP_PACKAGE", "SpeedupExecutor"]

log = logging.getLogger(__name__)

#: The distribution that provides the APT, PIP and GITHUB strategies.
SPEEDUP_PACKAGE = "rock-speedup"
#: Seconds the speedup script may run (ROCK's ``wait_timeout=30``).
SCRIPT_WAIT_TIMEOUT = 30
# Seconds the precheck command may run.
_PRECHECK_TIMEOUT = 30.0


def _failure(reason: str, output: str = "") -> Observation:
    return Observation(output=output or reason, exit_code=1, failure_reason=reason)


class SpeedupExecutor:
    """Runs speedup strategies in ``sandbox`` (a :class:`~rock.sdk.sandbox.client.Sandbox`)."""

    # Strategies registered in-process (ROCK's ``register_strategy``); they win over plugins'.
    _registered: ClassVar[dict[str, type[SpeedupStrategy]]] = {}

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox

    @classmethod
    def register_strategy(
        cls, speedup_type: SpeedupType | str, strategy_cls: type[SpeedupStrategy]
    ) -> None:
        """Make ``strategy_cls`` serve ``speedup_type`` in this process (ROCK's registry).

        A plugin's ``rock_register_speedups`` hook is the way to ship a strategy; this is for
        code that defines one on the spot. It replaces a plugin's strategy of the same type.

        :raises InvalidParameter: ``strategy_cls`` is not a concrete ``SpeedupStrategy`` subclass,
            or ``speedup_type`` is empty.
        """
        name = speedup_type.value if isinstance(speedup_type, SpeedupType) else speedup_type
        if not isinstance(name, str) or not name.strip():
            raise InvalidParameter(
                f"speedup_type: must be a non-empty string, got {speedup_type!r}",
                field="speedup_type",
                value=speedup_type,
                attempted="register_strategy",
            )
        if not (
            inspect.isclass(strategy_cls) and issubclass(strategy_cls, SpeedupStrategy)
        ) or inspect.isabstract(strategy_cls):
            raise InvalidParameter(
                f"strategy_cls: {strategy_cls!r} is not a concrete subclass of rock_core.speedup.SpeedupStrategy",
                field="strategy_cls",
                value=strategy_cls,
                attempted="register_strategy",
            )
        cls._registered[name.strip()] = strategy_cls

    @classmethod
    def strategies(cls) -> dict[str, type[SpeedupStrategy]]:
        """Every strategy available now, by speedup type: the plugins', then in-process ones.

        :raises rock_core.errors.PluginError: a plugin failed to load or to register.
        """
        found = Plugins(get_plugin_manager()).speedups()
        found.update(cls._registered)
        return found

    async def execute(self, speedup_type: SpeedupType | str, speedup_value: str) -> Observation:
        """Write the mirror settings of ``speedup_type`` for ``speedup_value`` in the sandbox.

        Returns the script's :class:`Observation` (``exit_code`` 0 and what it wrote), or
        ``Observation(exit_code=1, failure_reason=...)``: an unknown type (naming the package to
        install when the type is ROCK's and ``rock-speedup`` is missing), a bad value, a failed
        precheck (the image has no apt or pip, ``/etc/hosts`` is not writable, ...), or a script
        that failed (its exit code and output).
        """
        name = speedup_type.value if isinstance(speedup_type, SpeedupType) else speedup_type
        if not isinstance(name, str) or not name.strip():
            return _failure(
                f"Invalid speedup type: {speedup_type!r} (give a SpeedupType or a type name)"
            )
        name = name.strip()
        try:
            pm = get_plugin_manager()
            strategies = Plugins(pm).speedups()
        except RockError as exc:
            return _failure(f"Invalid speedup type: cannot load the speedup strategies: {exc}")
        strategies.update(self._registered)
        strategy_cls = strategies.get(name)
        if strategy_cls is None:
            return _failure(self._unknown_type(name, strategies, pm))

        try:
            strategy = strategy_cls()
            value = strategy.validate(speedup_value)
            script = strategy.script(value)
        except InvalidParameter as exc:
            return _failure(f"Script generation failed: invalid speedup value for {name!r}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a third-party strategy's bug, reported as ROCK does
            return _failure(
                f"Script generation failed: {type(exc).__name__} in {strategy_cls.__qualname__}: {exc}"
            )

        failed = await self._precheck(name, strategy)
        if failed is not None:
            return failed
        observation: Observation = await self.sandbox.process.execute_script(
            script,
            script_name=f"rock_speedup_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}_{time.time_ns()}.sh",
            wait_timeout=SCRIPT_WAIT_TIMEOUT,
            cleanup=True,
        )
        if observation.exit_code != 0:
            said = observation.output.strip() or observation.failure_reason.strip() or "(no output)"
            return _failure(
                f"Speedup script for {name!r} failed (exit code {observation.exit_code}): {said}",
                output=observation.output,
            )
        log.info("speedup %s -> %s in sandbox %s", name, value, self.sandbox.sandbox_id)
        return observation

    async def _precheck(self, name: str, strategy: SpeedupStrategy) -> Observation | None:
        try:
            command = strategy.precheck_command()
        except Exception as exc:  # noqa: BLE001 - a third-party strategy's bug
            return _failure(
                f"Precheck failed: {type(exc).__name__} in {type(strategy).__qualname__}: {exc}"
            )
        try:
            result = await self.sandbox.execute(
                Command(command=["/bin/sh", "-c", command], timeout=_PRECHECK_TIMEOUT)
            )
        except RockError as exc:
            return _failure(f"Precheck failed: could not run the {name!r} precheck: {exc}")
        if result.exit_code == 0:
            return None
        said = (
            result.stdout + result.stderr
        ).strip() or f"`{command.strip()}` exited {result.exit_code}"
        return _failure(f"Precheck failed: {name!r} speedup cannot run in this sandbox: {said}")

    @staticmethod
    def _unknown_type(
        name: str, strategies: dict[str, type[SpeedupStrategy]], pm: RockPluginManager
    ) -> str:
        known = ", ".join(sorted(strategies)) or "none"
        blocked = [ep.name for ep in pm.entry_points if ep.blocked]
        note = (
            f" (plugins kept from loading by ROCK_DISABLE_PLUGINS/ROCK_PLUGINS: {', '.join(blocked)})"
            if blocked
            else ""
        )
        if name in {t.value for t in SpeedupType}:
            return (
                f"Invalid speedup type: no strategy serves {name!r}; it comes with the {SPEEDUP_PACKAGE} package: "
                f"`pip install {SPEEDUP_PACKAGE}`{note}. Types available: {known}"
            )
        return f"Invalid speedup type: {name!r}; types available: {known}{note}"
