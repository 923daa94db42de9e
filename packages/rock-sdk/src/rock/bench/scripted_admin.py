"""An admin server whose engine places sandboxes on a scripted in-memory runtime, for
``rock bench admin --scripted`` and ``rock bench control-plane``: the admin (routes, engine,
store, metrics) at a number of sandboxes this machine could not run as containers.

Every sandbox's unit lives in the admin's memory (:class:`rock_core.testing.ScriptedRuntime`)
and its rocklet calls go to one real rocklet in a thread of this process, so commands work but
share that rocklet, and its work counts in the admin's CPU and memory. Nothing outlives the
process (units, like the rocklet, end with it) unless ``--units-file`` is given: then the units
are written there at exit and read back at start, as containers outlive a restarted admin.

``--rocklet process`` serves that rocklet from a process of its own instead (started and ended
with the admin's, its pid in ``rocklet.pid`` beside ``--units-file``): the admin's CPU and memory
are then its own, as a sandbox's rocklet's would be. It listens on a unix socket in a private
temporary folder, as rock-docker's sandboxes are reached by default (a readiness probe over
loopback TCP costs the admin about twice the CPU of one over a unix socket, most of it the
kernel's). That rocklet answers the engine's readiness
probes in an event loop, and hands every other connection to the real rocklet's thread
(:mod:`rock_core.testing.loop_rocklet`): 16,000 probes at once are 16,000 short answers, not
16,000 threads.

``--start-seconds LO,HI`` makes every unit's start take a uniformly random LO..HI seconds (a
container's start; default: none), waited without a process or CPU. ``--profile FILE`` writes a
cProfile of the admin's event loop thread there at exit (``python -m pstats FILE``).

    python -m rock.bench.scripted_admin --host 127.0.0.1 --port 8080

Settings are read as ``rock admin serve`` reads them (``ROCK_ADMIN_STATE_DIR``, ``ROCK_ENGINE_*``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_seconds"]


def parse_seconds(text: str) -> tuple[float, float]:
    """``"LO,HI"`` or ``"S"`` as ``(lo, hi)`` seconds."""
    parts = [float(p) for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not 0 <= parts[0] <= parts[1]:
        raise ValueError(f"want LO,HI seconds with 0 <= LO <= HI, not {text!r}")
    return parts[0], parts[1]


def _runtime(address: tuple[str, int], start_seconds: tuple[float, float]) -> Any:
    from rock_core.testing import ScriptedRuntime

    class _SlowStarts(ScriptedRuntime):
        async def start(self, handle: Any, *, on_phase: Any = None) -> None:
            if start_seconds[1] > 0:
                await asyncio.sleep(random.uniform(*start_seconds))
            await super().start(handle, on_phase=on_phase)

    return _SlowStarts(address)


def _load_units(runtime: Any, path: Path) -> None:
    from rock_core.models import UnitState
    from rock_core.testing.scripted_runtime import _Unit

    if not path.exists():
        return
    saved = json.loads(path.read_text())
    for unit_id, (sandbox_id, labels, state) in saved.items():
        runtime.units[unit_id] = _Unit(sandbox_id, labels, UnitState(state))
    last = max((int(u.rsplit("-", 1)[1]) for u in saved), default=0)
    runtime._ids = itertools.count(last + 1)


def _save_units(runtime: Any, path: Path) -> None:
    units = {u: [x.sandbox_id, x.labels, x.state.value] for u, x in runtime.units.items()}
    path.write_text(json.dumps(units))


@contextlib.contextmanager
def _rocklet_process(pid_file: Path | None) -> Iterator[tuple[str, int]]:
    """A rocklet in a process of its own (``--serve-rocklet``) on a unix socket in a private
    temporary folder, its pid written to ``pid_file``; yield its ``(path, 0)``."""
    with tempfile.TemporaryDirectory(prefix="rock-scripted-rocklet-") as folder:
        path = str(Path(folder) / "rocklet.sock")
        process = subprocess.Popen(
            [sys.executable, "-m", "rock.bench.scripted_admin", "--serve-rocklet", path],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            host, port = process.stdout.readline().split()
            if pid_file is not None:
                pid_file.write_text(str(process.pid))
            yield host, int(port)
        finally:
            process.terminate()
            process.wait()


def _serve_rocklet(unix_path: str | None) -> int:
    """Serve a rocklet whose readiness probes an event loop answers
    (:class:`rock_core.testing.loop_rocklet.LoopFirstRocklet`) on ``unix_path`` (``None``: a
    port of 127.0.0.1), print ``host port`` (``path 0``), and end with the process that started
    this one."""
    from rock_core.testing.loop_rocklet import serve_loop_first_rocklet

    parent = os.getppid()
    serve_loop_first_rocklet(
        lambda address: print(*address, flush=True),
        until=lambda: os.getppid() != parent,  # the admin was killed: this one ends too
        unix_path=unix_path,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m rock.bench.scripted_admin", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--start-seconds", type=parse_seconds, default=(0.0, 0.0))
    parser.add_argument("--units-file", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--rocklet", choices=["thread", "process"], default="thread")
    parser.add_argument(  # a unix socket's path, or "" for a port
        "--serve-rocklet", nargs="?", const="", default=None, help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve_rocklet is not None:
        return _serve_rocklet(args.serve_rocklet or None)

    from rock.admin import daemon
    from rock.admin.config import load_settings
    from rock_core.testing import rocklet_in_thread

    settings = load_settings(None, host=args.host, port=args.port)
    # Hold the admin's port while the rocklet takes a free one, so that it cannot take that one.
    with socket.socket() as reserved:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reserved.bind((settings.host, settings.port))
        pid_file = None if args.units_file is None else args.units_file.parent / "rocklet.pid"
        rocklet = rocklet_in_thread() if args.rocklet == "thread" else _rocklet_process(pid_file)
        with rocklet as address:
            reserved.close()
            runtime = _runtime(address, args.start_seconds)
            if args.units_file is not None:
                _load_units(runtime, args.units_file)
            # uvicorn raises the SIGTERM it caught again once it has shut down: let it end the
            # process through the ``finally`` below, which keeps the units.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            profile = None
            if args.profile is not None:
                import cProfile

                profile = cProfile.Profile()
                profile.enable()
            try:
                return daemon.serve(settings, runtime=runtime)
            finally:
                if profile is not None:
                    profile.disable()
                    profile.dump_stats(args.profile)
                if args.units_file is not None:
                    _save_units(runtime, args.units_file)


if __name__ == "__main__":
    sys.exit(main())
