"""Kills a sandbox with E2B's SDK (sync): prints ``{"killed": bool}``."""

import json
import sys

from e2b import Sandbox

print(json.dumps({"killed": Sandbox.kill(sys.argv[1])}))
