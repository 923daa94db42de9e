"""ROCK's ``Network`` helper of a sandbox: ``sandbox.network.speedup(...)``.

::

    from rock.sdk.sandbox.speedup import SpeedupType

    await sandbox.network.speedup(SpeedupType.PIP, "https://mirror.example")
    await sandbox.network.speedup(SpeedupType.APT, "http://mirror.example")
    await sandbox.network.speedup(SpeedupType.GITHUB, "203.0.113.10")
"""

from __future__ import annotations

import asyncio
from typing import Any

from rock.sdk.sandbox.speedup import SpeedupExecutor, SpeedupType
from rock_core.actions import Observation
from rock_core.egress import egress_policy, with_mirrors

__all__ = ["Network"]


class Network:
    """Network settings of ``sandbox`` (a :class:`~rock.sdk.sandbox.client.Sandbox`)."""

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox
        self._executor = SpeedupExecutor(sandbox)

    async def speedup(
        self, speedup_type: SpeedupType | str, speedup_value: str, timeout: float = 300
    ) -> Observation:
        """Point the sandbox's package tools at a mirror; replaces what an earlier call of the type wrote.

        :param speedup_type: ``SpeedupType.APT`` / ``PIP`` (``speedup_value`` = the mirror's base
            URL with its scheme), ``SpeedupType.GITHUB`` (an IP address), or the name of a type a
            plugin registers.
        :param timeout: seconds the whole call may take (ROCK accepts and ignores it); the script
            itself may run 30 s, as in ROCK.

        A sandbox whose egress policy denies by default is allowed the mirror first (its
        address as a rule, its name as a domain): :func:`rock_core.egress.with_mirrors`.

        :returns: the script's :class:`Observation`; on any failure ``exit_code=1`` and
            ``failure_reason`` saying why (see :class:`~rock.sdk.sandbox.speedup.SpeedupExecutor`).
        """
        try:
            await self._allow_mirror(speedup_value)
            return await asyncio.wait_for(
                self._executor.execute(speedup_type, speedup_value), timeout
            )
        except TimeoutError:
            reason = f"speedup {getattr(speedup_type, 'value', speedup_type)!r} did not finish within {timeout} s"
            return Observation(output=reason, exit_code=1, failure_reason=reason)

    async def _allow_mirror(self, value: str) -> None:
        """Open the sandbox's egress policy to the mirror ``value`` when it denies by default."""
        status = await self.sandbox.get_status()
        if not getattr(status, "egress", None) or status.egress.get("default") != "deny":
            return
        policy = egress_policy(status.egress)
        opened = with_mirrors(policy, [value])
        if opened != policy:
            await self.sandbox.update_egress(opened)
