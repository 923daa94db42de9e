"""``python -m rock_docker.reaper``: remove containers after the engine that owned them is gone.

An engine that closes with many sandboxes (a trainer's exit) must not wait for dockerd to
remove them one by one, some ten a second; nor may it flood dockerd with a thousand removals at
once, which on a small host slows every one of them to a crawl and can leave some stuck in
"Removal In Progress". So :meth:`DockerRuntime.discard <rock_docker.runtime.DockerRuntime.discard>`
starts this program in a session of its own, writes the container ids to its standard input,
and returns. The reaper removes them a few at a time (``docker rm -f -v``, each after its
container was stopped, so left its networks, one at a time: :mod:`rock_docker._network_leave`), retries what dockerd
refuses for now (a removal already in progress, a busy mount), then removes each network group's
network it was handed that no container uses any more, and exits.

Usage: ``python -m rock_docker.reaper [--base-url URL] [--concurrency N] [--network NAME]... < ids``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["main", "reap", "spawn_reaper"]

# Tries per container, and the pause between two tries of the same one.
_TRIES = 5
_PAUSE = 2.0


def spawn_reaper(ids: Iterable[str], *, base_url: str | None, networks: Iterable[str] = ()) -> None:
    """Start the reaper in a session of its own, hand it ``ids`` (and the group ``networks``
    to remove once unused) and return (blocking, briefly).

    :raises OSError: the reaper could not be started.
    """
    command = [sys.executable, "-m", "rock_docker.reaper"]
    if base_url:
        command += ["--base-url", base_url]
    for network in sorted(set(networks)):
        command += ["--network", network]
    reaper = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    assert reaper.stdin is not None
    reaper.stdin.write("".join(f"{unit_id}\n" for unit_id in ids).encode("ascii"))
    reaper.stdin.close()


def reap(
    ids: Iterable[str],
    *,
    base_url: str | None = None,
    concurrency: int = 8,
    networks: Iterable[str] = (),
) -> list[str]:
    """Remove each container of ``ids`` (a missing one is fine), then each of ``networks`` no
    container is attached to (one another engine's member still uses stays); return the
    containers that could not be removed."""
    import docker
    import docker.errors

    from rock_docker._network_leave import leave_networks

    client = (
        docker.DockerClient(base_url=base_url, timeout=120)
        if base_url
        else docker.from_env(timeout=120)
    )

    def leave(unit_id: str) -> None:
        # One container's exit (its network leave) at a time, then the removals in parallel
        # (Docker 20.10's deadlock).
        try:
            leave_networks(client.api, unit_id)
        except Exception:  # noqa: BLE001 - dockerd did not answer: the removal says
            pass

    def remove(unit_id: str) -> str | None:
        leave(unit_id)
        for attempt in range(_TRIES):
            try:
                client.api.remove_container(unit_id, v=True, force=True)
                return None
            except docker.errors.NotFound:
                return None
            except docker.errors.APIError:
                if attempt + 1 < _TRIES:
                    time.sleep(_PAUSE)
            except Exception:  # noqa: BLE001 - the engine is gone: keep going with the others
                if attempt + 1 < _TRIES:
                    time.sleep(_PAUSE)
        return unit_id

    def remove_network(name: str) -> None:
        try:
            if client.api.inspect_network(name).get("Containers"):
                return  # a member of the group still runs: its removal takes the network
            client.api.remove_network(name)
        except Exception:  # noqa: BLE001 - gone already, or joined meanwhile: it stays
            pass

    try:
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            left = [unit_id for unit_id in pool.map(remove, ids) if unit_id is not None]
        for name in networks:
            remove_network(name)
        return left
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Read container ids from standard input (one a line) and remove them; ``1`` if any remain."""
    args = list(sys.argv[1:] if argv is None else argv)
    base_url = None
    concurrency = 8
    networks: list[str] = []
    while args:
        flag = args.pop(0)
        if flag == "--base-url" and args:
            base_url = args.pop(0)
        elif flag == "--concurrency" and args:
            concurrency = int(args.pop(0))
        elif flag == "--network" and args:
            networks.append(args.pop(0))
        else:
            sys.stderr.write(f"rock_docker.reaper: unknown argument {flag!r}\n")
            return 2
    ids = [line.strip() for line in sys.stdin if line.strip()]
    left = reap(ids, base_url=base_url, concurrency=concurrency, networks=networks)
    for unit_id in left:
        sys.stderr.write(f"rock_docker.reaper: could not remove container {unit_id}\n")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
