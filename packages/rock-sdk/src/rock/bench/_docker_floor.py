"""The floor of ``rock bench scale --docker-floor``: plain containers started and removed
straight through Docker's API (the sandboxes' image, limits and network), so rock's start rate and
cleanup can be read against Docker's own, measured in the same run.

The floor is measured twice at each point, before rock's starts and after rock's teardown, and
rock's rate is divided by the mean of the two: on a shared machine the floor alone moved by up to
50 % between runs minutes apart, and the two floors' spread shows when the host moved during the
point (see :data:`FLOOR_METHOD`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rock.bench._cpu_split import cpu_snapshot, cpu_split, floor_split_mean, split_line
from rock.bench._host import docker, machine_busy_seconds, machine_steal_seconds, steal_percent

if TYPE_CHECKING:
    from rock.bench.scale import ScaleSettings

__all__ = ["FLOOR_CONCURRENCY", "FLOOR_METHOD", "docker_floor", "floor_figures", "floor_ratios"]

FLOOR_CONCURRENCY = 8
_FLOOR_LABEL = "rock.bench.floor"
# A spread of the two floors above this is called out: the host moved during the point.
SPREAD_WARNING = 0.1

FLOOR_METHOD = (
    "floor_before_*: Docker's own start rate and removal time (plain containers, the sandboxes' image, "
    "limits and network, 8 at a time through Docker's API; each removal after the container left its "
    "network, one leave at a time, as rock's removals do) measured before rock's starts; floor_after_*: "
    "the same, measured after rock's teardown (skipped when rock's containers were not all gone); "
    "floor_start_rate_per_second and floor_removal_seconds: the mean of the two (the before figure alone "
    "when there is no after); floor_start_rate_spread: (max - min) / mean of the two start rates, the "
    "share by which the host's pace moved during the point; start_rate_to_floor: rock's start rate / "
    "floor_start_rate_per_second (the goal's figure); start_rate_to_floor_before: rock's rate / the "
    "before floor alone (what runs before session 39 reported); start_rate_to_floor_range: rock's rate "
    "/ the higher and / the lower of the two floors; machine_cpu_ms_per_start (rock's, and each "
    "floor's): the whole machine's busy CPU (/proc/stat: every core, process and the kernel) from the "
    "first start to the last one running, per start; floor_machine_cpu_ms_per_start: the mean of the "
    "floors'; machine_cpu_per_start_to_floor: rock's / that mean (on a machine the starts keep busy, "
    "the start rate's ratio is about its inverse); cpu_ms_per_start_<group> and "
    "floor_cpu_ms_per_start_<group> (the floors' mean; floor_before_cpu_split and "
    "floor_after_cpu_split each floor's): that CPU split by process group (rock.bench._cpu_split); "
    "own_cpu_per_start_to_floor: machine_cpu_per_start_to_floor without the group 'other' "
    "(processes that are not Docker's, the containers', the engine's or the bench's: other work "
    "on the host) on either side"
)


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


def docker_floor(
    settings: ScaleSettings,
    count: int,
    say: Callable[[str], None],
    phase: str = "before",
    admin_pid: int | None = None,
) -> dict[str, Any]:
    """Start ``count`` plain containers (the sandboxes' image, memory, CPUs and network; a shell
    that sleeps) through Docker's API, :data:`FLOOR_CONCURRENCY` at a time, then remove them
    the same way; ``{"start_rate_per_second", "removal_seconds"}`` (blocking). ``phase`` only
    names the run in what is said ("before" or "after" rock's point); ``admin_pid``: the
    engine's process, counted apart in the CPU split (``cpu_split``, :mod:`rock.bench._cpu_split`)."""
    from concurrent.futures import ThreadPoolExecutor

    import docker

    client = docker.from_env(timeout=300)
    api = client.api
    network = _isolated_network()
    label = f"{_FLOOR_LABEL}={uuid.uuid4().hex[:8]}"
    if admin_pid == os.getpid():  # an embedded engine: idle here, and this process is the client
        admin_pid = None
    say(
        f"docker floor ({phase}): starting {count} plain containers on {network} "
        f"({FLOOR_CONCURRENCY} at a time)"
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

    leave = threading.Lock()

    def remove(container_id: str) -> None:
        # As rock's removals do (rock_docker._network_leave): stop one container at a time, so
        # its networks are left alone, then remove; Docker 20.10 can deadlock when many leave
        # one network at once.
        with leave, contextlib.suppress(docker.errors.APIError):
            api.stop(container_id, timeout=0)
            api.inspect_container(container_id)  # waits for dockerd's release of its networks
        api.remove_container(container_id, force=True, v=True)

    figures: dict[str, Any] = {}
    ids: list[str] = []
    try:
        snapshot = cpu_snapshot(admin_pid)
        t = time.perf_counter()
        busy, steal = machine_busy_seconds(), machine_steal_seconds()
        with ThreadPoolExecutor(FLOOR_CONCURRENCY) as pool:
            ids = list(pool.map(start, range(count)))
        took = time.perf_counter() - t
        busy_after = machine_busy_seconds()
        figures["cpu_split"] = cpu_split(snapshot, cpu_snapshot(admin_pid), count)
        say(f"docker floor ({phase}): CPU per start (ms): {split_line(figures['cpu_split'])}")
        figures["start_rate_per_second"] = round(count / took, 2)
        stolen = steal_percent(steal, machine_steal_seconds(), took)
        if stolen is not None:
            figures["host_steal_percent"] = stolen
        if busy is not None and busy_after is not None:
            figures["machine_cpu_ms_per_start"] = round(1000 * (busy_after - busy) / count, 1)
        say(f"docker floor ({phase}): {count} started in {took:.1f}s; removing them")
        t = time.perf_counter()
        with ThreadPoolExecutor(FLOOR_CONCURRENCY) as pool:
            list(pool.map(remove, ids))
        figures["removal_seconds"] = round(time.perf_counter() - t, 3)
        ids = []
    finally:
        for container_id in api.containers(all=True, quiet=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.APIError):
                remove(container_id["Id"])
        client.close()
    return figures


def floor_figures(
    before: dict[str, Any], after: dict[str, Any] | None, say: Callable[[str], None]
) -> dict[str, Any]:
    """The point's floor figures from its two floor runs (:data:`FLOOR_METHOD`); says both
    floors, their mean and spread, and calls the spread out when the host moved."""
    runs = [before] if after is None else [before, after]
    rates = [run["start_rate_per_second"] for run in runs]
    mean = sum(rates) / len(rates)
    figures: dict[str, Any] = {
        "floor_before_start_rate_per_second": before["start_rate_per_second"],
        "floor_after_start_rate_per_second": None
        if after is None
        else after["start_rate_per_second"],
        "floor_start_rate_per_second": round(mean, 2),
        "floor_start_rate_spread": round((max(rates) - min(rates)) / mean, 3) if after else None,
        "floor_before_removal_seconds": before["removal_seconds"],
        "floor_after_removal_seconds": None if after is None else after["removal_seconds"],
        "floor_removal_seconds": round(sum(run["removal_seconds"] for run in runs) / len(runs), 3),
    }
    cpus = [run["machine_cpu_ms_per_start"] for run in runs if "machine_cpu_ms_per_start" in run]
    figures["floor_before_machine_cpu_ms_per_start"] = before.get("machine_cpu_ms_per_start")
    figures["floor_after_machine_cpu_ms_per_start"] = (after or {}).get("machine_cpu_ms_per_start")
    figures["floor_machine_cpu_ms_per_start"] = round(sum(cpus) / len(cpus), 1) if cpus else None
    figures.update(floor_split_mean(runs))
    figures["floor_before_cpu_split"] = before.get("cpu_split")
    figures["floor_after_cpu_split"] = (after or {}).get("cpu_split")
    figures["floor_before_host_steal_percent"] = before.get("host_steal_percent")
    figures["floor_after_host_steal_percent"] = (after or {}).get("host_steal_percent")
    if after is None:
        say(f"docker floor: {rates[0]:g}/s before only (no floor after: the ratio uses that alone)")
        return figures
    spread = figures["floor_start_rate_spread"]
    moved = " (the host moved during the point)" if spread > SPREAD_WARNING else ""
    say(
        f"docker floor: {rates[0]:g}/s before, {rates[1]:g}/s after, mean {mean:.2f}/s, "
        f"spread {100 * spread:.0f}%{moved}"
    )
    return figures


def floor_ratios(rate: float | None, figures: dict[str, Any]) -> dict[str, Any]:
    """rock's start rate against the floors of :func:`floor_figures` (:data:`FLOOR_METHOD`)."""
    mean = figures.get("floor_start_rate_per_second")
    if not rate or not mean:
        return {}
    floors = [
        f
        for f in (
            figures["floor_before_start_rate_per_second"],
            figures["floor_after_start_rate_per_second"],
        )
        if f
    ]
    ratios: dict[str, Any] = {}
    rock_cpu, floor_cpu = (
        figures.get("machine_cpu_ms_per_start"),
        figures.get("floor_machine_cpu_ms_per_start"),
    )
    if rock_cpu and floor_cpu:
        ratios["machine_cpu_per_start_to_floor"] = round(rock_cpu / floor_cpu, 3)
        # The same without the CPU of processes that are neither Docker's, the containers', the
        # engine's nor the bench's (other work on a shared host moves the whole machine's figure).
        rock_other = figures.get("cpu_ms_per_start_other")
        floor_other = figures.get("floor_cpu_ms_per_start_other")
        if rock_other is not None and floor_other is not None and floor_cpu > floor_other:
            ratios["own_cpu_per_start_to_floor"] = round(
                (rock_cpu - rock_other) / (floor_cpu - floor_other), 3
            )
    return ratios | {
        "start_rate_to_floor": round(rate / mean, 3),
        "start_rate_to_floor_before": round(rate / floors[0], 3),
        "start_rate_to_floor_range": [round(rate / max(floors), 3), round(rate / min(floors), 3)],
    }
