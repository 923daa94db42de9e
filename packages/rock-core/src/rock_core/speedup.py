"""The contract a speedup strategy implements: :class:`SpeedupStrategy`.

``sandbox.network.speedup(SpeedupType.APT, "http://mirror.example")`` points a sandbox's package
tools at a mirror. The flow, as in ROCK: validate the value, run the strategy's precheck command in
the sandbox, then run the script the strategy renders for the value. Each call replaces what the
previous call wrote. Plugins register strategy classes with the ``rock_register_speedups`` hook;
a strategy is built with no arguments.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from rock_core.errors import InvalidParameter

__all__ = ["SpeedupStrategy"]


class SpeedupStrategy(abc.ABC):
    """Abstract base of every speedup strategy: one kind of mirror setting (APT, pip, GitHub, ...).

    Strategies render shell text; they run nothing themselves, so they are plain synchronous
    methods.
    """

    #: The speedup type this strategy serves, as the SDK's ``SpeedupType`` spells it (``"apt"``).
    name: ClassVar[str]

    @abc.abstractmethod
    def precheck_command(self) -> str:
        """A shell command that exits 0 in a sandbox where this strategy applies, non-zero elsewhere.

        For example ``test -f /etc/debian_version`` for APT.
        """

    def validate(self, value: str) -> str:
        """Return ``value`` in the form :meth:`script` expects, or raise if it is unusable.

        The base implementation strips surrounding whitespace and rejects an empty value;
        strategies override it to check their own format (a URL, an IPv4 address), calling
        ``super().validate(value)`` first.

        :raises rock_core.errors.InvalidParameter: naming the field ``speedup_value`` and the value.
        """
        if not isinstance(value, str) or not value.strip():
            raise InvalidParameter(
                f"speedup value for {self.name!r} must be a non-empty string, got {value!r}",
                field="speedup_value",
                value=value,
                attempted="speedup",
            )
        return value.strip()

    @abc.abstractmethod
    def script(self, value: str) -> str:
        """Return the bash script that writes the mirror settings for ``value``.

        ``value`` has passed :meth:`validate`. The script must be idempotent: running it again
        with another value replaces the previous settings.
        """
