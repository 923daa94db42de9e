"""Constants of ROCK's SDK, under ROCK's names."""

from __future__ import annotations

from typing import Literal

__all__ = ["RunModeType", "PID_PREFIX", "PID_SUFFIX"]

#: The values ``Sandbox.arun(mode=...)`` accepts (also as :class:`rock.sdk.sandbox.client.RunMode`).
RunModeType = Literal["normal", "nohup"]

#: Markers around the process id that a nohup submission echoes (``PIDSTART123PIDEND``).
PID_PREFIX = "PIDSTART"
PID_SUFFIX = "PIDEND"
