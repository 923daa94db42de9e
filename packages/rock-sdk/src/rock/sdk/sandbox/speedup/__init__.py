"""ROCK's ``rock.sdk.sandbox.speedup``: :class:`SpeedupType` and :class:`SpeedupExecutor`.

Used through ``await sandbox.network.speedup(speedup_type=SpeedupType.PIP,
speedup_value="http://mirror.example")``; the strategies come from ``rock-speedup``
(``pip install rock-speedup``) or any plugin implementing ``rock_register_speedups``.
"""

from rock.sdk.sandbox.speedup.executor import SPEEDUP_PACKAGE, SpeedupExecutor
from rock.sdk.sandbox.speedup.types import SpeedupType

__all__ = ["SPEEDUP_PACKAGE", "SpeedupExecutor", "SpeedupType"]
