"""rock-core: the domain of rock sandboxes, independent of any backend.

Models, size units, errors, the lifecycle state machine, the hook specifications and the plugin
manager. rock-core never imports docker, nomad, boto3 or gem: backends are plugins that import it.
"""

from rock_core.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
