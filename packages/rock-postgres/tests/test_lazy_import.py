"""Every engine loads every installed plugin, and most never open a PostgreSQL store: loading
rock-postgres must not import asyncpg (some 2.5 MB in each engine and admin process)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from rock_core.plugins import Plugins
plugins = Plugins.load()
assert "postgresql" in plugins.record_stores(), plugins.record_stores()
print(sorted(m for m in sys.modules if m.split(".")[0] == "asyncpg"))
"""


def test_loading_the_plugin_does_not_import_asyncpg():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
