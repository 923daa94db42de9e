"""rock-postgres's settings: the ``[plugins.postgres]`` table (or ``ROCK_PLUGIN_POSTGRES_<KEY>``
variables). The server itself is the engine's ``store`` URL.

Read by rock-core's converters (:func:`rock_core.converters.structure_options`): a bad value is
named by its path and value (``plugins.postgres.pool_size: expected an integer > 0, got 0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rock_core.converters import checked, structure_options
from rock_core.models import PositiveFloat, PositiveInt

__all__ = ["PostgresOptions"]


@attrs.frozen(kw_only=True)
class PostgresOptions:
    """What ``[plugins.postgres]`` may say; every key is optional.

    :param connect_timeout: seconds to reach the server and open the store (connect, log in,
        check the schema); past it the engine does not start, naming ``store`` and the server.
    :param call_timeout: seconds one call (a record written, a listing) may take; past it the
        call fails naming ``store``. The engine waits for a write on its event loop, so this
        bounds how long a stalled server can hold the engine.
    :param pool_size: connections kept open: how many calls from different threads run at once.
    """

    connect_timeout: PositiveFloat = checked(PositiveFloat, default=10.0)
    call_timeout: PositiveFloat = checked(PositiveFloat, default=10.0)
    pool_size: PositiveInt = checked(PositiveInt, default=4)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> PostgresOptions:
        """Read ``[plugins.postgres]`` (the store's keyword arguments).

        :raises InvalidParameter: naming ``plugins.postgres.<key>`` and the value.
        """
        return structure_options(table, cls, path="plugins.postgres")
