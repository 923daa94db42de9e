"""rock is a library to the program that embeds it (issue #30 point 5): its loggers write
nothing on their own, and write where the program configured logging once it has."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, sys
import rock_core
if sys.argv[1] == "configured":
    logging.basicConfig(format="configured: %(name)s %(message)s")
logging.getLogger("rock.engine").warning("a warning of the engine")
logging.getLogger("rock.sdk.sandbox.client").warning("a warning of the SDK")
"""


def _run(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stderr


def test_rocks_warnings_reach_stderr_only_through_the_programs_logging() -> None:
    assert _run("bare") == ""
    configured = _run("configured")
    assert "configured: rock.engine a warning of the engine" in configured
    assert "configured: rock.sdk.sandbox.client a warning of the SDK" in configured
