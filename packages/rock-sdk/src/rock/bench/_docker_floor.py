"""The floor of ``rock bench scale --docker-floor``: plain containers started and removed
straight through Docker's API (the sandboxes' image, limits and network), so rock's start rate and
cleanup can be read against Docker's own, measured in the same run."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rock.bench._host import docker

if TYPE_CHECKING:
    from rock.bench.scale import ScaleSettings

__all__ = ["FLOOR_CONCURRENCY", "docker_floor"]

FLOOR_CONCURRENCY = 8
_FLOOR_LABEL = "rock.bench.floor"


def _isolated_network() -> str:
    """The network rock's Docker runtime puts sandboxes on, by its own rule: Docker's default
    bridge when the engine runs with ``--icc=false`` (as ``scripts/ensure-docker.sh`` starts it),
    else rock's isolated bridge (made by the runtime if it does not exist yet)."""
    icc = docker(
        "network",
        "inspect",
        "bridge",
        "--format",
        '{{index .Options "com.docker.network.bridge.enable_icc"}}',
    )
    if icc.strip() == "false":
        return "bridge"
    out = docker(
        "network", "ls", "-q", "--filter", "label=rock.network=isolated", "--format", "{{.Name}}"
    )
    names = out.split()
    if not names:
        raise RuntimeError(
            "--docker-floor: Docker's default bridge lets containers talk to each other and rock's isolated "
            "network does not exist yet; start one sandbox first (or start dockerd with --icc=false)"
        )
    return names[0]


def docker_floor(settings: ScaleSettings, count: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Start ``count`` plain containers (the sandboxes' image, memory, CPUs and network; a shell
    that sleeps) through Docker's API, :data:`FLOOR_CONCURRENCY` at a time, then remove them
    the same way; the start rate and the removal seconds (blocking)."""
    from concurrent.futures import ThreadPoolExecutor

    import docker

    client = docker.from_env(timeout=300)
    api = client.api
    network = _isolated_network()
    label = f"{_FLOOR_LABEL}={uuid.uuid4().hex[:8]}"
    say(
        f"docker floor: starting {count} plain containers on {network} ({FLOOR_CONCURRENCY} at a time)"
    )

    def start(_: int) -> str:
        host = api.create_host_config(
            mem_limit=settings.memory,
            memswap_limit=settings.memory,
            nano_cpus=int(settings.cpus * 1e9),
            network_mode=network,
            init=True,
            security_opt=["no-new-privileges"],
            cap_drop=["ALL"],
        )
        container = api.create_container(
            settings.image,
            ["sh", "-c", "exec sleep 86400"],
            host_config=host,
            labels=dict([label.split("=")]),
        )
        container_id: str = container["Id"]
        api.start(container_id)
        return container_id

    def remove(container_id: str) -> None:
        api.remove_container(container_id, force=True, v=True)

    figures: dict[str, Any] = {}
    ids: list[str] = []
    try:
        t = time.perf_counter()
        with ThreadPoolExecutor(FLOOR_CONCURRENCY) as pool:
            ids = list(pool.map(start, range(count)))
        took = time.perf_counter() - t
        figures["floor_start_rate_per_second"] = round(count / took, 2)
        say(f"docker floor: {count} started in {took:.1f}s; removing them")
        t = time.perf_counter()
        with ThreadPoolExecutor(FLOOR_CONCURRENCY) as pool:
            list(pool.map(remove, ids))
        figures["floor_removal_seconds"] = round(time.perf_counter() - t, 3)
        ids = []
    finally:
        for container_id in api.containers(all=True, quiet=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.APIError):
                remove(container_id["Id"])
        client.close()
    return figures
