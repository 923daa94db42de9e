"""Test support for rock-nomad: a stand-in Nomad server that runs its tasks on real Docker.

:class:`StandInNomad` serves Nomad's HTTP API (``/v1``) on ``127.0.0.1:<free port>``, written
from Nomad's documented API: job register, read, deregister and purge; evaluations and the
scheduler's placement (with Nomad's ``FailedTGAllocs`` reasons when nothing fits); allocations
and their lifecycle; nodes with resources; blocking queries (``index``/``wait``,
``X-Nomad-Index``) and the event stream; Nomad's plain-text errors and status codes; optional
ACL tokens (``X-Nomad-Token`` or ``Authorization: Bearer``).

Each task runs as a real container on the local Docker engine, with its artifacts downloaded
over HTTP and checksummed into its ``/local`` directory. Several client nodes with limited CPU
and memory are simulated; each has a loopback address of its own (``127.0.0.2``, ``127.0.0.3``,
…) on which its tasks' ports are published. Hooks inject faults: image pull failure, task exit,
OOM kill, node lost.

- as a context manager: ``with StandInNomad(nodes=3) as nomad: ... nomad.address ...``
- as pytest fixtures: ``pytest_plugins = ["rock_nomad.testing.fixtures"]`` gives
  ``stand_in_nomad`` (3 nodes, one per test);
- as a program for benches: ``python -m rock_nomad.testing --nodes 3 --port 4646``.

Needs the ``testing`` extra (starlette, uvicorn, docker, httpx) and a Docker engine.
"""

from rock_nomad.testing._client import LABEL_OWNER, LABEL_SERVER
from rock_nomad.testing._cluster import NodeSpec
from rock_nomad.testing.server import StandInNomad, remove_leftovers

__all__ = ["LABEL_OWNER", "LABEL_SERVER", "NodeSpec", "StandInNomad", "remove_leftovers"]
