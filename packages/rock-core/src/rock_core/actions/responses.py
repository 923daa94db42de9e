"""The admin API's envelope (:class:`RockResponse`, :class:`ResponseStatus`) and the error
payload of a failed call (:class:`SandboxResponse`)."""

from __future__ import annotations

import enum
from typing import Any

import attrs

__all__ = ["ResponseStatus", "RockResponse", "SandboxResponse"]


class ResponseStatus(str, enum.Enum):
    """The envelope's ``status``."""

    SUCCESS = "Success"
    FAILED = "Failed"


@attrs.frozen(kw_only=True)
class RockResponse:
    """The admin API's envelope: ``result`` holds the endpoint's model (as JSON) on success, or a
    :class:`SandboxResponse` with the error code on a typed failure; ``error`` the error text."""

    status: ResponseStatus = attrs.field(default=ResponseStatus.SUCCESS, converter=ResponseStatus)
    message: str | None = None
    error: str | None = None
    result: Any = None


@attrs.frozen(kw_only=True)
class SandboxResponse:
    """Error payload of a failed call (``code`` 4xxx/5xxx/6xxx), and base of start responses."""

    code: int | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
