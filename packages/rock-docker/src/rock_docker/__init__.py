"""rock's runtime on a local Docker engine: one container per sandbox.

``DockerRuntime`` implements :class:`rock_core.runtime.Runtime`; the ``rock`` entry point
``docker = "rock_docker.plugin"`` registers it, so an engine configured with the ``docker``
runtime uses it.
"""

from rock_docker.runtime import DockerRuntime, default_rocklet_dir

__version__ = "0.1.0"

__all__ = ["DockerRuntime", "__version__", "default_rocklet_dir"]
