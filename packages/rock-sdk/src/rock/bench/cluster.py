"""``rock bench cluster``: the same sandboxes started through the admin on the Docker runtime and
on the ``nomad`` runtime (a stand-in Nomad cluster of ``--nodes`` nodes), in the same run.

For each runtime, in turn:

* an admin is started for it (``rock admin serve`` on a free port, a temporary state directory;
  for Nomad with ``[engine] runtime = "nomad"`` and ``[plugins.nomad] address`` of a stand-in
  Nomad server in a process of its own, ``python -m rock_nomad.testing``: rock-nomad's
  ``StandInNomad``, its tasks real containers on the local Docker engine, each node on its own
  loopback address);
* ``--sandboxes`` starts are sent at once (``POST /start_async``, one connection each); every
  50 ms the admin's counts by state (``GET /admin/status``) are read, and when they change, its
  listing (``GET /sandboxes``): each sandbox's start is the time from its request to the listing
  that first shows it ``running``; "all running" is the time from the first request to the last
  of those. (A listing of every sandbox every 50 ms was a fifth of the admin's CPU, and more of
  a longer run's: the measure weighed on what it measured.);
* the admin's resident memory (``VmRSS``) is sampled every 50 ms from its start to its stop: the
  peak is reported;
* both runs' sandboxes get the same CPU: a quota of ``--cpus`` and Docker's CPU weight (the
  nomad run sets ``mhz_per_cpu`` so that Nomad's shares by MHz come to Docker's 1024, and its
  simulated cores to that many MHz; see :func:`mhz_per_cpu`);
* the CPU seconds the admin and, on Nomad, the stand-in's process spent from the first request
  to all running are read from ``/proc``: the stand-in's is work a real cluster does on its own
  servers and nodes, not on the admin's machine, but here it shares the same cores, and the
  ratio below counts it all the same (nothing is subtracted);
* every sandbox is stopped, the bench waits until the admin has removed them all (reported: a
  run's removals would otherwise overlap the next runtime's starts on the same Docker engine),
  and the admin is stopped.

The figures of both runtimes are printed side by side, with the Nomad run's all-running time as
a ratio of Docker's and the issue's goals (#12 point 6: all run; Nomad's all-running within 1.3x
Docker's; the admin within 150 MB).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx

from rock.bench._control_plane_nomad import stand_in_nomad
from rock.bench._output import dumps
from rock.bench.admin import PREFIX, _rock_command, rss_bytes
from rock.bench.rollout import percentile
from rock_core.ports import listen_port

__all__ = ["ClusterBenchSettings", "dumps", "run_cluster_bench", "table"]

#: The issue's goals for the Nomad run.
GOAL_RATIO = 1.30
GOAL_ADMIN_MB = 150.0


@attrs.frozen(kw_only=True)
class ClusterBenchSettings:
    """What ``rock bench cluster`` runs.

    :param sandboxes: sandboxes started at once on each runtime.
    :param nodes: the stand-in Nomad cluster's nodes.
    :param image: every sandbox's image (it must be present: neither runtime pulls here).
    :param memory: / :param cpus: every sandbox's size.
    :param runtimes: which runtimes to measure, in order: ``docker``, ``nomad``, and
        ``docker-published`` (Docker publishing the ports, as Nomad's docker driver does).
    :param timeout: seconds to wait for all sandboxes of one runtime to run.
    """

    sandboxes: int = 100
    nodes: int = 3
    image: str = "python:3.11"
    memory: str = "128m"
    cpus: float = 0.1
    runtimes: tuple[str, ...] = ("docker", "nomad")
    timeout: float = 900.0


def mhz_per_cpu(settings: ClusterBenchSettings) -> int:
    """The nomad run's ``mhz_per_cpu``: what gives its sandboxes the CPU weight Docker gives.

    Nomad's docker driver sets a task's CPU shares to its MHz; Docker's runtime leaves them at
    Docker's 1024. With rock's default of 1000 MHz a CPU, a sandbox of 0.1 CPU had shares of
    100: ten times less weight than its Docker twin against everything else on this machine (the
    admin, dockerd, the bench), and its rocklet took twice as long to start under load. On a
    real cluster the nodes run only sandboxes, whose shares are all by MHz; here both runs'
    sandboxes should weigh the same.
    """
    return max(1, round(1024 / settings.cpus))


def _stand_in(
    settings: ClusterBenchSettings, memory_bytes: int
) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """A stand-in Nomad cluster with room for every sandbox (placement is not what is measured),
    in a process of its own (``python -m rock_nomad.testing``), so that its CPU is measured apart
    from the admin's and this process's: ``(address, pid)``."""
    per_node = math.ceil(settings.sandboxes / settings.nodes) + 1
    node_memory = max(4096, per_node * math.ceil(memory_bytes / 2**20) * 2)
    # Each simulated core is mhz_per_cpu MHz: with cpu_hard_limit, Nomad's docker driver gives a
    # task (its MHz / the node's MHz) x the node's cores of CPU time, so a sandbox's cpus are
    # the same share of a real core as on Docker.
    cores = max(4, math.ceil(per_node * settings.cpus * 2))
    node_cpu = cores * mhz_per_cpu(settings)
    options = [
        "--nodes",
        str(settings.nodes),
        "--cpu",
        str(node_cpu),
        "--cores",
        str(cores),
        "--memory",
        str(node_memory),
        "--algorithm",
        "spread",
    ]
    return stand_in_nomad(options, needed_by="the nomad run")


@contextlib.asynccontextmanager
async def _admin(config: str) -> AsyncIterator[tuple[str, int, Path]]:
    """``rock admin serve`` with ``config`` (TOML) on a free port; ``(url, pid, log)``."""
    state_dir = Path(tempfile.mkdtemp(prefix="rock-bench-cluster-"))
    (state_dir / "admin.toml").write_text(config)
    port = listen_port()
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state_dir)}
    env.pop("ROCK_BASE_URL", None)
    log_path = state_dir / "admin.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                *_rock_command(),
                "admin",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--config",
                str(state_dir / "admin.toml"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(timeout=1, trust_env=False) as probe:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(url + "/healthz")).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the admin did not come up:\n{log_path.read_text(errors='replace')[-2000:]}"
                    )
                await asyncio.sleep(0.1)
        yield url, process.pid, log_path
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, 60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(state_dir, ignore_errors=True)


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used so far (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, IndexError, ValueError):
        return None


def _own_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _result(response: httpx.Response, what: str) -> Any:
    envelope = response.json()
    if response.status_code != 200 or envelope.get("status") != "Success":
        raise RuntimeError(
            f"{what} failed: HTTP {response.status_code} {json.dumps(envelope)[:500]}"
        )
    return envelope["result"]


async def _states(http: httpx.AsyncClient) -> dict[str, tuple[str, str | None]]:
    """Every sandbox's ``(state, reason)`` from the admin's listing."""
    out: dict[str, tuple[str, str | None]] = {}
    page = 1
    while True:
        result = _result(
            await http.get(f"{PREFIX}/sandboxes", params={"page": page, "page_size": 500}), "list"
        )
        for item in result["items"]:
            out[item["sandbox_id"]] = (item.get("state"), item.get("reason"))
        if not result["has_more"] or not result["items"]:
            return out
        page += 1


async def _why_ended(http: httpx.AsyncClient, sandbox_id: str) -> str:
    """What the admin says of a sandbox that left its listing: its state and the phases that failed."""
    status = _result(
        await http.get(
            f"{PREFIX}/get_status", params={"sandbox_id": sandbox_id, "include_all_states": "true"}
        ),
        "get_status",
    )
    failed = [
        f"{name}: {phase.get('message')}"
        for name, phase in (status.get("status") or {}).items()
        if (phase or {}).get("status") == "failed"
    ]
    return f"{status.get('state')}" + (f" ({'; '.join(failed)})" if failed else "")


#: Seconds the bench waits, after its stops, for the admin to have removed every sandbox.
REMOVAL_WAIT = 180.0


async def _until_removed(http: httpx.AsyncClient) -> float | None:
    """Wait until the admin holds no sandbox but deleted ones (every unit removed); the seconds
    that took, or ``None`` past :data:`REMOVAL_WAIT`. The next runtime's run then starts on a
    Docker engine that is not still removing this run's containers."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < REMOVAL_WAIT:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            counts = (await http.get("/admin/status")).json()["sandboxes"]
            if not any(n for state, n in counts.items() if state != "deleted"):
                return round(time.monotonic() - t0, 2)
        await asyncio.sleep(0.2)
    return None


async def _run_one(
    runtime: str,
    settings: ClusterBenchSettings,
    config: str,
    say: Callable[[str], None],
    stand_in_pid: int | None = None,
) -> dict[str, Any]:
    figures: dict[str, Any] = {"runtime": runtime}
    async with _admin(config) as (url, pid, log_path):
        peak = [rss_bytes(pid) or 0]
        figures["admin_rss_idle_mb"] = round(peak[0] / 2**20, 1)
        sampling = True

        async def sample() -> None:
            while sampling:
                peak[0] = max(peak[0], rss_bytes(pid) or 0)
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        run = f"cluster-{runtime}-{os.getpid()}-{int(time.time())}"
        ids = [f"{run}-{n:03d}" for n in range(settings.sandboxes)]
        limits = httpx.Limits(
            max_connections=settings.sandboxes + 4, max_keepalive_connections=settings.sandboxes + 4
        )
        async with httpx.AsyncClient(
            base_url=url, timeout=600, limits=limits, trust_env=False
        ) as http:
            sent: dict[str, float] = {}
            running: dict[str, float] = {}
            try:
                body = {"image": settings.image, "memory": settings.memory, "cpus": settings.cpus}
                say(
                    f"{runtime}: starting {settings.sandboxes} sandboxes at once ({settings.memory}, {settings.cpus:g} cpus)"
                )
                t0 = time.monotonic()
                admin_cpu0, own_cpu0 = _cpu_seconds(pid) or 0.0, _own_cpu()
                stand_in_cpu0 = _cpu_seconds(stand_in_pid) if stand_in_pid else None

                async def start(sandbox_id: str) -> None:
                    sent[sandbox_id] = time.monotonic()
                    _result(
                        await http.post(
                            f"{PREFIX}/start_async", json={**body, "sandbox_id": sandbox_id}
                        ),
                        "start_async",
                    )

                await asyncio.gather(*(start(i) for i in ids))
                deadline = t0 + settings.timeout
                seen: dict[str, int] | None = None
                while len(running) < len(ids):
                    counts = (await http.get("/admin/status")).json()["sandboxes"]
                    if counts != seen:  # something changed: who?
                        seen = counts
                        states = await _states(http)
                        now = time.monotonic()
                        for sandbox_id in ids:
                            state = states.get(sandbox_id, ("?", None))[0]
                            if state == "running":
                                running.setdefault(sandbox_id, now)
                            elif (
                                state == "?" and sandbox_id not in running
                            ):  # the listing holds pending and running ones
                                raise RuntimeError(
                                    f"{runtime}: sandbox {sandbox_id} ended before it ran: {await _why_ended(http, sandbox_id)}"
                                )
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{runtime}: {len(ids) - len(running)} sandboxes not running after {settings.timeout:g}s"
                        )
                    await asyncio.sleep(0.05)
                starts = [running[i] - sent[i] for i in ids]
                figures["sandboxes_running"] = len(running)
                figures["start_p50_s"] = round(percentile(starts, 50) or 0, 2)
                figures["start_p95_s"] = round(percentile(starts, 95) or 0, 2)
                figures["all_running_s"] = round(max(running.values()) - t0, 2)
                # Where the CPU went while they started: the admin, this process (its requests and
                # listings) and, on the nomad run, the stand-in Nomad server and its nodes.
                figures["admin_cpu_s_to_all_running"] = round(
                    (_cpu_seconds(pid) or 0.0) - admin_cpu0, 2
                )
                figures["bench_process_cpu_s_to_all_running"] = round(_own_cpu() - own_cpu0, 2)
                if stand_in_pid and stand_in_cpu0 is not None:
                    figures["stand_in_cpu_s_to_all_running"] = round(
                        (_cpu_seconds(stand_in_pid) or 0.0) - stand_in_cpu0, 2
                    )
                if runtime == "nomad":
                    hosts: dict[str | None, int] = {}
                    for sandbox_id in ids[:: max(1, len(ids) // 20)]:
                        status = _result(
                            await http.get(
                                f"{PREFIX}/get_status", params={"sandbox_id": sandbox_id}
                            ),
                            "get_status",
                        )
                        hosts[status.get("host_name")] = hosts.get(status.get("host_name"), 0) + 1
                    figures["nodes_seen_in_a_sample"] = dict(
                        sorted(hosts.items(), key=lambda kv: str(kv[0]))
                    )
            finally:
                say(f"{runtime}: stopping {len(sent)} sandboxes")

                async def stop(sandbox_id: str) -> None:
                    with contextlib.suppress(httpx.HTTPError):
                        await http.post(f"{PREFIX}/stop", json={"sandbox_id": sandbox_id})

                await asyncio.gather(*(stop(i) for i in sent))
                figures["all_removed_after_stop_s"] = await _until_removed(http)
                sampling = False
                await sampler
        figures["admin_rss_peak_mb"] = round(peak[0] / 2**20, 1)
        figures["admin_log_lines"] = sum(1 for _ in open(log_path, "rb"))  # noqa: SIM115 - read before the folder goes
    return figures


async def run_cluster_bench(
    settings: ClusterBenchSettings, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run the bench (see the module docstring); the figures of each runtime and the comparison."""
    from rock_core.sizes import parse_size

    memory_bytes = parse_size(settings.memory, field="memory")
    results: dict[str, Any] = {
        "sandboxes": settings.sandboxes,
        "nodes": settings.nodes,
        "image": settings.image,
        "memory": settings.memory,
        "cpus": settings.cpus,
        "host_cpus": os.cpu_count(),
    }
    for runtime in settings.runtimes:
        if runtime == "docker":
            results["docker"] = await _run_one("docker", settings, "", say)
        elif runtime == "docker-published":
            # Docker publishing each sandbox's ports (a docker-proxy per port), as Nomad's docker
            # driver does on every node: the container work of the nomad run, on one host.
            config = "[engine.runtime_options]\npublish_ports = true\n"
            results["docker-published"] = await _run_one("docker-published", settings, config, say)
        elif runtime == "nomad":
            with _stand_in(settings, memory_bytes) as (address, stand_in_pid):
                say(
                    f"nomad: a stand-in Nomad of {settings.nodes} nodes at {address} (process {stand_in_pid})"
                )
                config = (
                    f'[engine]\nruntime = "nomad"\n[plugins.nomad]\naddress = "{address}"\n'
                    f"mhz_per_cpu = {mhz_per_cpu(settings)}\n"
                )
                results["nomad"] = await _run_one("nomad", settings, config, say, stand_in_pid)
                results["nomad"]["mhz_per_cpu"] = mhz_per_cpu(settings)
        else:
            raise RuntimeError(f"unknown runtime {runtime!r} (docker, docker-published or nomad)")
    published = results.get("docker-published")
    if published and results.get("nomad") and published.get("all_running_s"):
        results["nomad_all_running_vs_docker_published"] = round(
            results["nomad"]["all_running_s"] / published["all_running_s"], 2
        )
    docker, nomad = results.get("docker"), results.get("nomad")
    if docker and nomad and docker.get("all_running_s"):
        ratio = nomad["all_running_s"] / docker["all_running_s"]
        results["nomad_all_running_vs_docker"] = round(ratio, 2)
        results["goals"] = {
            "all_run": nomad.get("sandboxes_running") == settings.sandboxes,
            f"nomad_all_running_within_{GOAL_RATIO:g}x_docker": ratio <= GOAL_RATIO,
            f"admin_peak_within_{GOAL_ADMIN_MB:g}_mb": nomad["admin_rss_peak_mb"] <= GOAL_ADMIN_MB,
        }
    return results


def table(results: dict[str, Any]) -> str:
    """The two runtimes' figures side by side, as text."""
    rows = [
        ("sandboxes running", "sandboxes_running"),
        ("start p50 (s)", "start_p50_s"),
        ("start p95 (s)", "start_p95_s"),
        ("all running (s)", "all_running_s"),
        ("admin RSS idle (MB)", "admin_rss_idle_mb"),
        ("admin RSS peak (MB)", "admin_rss_peak_mb"),
        ("admin CPU (s)", "admin_cpu_s_to_all_running"),
        ("stand-in Nomad CPU (s)", "stand_in_cpu_s_to_all_running"),
        ("all removed after stop (s)", "all_removed_after_stop_s"),
    ]
    names = [r for r in ("docker", "docker-published", "nomad") if r in results]
    lines = [f"{'':28}" + "".join(f"{name:>18}" for name in names)]
    for label, key in rows:
        cells = [results[name].get(key, "") for name in names]
        lines.append(
            f"{label:28}"
            + "".join(f"{'timed out' if cell is None else cell:>18}" for cell in cells)
        )
    if "nomad_all_running_vs_docker" in results:
        lines.append(
            f"nomad all-running / docker: {results['nomad_all_running_vs_docker']}x (CPU seconds are "
            "to all running; the stand-in's runs on the same cores here, on a real cluster's servers "
            "and nodes, and is not subtracted)"
        )
    if "nomad_all_running_vs_docker_published" in results:
        lines.append(
            f"nomad all-running / docker-published: {results['nomad_all_running_vs_docker_published']}x"
        )
    return "\n".join(lines)
