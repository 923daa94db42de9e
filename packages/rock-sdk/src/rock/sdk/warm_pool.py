"""(rock) Warm pools from the SDK: sandboxes of one kind started ahead of the starts that need them.

::

    from rock.sdk import warm_pool
    from rock.sdk.sandbox.config import SandboxConfig

    config = SandboxConfig(image="python:3.11", memory="2g", cpus=1)
    await warm_pool(config, size=8, wait=120)   # embedded, or the admin at config.base_url
    async with Sandbox(config) as sandbox:      # claimed from the pool: ready in one round trip
        ...

A start is served from the pool when its sandbox is of the same kind: image, pull policy, memory,
CPUs, disk, environment and network (timeouts, ids and metadata may differ). ``size=0`` removes
the pool.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import attrs

from rock_core.actions import WarmPoolStatus
from rock_core.converters import spec_from_start_request
from rock_core.errors import StartupTimeout
from rock_core.models import NonBlankStr, PullPolicy

if TYPE_CHECKING:
    from rock.sdk.sandbox.config import SandboxConfig

__all__ = ["warm_pool"]

# Seconds between looks at a filling pool.
_POLL = 0.2


async def warm_pool(
    config: SandboxConfig, size: int, *, wait: float | None = None
) -> WarmPoolStatus | None:
    """Keep ``size`` sandboxes like ``config``'s started, in the engine ``config`` names.

    :param wait: seconds to wait until the pool holds ``size`` ready sandboxes (``None``: return
        at once; the pool fills in the background, only while no other start waits).
    :returns: the pool's status (``None`` once ``size=0`` removed it). A pool whose sandboxes
        cannot start says why in ``last_error``; waiting stops there.
    :raises InvalidParameter: a bad config, a ``size`` below 0, or more ready sandboxes than the
        engine allows (``max_warm_pool_members``).
    :raises StartupTimeout: ``wait`` seconds passed first (the pool goes on filling).
    """
    # Imported here: ``rock.sdk`` imports this module (its ``warm_pool`` is this function, not
    # the module), and the ``rock`` command imports ``rock.sdk`` without the sandbox client.
    from rock.sdk.sandbox.client import Sandbox
    from rock_core.engine.pool import pool_key

    sandbox = Sandbox(config)
    request = sandbox._start_request()
    driver = sandbox._get_driver()
    await driver.set_warm_pool(request, size)
    if request.snapshot is not None:  # the engine keys a snapshot's pool by its image, never pulled
        snaps = {s.name: s.image for s in await driver.list_snapshots() if s.on_node}
        image = NonBlankStr(snaps.get(request.snapshot, request.image))
        request = attrs.evolve(request, image=image, pull=PullPolicy.NEVER)
    key = pool_key(spec_from_start_request(request))
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        status = next((pool for pool in await driver.warm_pools() if pool.key == key), None)
        if status is None or deadline is None or status.ready >= status.size or status.last_error:
            return status
        if time.monotonic() >= deadline:
            raise StartupTimeout(
                f"warm pool {key} ({status.image}): {status.ready} of {status.size} ready after {wait:g}s",
                attempted="warm_pool",
            )
        await asyncio.sleep(_POLL)
