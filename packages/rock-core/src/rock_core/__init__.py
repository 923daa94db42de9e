"""rock-core: the domain of rock sandboxes, independent of any backend.

Models, size units, errors, the lifecycle state machine, the hook specifications and the plugin
manager. rock-core never imports docker, nomad, boto3 or gem: backends are plugins that import it.
"""

import importlib.util
import logging
import sys

from rock_core.hookspecs import hookimpl

# httpcore (under httpx, which the engine, the SDK and the admin use for every rocklet and
# admin call) asks ``import sniffio`` on each request and each lock it makes. Where sniffio is
# not installed every such import searches sys.path again: 75 us a time here, up to 2 ms on a
# loaded machine, several times per request. Recording it as absent is what Python's import
# machinery itself does for a module known to be missing; the answer is then immediate.
if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]

# A library logs and leaves the output to its application: without this, Python prints an
# application's unconfigured warnings of rock's loggers ("rock.engine", ...) on stderr.
logging.getLogger("rock").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
