"""``rock bench control-plane --runtime nomad``: the admin on rock's ``nomad`` runtime, against a
stand-in Nomad server whose ``--nodes`` simulated nodes run nothing.

The stand-in (rock-nomad's ``StandInNomad``, ``python -m rock_nomad.testing --simulate-tasks``)
runs in a process of its own: Nomad's API, its scheduler placing every sandbox's job on a node
(with each node's CPU and memory counted), and simulated clients whose tasks start after a
random ``--start-seconds`` and whose ports are served by one real rocklet in that process (the
mirror of the scripted runtime's shared rocklet). The admin is a real ``rock admin serve`` with
``[engine] runtime = "nomad"``: it registers one job per sandbox, follows it through Nomad's
event stream, and reaches each sandbox's rocklet at the node address and port Nomad gives.

``python -m rock.bench._control_plane_nomad --config FILE [--profile FILE] --host H --port P``:
that admin (as ``rock admin serve --config FILE``), with a cProfile of its event loop's thread written to FILE
at exit when asked (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["nomad_admin_command", "simulated_nomad", "stand_in_nomad"]

#: What each bench sandbox asks (the SDK clients' SandboxConfig): 128 MB, 0.1 CPU, which the
#: nomad runtime asks Nomad as 100 MHz (its default 1,000 MHz per CPU).
SANDBOX_MEMORY_MB = 128
SANDBOX_MHZ = 100


def simulated_nomad(
    nodes: int, sandboxes: int, start_seconds: tuple[float, float]
) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """A stand-in Nomad of ``nodes`` simulated nodes with room for every sandbox (twice over:
    placement is not what is measured, only what it costs), in a process of its own:
    ``(address, pid)``. Stopped (SIGTERM) at the end."""
    per_node = math.ceil(sandboxes / nodes) + 1
    lo, hi = start_seconds
    options = [
        "--nodes",
        str(nodes),
        "--cpu",
        str(max(4000, 2 * per_node * SANDBOX_MHZ)),
        "--memory",
        str(max(4096, 2 * per_node * SANDBOX_MEMORY_MB)),
        "--algorithm",
        "spread",
        "--simulate-tasks",
        f"{lo},{hi}",
    ]
    return stand_in_nomad(options, needed_by="--runtime nomad")


@contextlib.contextmanager
def stand_in_nomad(options: list[str], *, needed_by: str) -> Iterator[tuple[str, int]]:
    """A stand-in Nomad server (``python -m rock_nomad.testing`` with ``options``) in a process of
    its own: ``(address, pid)``. Stopped at the end (SIGTERM: it removes every container it
    made, then exits). ``needed_by`` names what needs it when rock-nomad's testing extra is
    missing."""
    try:
        import rock_nomad.testing  # noqa: F401 - only to fail early, with the fix
    except ImportError as exc:
        raise RuntimeError(
            f"{needed_by} needs rock-nomad with its testing extra "
            f"(pip install 'rock-nomad[testing]'): {exc}"
        ) from exc
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-m", "rock_nomad.testing", *options],
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode().strip()
        if not line.startswith("NOMAD_ADDR="):
            process.wait(10)
            log.seek(0)
            raise RuntimeError(
                "the stand-in Nomad server did not start: "
                f"{log.read().decode(errors='replace')[-2000:]}"
            )
        yield line.partition("=")[2], process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def nomad_admin_command(state_dir: Path, address: str) -> list[str]:
    """The admin (:func:`main`) with ``[engine] runtime = "nomad"`` at ``address`` (its config is
    written in ``state_dir``)."""
    config = state_dir / "admin.toml"
    config.write_text(f'[engine]\nruntime = "nomad"\n[plugins.nomad]\naddress = "{address}"\n')
    return [sys.executable, "-m", "rock.bench._control_plane_nomad", "--config", str(config)]


def main(argv: list[str] | None = None) -> int:
    """Serve the admin until SIGTERM or SIGINT (a cProfile written at exit with ``--profile``)."""
    parser = argparse.ArgumentParser(prog="python -m rock.bench._control_plane_nomad")
    parser.add_argument("--config", default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args(argv)

    from rock.admin import daemon
    from rock.admin.config import load_settings

    settings = load_settings(args.config, host=args.host, port=args.port)
    # uvicorn raises the SIGTERM it caught again once it has shut down: end through ``finally``.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.profile is None:
        return daemon.serve(settings)
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        return daemon.serve(settings)
    finally:
        profile.disable()
        profile.dump_stats(args.profile)


if __name__ == "__main__":
    sys.exit(main())
