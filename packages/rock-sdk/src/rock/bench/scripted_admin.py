"""An admin server whose engine places sandboxes on a scripted in-memory runtime, for
``rock bench admin --scripted``: the admin (routes, engine, store, metrics) at a number of
sandboxes this machine could not run as containers.

Every sandbox's unit lives in the admin's memory (:class:`rock_core.testing.ScriptedRuntime`)
and its rocklet calls go to one real rocklet in a thread of this process, so commands work but
share that rocklet, and its work counts in the admin's CPU and memory. Nothing outlives the
process: units, like the rocklet, end with it.

    python -m rock.bench.scripted_admin --host 127.0.0.1 --port 8080

Settings are read as ``rock admin serve`` reads them (``ROCK_ADMIN_STATE_DIR``, ``ROCK_ENGINE_*``).
"""

from __future__ import annotations

import argparse
import socket
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m rock.bench.scripted_admin", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)

    from rock.admin import daemon
    from rock.admin.config import load_settings
    from rock_core.testing import ScriptedRuntime, rocklet_in_thread

    settings = load_settings(None, host=args.host, port=args.port)
    # Hold the admin's port while the rocklet takes a free one, so that it cannot take that one.
    with socket.socket() as reserved:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reserved.bind((settings.host, settings.port))
        with rocklet_in_thread() as address:
            reserved.close()
            return daemon.serve(settings, runtime=ScriptedRuntime(address))


if __name__ == "__main__":
    sys.exit(main())
