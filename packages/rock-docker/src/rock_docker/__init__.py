"""rock's runtime on a local Docker engine: one container per sandbox.

``DockerRuntime`` implements :class:`rock_core.runtime.Runtime`; the ``rock`` entry point
``docker = "rock_docker.plugin"`` registers it, so an engine configured with the ``docker``
runtime uses it.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["DockerRuntime", "__version__", "default_rocklet_dir"]


def __getattr__(name: str) -> Any:
    # On first use: importing the plugin module (``rock_docker.plugin``) must not load Docker's client.
    if name in ("DockerRuntime", "default_rocklet_dir"):
        from rock_docker import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'rock_docker' has no attribute {name!r}")
