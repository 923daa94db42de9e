"""Fast turns of the process-global generators (``random``, ``numpy.random``) between the envs of
one env process (:class:`.env_worker.ProcessEnvs`): each env's states are taken when another env
of the process is called and put back at its own turn.

Standard library only at import (numpy is handed in). Written beside ``env_worker.py`` by the
rocklet and imported by it.
"""

from __future__ import annotations

import random
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NumpyGlobal", "RandomGlobal"]


class NumpyGlobal:
    """numpy's global generator (``numpy.random.seed``, ``.randint``, ...: a legacy
    ``RandomState`` over MT19937), taken and put back fast. numpy's ``get_state``/``set_state``
    cost some 35 µs each; so the generator's state (key and position, 2.5 KB) is copied as bytes,
    and numpy's own calls are used only when a draw happened (to learn whether a gaussian is
    cached, which the bytes do not hold) or when one is cached. Where the bytes cannot be checked
    against numpy's own reading (another layout), numpy's calls are used throughout."""

    _KEY = 624 * 4

    def __init__(self, np: Any) -> None:
        self.np = np
        self.address: int | None = None
        self.size = self._KEY + 4
        #: Whether no gaussian is cached now (unknown at first: put uses numpy's own call).
        self.gauss_clean = False
        try:
            import ctypes

            generator = np.random.mtrand._rand._bit_generator
            state = generator.state
            address = generator.ctypes.state_address
            raw = ctypes.string_at(address, self.size)
            if (
                state.get("bit_generator") == "MT19937"
                and raw[: self._KEY] == state["state"]["key"].astype("<u4").tobytes()
                and int.from_bytes(raw[self._KEY :], sys.byteorder, signed=True)
                == state["state"]["pos"]
                and sys.byteorder == "little"
            ):
                self.address = address
                self._ctypes = ctypes
        except Exception:  # noqa: BLE001 - another numpy: its own calls then
            self.address = None

    def take(self, entered: Any) -> Any:
        """The state now; ``entered`` is the state put at the env's turn (``None``: unknown)."""
        if self.address is None:
            return self.np.random.get_state()
        raw = self._ctypes.string_at(self.address, self.size)
        if entered is not None and entered[1] is None and raw == entered[0]:
            return entered  # no draw, and no gaussian cached
        full = self.np.random.get_state()
        gauss = float(full[4]) if full[3] else None
        self.gauss_clean = gauss is None
        return raw, gauss

    def put(self, state: Any) -> None:
        if self.address is None:
            self.np.random.set_state(state)
            return
        raw, gauss = state
        if gauss is None and self.gauss_clean:
            self._ctypes.memmove(self.address, raw, self.size)
            return
        key = self.np.frombuffer(raw[: self._KEY], dtype="<u4").copy()
        pos = int.from_bytes(raw[self._KEY :], sys.byteorder, signed=True)
        self.np.random.set_state(
            ("MT19937", key, pos, 0 if gauss is None else 1, 0.0 if gauss is None else gauss)
        )
        self.gauss_clean = gauss is None


class RandomGlobal:
    """The ``random`` module's generator, taken and put back fast: ``getstate`` builds a tuple of
    625 ints (some 7 µs); the C object's index and state (2.5 KB, right after the object's
    header) are copied as bytes instead, with ``gauss_next`` beside them. Where those bytes
    cannot be checked against ``getstate`` (another Python), ``getstate``/``setstate`` it is."""

    def __init__(self) -> None:
        self.inst: Any = random._inst
        self.address: int | None = None
        self.size = 4 + 624 * 4
        try:
            import array
            import ctypes

            address = id(self.inst) + object.__basicsize__
            raw = ctypes.string_at(address, self.size)
            words = array.array("I", raw[4:])
            index = int.from_bytes(raw[:4], sys.byteorder, signed=True)
            if words.itemsize == 4 and tuple(words) + (index,) == self.inst.getstate()[1]:
                self.address = address
                self._ctypes = ctypes
        except Exception:  # noqa: BLE001 - another Python: getstate then
            self.address = None

    def take(self) -> Any:
        if self.address is None:
            return self.inst.getstate()
        return self._ctypes.string_at(self.address, self.size), self.inst.gauss_next

    def put(self, state: Any) -> None:
        if self.address is None:
            self.inst.setstate(state)
            return
        self._ctypes.memmove(self.address, state[0], self.size)
        self.inst.gauss_next = state[1]
