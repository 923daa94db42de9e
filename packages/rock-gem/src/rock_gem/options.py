"""rock-gem's settings: the ``[plugins.gem]`` table (or ``ROCK_PLUGIN_GEM_<KEY>`` variables).

Read by rock-core's converters (:func:`rock_core.converters.structure_options`), as the admin
reads its own tables: a bad value is named by its path and value
(``plugins.gem.cpus: expected a number > 0, got 0``), an unknown key with the keys there are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import attrs

from rock_core.converters import checked, structure_options
from rock_core.models import NonNegativeInt, PositiveFloat, PositiveInt, SizeStr

__all__ = ["GemOptions"]


@attrs.frozen(kw_only=True)
class GemOptions:
    """What ``[plugins.gem]`` may say; every key is optional.

    :param image: the env sandboxes' image (default ``$ROCK_ENVHUB_DEFAULT_DOCKER_IMAGE``, else
        :data:`rock_gem.provider.DEFAULT_IMAGE`); it needs ``python3`` 3.10 to 3.12. When its
        Python cannot import GEM, GEM's runtime is uploaded into each of its sandboxes once.
    :param envs_per_sandbox: how many envs one sandbox hosts.
    :param shared_processes: 0 (the default): each env has a process of its own; N: the envs of
        a sandbox share N processes (one per core is GEM's own pace), each env's generator
        states kept apart so that its trajectory is what it would be alone. A slow reset then
        holds up the other envs of its process, and a crash or timeout ends them.
    :param memory: each sandbox's memory (``"4g"``).
    :param cpus: each sandbox's CPUs.
    :param timeout: seconds one make, reset or step may take (a Sokoban-hard reset takes seconds).
    :param start_timeout: seconds a sandbox may take to start.
    :param warm_sandboxes: keep this many started sandboxes of the default image in the engine's
        warm pool, so that a make that needs a new sandbox claims one instead of starting it.
    :param envhub_db: EnvHub's database (see :mod:`rock_gem.envhub`; default
        ``$ROCK_ENVHUB_DB_URL``, else a file beside the engine's store).
    :param runtime_dir: the folder of GEM's runtime zips, uploaded into sandboxes of images
        without GEM (default ``$ROCK_GEM_RUNTIME_DIR``, else ``share/rock-gem/runtime`` under
        the installation's prefix; see :mod:`rock_gem.runtime`).
    """

    image: str | None = checked(Optional[str], default=None)
    envs_per_sandbox: PositiveInt = checked(PositiveInt, default=32)
    shared_processes: NonNegativeInt = checked(NonNegativeInt, default=0)
    memory: SizeStr = checked(SizeStr, default="4g")
    cpus: PositiveFloat = checked(PositiveFloat, default=2.0)
    timeout: PositiveFloat = checked(PositiveFloat, default=300.0)
    start_timeout: PositiveFloat = checked(PositiveFloat, default=300.0)
    warm_sandboxes: NonNegativeInt = checked(NonNegativeInt, default=0)
    envhub_db: str | None = checked(Optional[str], default=None)
    runtime_dir: str | None = checked(Optional[str], default=None)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> GemOptions:
        """Read ``[plugins.gem]`` (or the provider's keyword arguments).

        :raises InvalidParameter: naming ``plugins.gem.<key>`` and the value, every bad key at once.
        """
        return structure_options(table, cls, path="plugins.gem")
