"""``python -m rock_nomad.testing``: run a stand-in Nomad server until SIGINT or SIGTERM.

It prints ``NOMAD_ADDR=<url>`` (and ``NOMAD_TOKEN=<secret>`` with ``--acl``) on its first
lines, then serves; on a signal it removes every container it made and exits.

``--simulate-tasks LO,HI``: its tasks run nothing and Docker is not used; each starts after a
random LO..HI seconds and its ports are served by one real rocklet in this process (for
``rock bench control-plane --runtime nomad``).
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading

from rock_nomad.testing.server import StandInNomad

#: The collector's thresholds while serving, as the admin's (``rock.admin.daemon``): a young
#: collection after 1,000,000 new objects, so that a burst's short-lived objects (answers,
#: frames, parsed bodies) are freed before a collection walks them, and the cluster's tables
#: (jobs, allocations, evaluations, events: they grow with every start, and are not garbage)
#: are walked less often. At 50,000 a bench of 5,000 starts made about ten young collections,
#: 0.18-0.28 s of the stand-in's CPU; now none (its CPU a start 0.67/0.74 -> 0.62/0.64 ms).
GC_THRESHOLDS = (1_000_000, 50, 100)


def tune_gc() -> None:
    """Leave what the server made to start out of later collections (``gc.freeze``) and
    collect less often (:data:`GC_THRESHOLDS`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _seconds(text: str) -> tuple[float, float]:
    """``"LO,HI"`` or ``"S"`` as ``(lo, hi)`` seconds."""
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want LO,HI seconds, not {text!r}") from None
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not 0 <= parts[0] <= parts[1]:
        raise argparse.ArgumentTypeError(f"want LO,HI seconds with 0 <= LO <= HI, not {text!r}")
    return parts[0], parts[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rock_nomad.testing", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=3, help="client nodes to simulate (default 3)")
    parser.add_argument(
        "--cpu", type=int, default=4000, help="each node's CPU in MHz (default 4000)"
    )
    parser.add_argument("--cores", type=int, default=4, help="each node's cores (default 4)")
    parser.add_argument(
        "--memory", type=int, default=4096, help="each node's memory in MB (default 4096)"
    )
    parser.add_argument(
        "--disk", type=int, default=100_000, help="each node's disk in MB (default 100000)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="API port (default: a free one)")
    parser.add_argument(
        "--first-address", default="127.0.0.2", help="first node's loopback address"
    )
    parser.add_argument("--acl", action="store_true", help="require ACL tokens")
    parser.add_argument("--token", default=None, help="the management token's secret (with --acl)")
    parser.add_argument("--algorithm", choices=("binpack", "spread"), default="binpack")
    parser.add_argument(
        "--scheduler-delay", type=float, default=0.0, help="seconds before each evaluation"
    )
    parser.add_argument(
        "--start-delay", type=float, default=0.0, help="seconds before each allocation's setup"
    )
    parser.add_argument(
        "--simulate-tasks",
        type=_seconds,
        default=None,
        metavar="LO,HI",
        help="tasks run nothing (no Docker): each starts after a random LO..HI seconds",
    )
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    nomad = StandInNomad(
        nodes=args.nodes,
        node_cpu=args.cpu,
        node_cores=args.cores,
        node_memory=args.memory,
        node_disk=args.disk,
        host=args.host,
        port=args.port,
        first_address=args.first_address,
        acl=args.acl,
        management_token=args.token,
        algorithm=args.algorithm,
        scheduler_delay=args.scheduler_delay,
        start_delay=args.start_delay,
        simulate_tasks=args.simulate_tasks,
    )
    with nomad:
        print(f"NOMAD_ADDR={nomad.address}", flush=True)
        if args.acl:
            print(f"NOMAD_TOKEN={nomad.management_token}", flush=True)
        for node in nomad.nodes():
            print(
                f"node {node['Name']} {node['ID']} {node['Address']}", file=sys.stderr, flush=True
            )
        tune_gc()
        while not stop.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
