"""GEM environments (``rock.make("game:Sokoban-v0-easy")``) served from rock sandboxes.

:class:`GemProvider` (the ``gem`` environment provider) places each env in a process of its own
inside a sandbox; :mod:`rock_gem.routes` serves ROCK's GEM API on the admin. Users call
``rock.make`` / ``rock.amake`` / ``rock.make_vec`` (rock-sdk), not this package.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["DEFAULT_IMAGE", "GemEnv", "GemProvider", "__version__"]


def __getattr__(name: str) -> Any:
    # The provider imports the engine's models; `rock plugins` should not pay for that.
    if name in ("DEFAULT_IMAGE", "GemEnv", "GemProvider"):
        from rock_gem import provider

        return getattr(provider, name)
    raise AttributeError(name)
