"""``rock bench ...``: measured runs that print their figures (never part of the test suite)."""

from __future__ import annotations

import signal

import click

from rock.bench import (
    _cli_admin,
    _cli_agents,
    _cli_claim,
    _cli_control_plane,
    _cli_e2b,
    _cli_egress,
    _cli_engine,
    _cli_fork,
    _cli_pause,
    _cli_reset,
    _cli_rollout,
    _cli_scale,
)

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """Run rock's benchmarks and batch jobs; each prints its figures."""
    # Stopped with SIGTERM (`timeout`, a cancelled CI job), a bench cleans up as after Ctrl-C:
    # asyncio.run cancels its task, which stops the sandboxes, admins and servers it started.
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


# Each command lives in the module of its kind of bench; each module imports its bench only when
# its command runs, so `rock --help` and `rock bench --help` load none.
for _command in (
    _cli_rollout.rollout,
    _cli_engine.sandbox,
    _cli_engine.gem,
    _cli_engine.monitor,
    _cli_engine.archive,
    _cli_pause.pause,
    _cli_egress.egress,
    _cli_reset.reset,
    _cli_fork.fork,
    _cli_admin.admin,
    _cli_admin.proxy,
    _cli_admin.cluster,
    _cli_admin.ha,
    _cli_scale.scale,
    _cli_scale.orphans,
    _cli_agents.agents,
    _cli_e2b.e2b,
    _cli_control_plane.control_plane,
    _cli_claim.claim,
):
    bench.add_command(_command)
