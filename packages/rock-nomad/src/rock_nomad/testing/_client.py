"""The stand-in's client nodes: each allocation's tasks run as real containers on local Docker.

What a Nomad client does for a ``docker`` task, done for real on the local engine: build the
task directory (``/alloc``, ``/local``, ``/secrets`` bind-mounted into the container), download
the task's artifacts over HTTP and check their checksums, find or pull the image, create and
start the container with the task's resources and its ports published on its node's loopback
address, watch it exit (Docker's ``die`` and ``oom`` events), apply the restart policy, and
kill it when the server stops the allocation. Each step reports Nomad's task events.

Each node has Docker networks of its own, as each real node has its own Docker engine: its
``bridge`` (what a task without ``network_mode`` joins; Docker's defaults, so containers on it
may connect to each other, as on a stock Docker engine) and those its operator made
(:attr:`NodeSpec.docker_networks`, created with their driver options, e.g.
``enable_icc=false``). They are real Docker bridge networks, one per node and name, made when a
task first needs them (``nomad-stand-in-<server>-<node>-<name>``): containers of different nodes
never share one. A ``network_mode`` the node lacks fails the task as Docker's 404 does.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import logging
import re
import shutil
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import docker
import docker.errors
import httpx

from rock_nomad.testing._model import SECOND, parse_duration
from rock_nomad.testing._state import NodeSpec, now_ns, rfc3339, task_event
from rock_nomad.testing._template import TemplateError, VariableMissing, render
from rock_nomad.testing._variables import workload_may_read

if TYPE_CHECKING:
    from rock_nomad.testing._cluster import Cluster

log = logging.getLogger("rock_nomad.testing")

#: Label keys of every container the stand-in makes (never ``rock.*``: rock's own reapers
#: look for those, and must leave the stand-in's containers alone).
LABEL_SERVER = "nomad-stand-in.server"
LABEL_OWNER = "nomad-stand-in.owner"
#: Docker's built-in network, which every node has: what ``network_mode`` unset, ``bridge`` or
#: ``default`` means. Made with Docker's default options (containers may connect to each other).
DEFAULT_NETWORK = "bridge"

#: The docker driver ``Config`` keys the stand-in understands. Any other key fails the task with
#: "Failed Validation", as an unknown key fails Nomad's own config decoding.
KNOWN_CONFIG = {
    "image",
    "command",
    "args",
    "entrypoint",
    "work_dir",
    "ports",
    "labels",
    "network_mode",
    "hostname",
    "volumes",
    "mount",
    "mounts",
    "cap_add",
    "cap_drop",
    "init",
    "tty",
    "interactive",
    "shm_size",
    "pids_limit",
    "security_opt",
    "sysctl",
    "ulimit",
    "readonly_rootfs",
    "dns_servers",
    "extra_hosts",
    "runtime",
    "oom_score_adj",
    "force_pull",
    "image_pull_timeout",
    "cpu_hard_limit",
    "cpu_cfs_period",
    "memory_hard_limit",
    "privileged",
    "auth_soft_fail",
    "logging",
    "healthchecks",
    "group_add",
    "ipc_mode",
    "pid_mode",
    "uts_mode",
    "userns_mode",
}
_CHECKSUMS = {
    "md5": hashlib.md5,
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}
_INTERPOLATION = re.compile(r"\$\{([^}]+)\}")
_LOG_KEEP = 256 * 1024


class TaskFailed(Exception):
    """A task setup step failed: the event to report (it fails the task)."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event["DisplayMessage"])
        self.event = event


@dataclass
class Faults:
    """Faults the stand-in injects (see :class:`~rock_nomad.testing.StandInNomad`'s hooks)."""

    #: image pattern (fnmatch) → error text for pulls that must fail
    image_pull_failures: dict[str, str] = field(default_factory=dict)
    #: seconds a client waits before it sets up a new allocation (a slow node)
    start_delay: float = 0.0


class TaskRunner:
    """One task of one allocation: setup, container, restarts, kill."""

    def __init__(
        self,
        sim: DockerClientSim,
        alloc: dict[str, Any],
        task: dict[str, Any],
        node: dict[str, Any],
        spec: NodeSpec,
    ) -> None:
        self.sim = sim
        self.alloc_id = alloc["ID"]
        self.alloc = alloc
        self.task = task
        self.node = node
        self.spec = spec
        self.name = task["Name"]
        self.container_id: str | None = None
        self.kill_requested = asyncio.Event()
        self.exited: asyncio.Future[int] | None = None
        self.injected: tuple[str, int] | None = None
        self.oom_seen = False
        self.logs = {"stdout": b"", "stderr": b""}
        self.job_type = alloc["Job"]["Type"]
        self.group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])

    # -- reporting -----------------------------------------------------------------------------

    def report(self, kind: str, message: str, **fields: Any) -> None:
        details = fields.pop("details", {})
        state_fields = fields.pop("state", {})
        self.sim.cluster.client_update(
            self.alloc_id,
            task=self.name,
            event=task_event(kind, message, Details=details, **fields),
            **state_fields,
        )

    def fail(self, event: dict[str, Any]) -> None:
        self.sim.cluster.client_update(
            self.alloc_id,
            task=self.name,
            event=event,
            State="dead",
            Failed=True,
            FinishedAt=rfc3339(),
        )

    # -- the task's life -----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except TaskFailed as failure:
            self.fail(failure.event)
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show in the task's events
            log.exception("stand-in task runner for %s/%s failed", self.alloc_id, self.name)
            self.fail(
                task_event(
                    "Driver Failure",
                    f"stand-in client error: {exc}",
                    DriverError=str(exc),
                    FailsTask=True,
                )
            )
        finally:
            await self._remove_container()

    async def _run(self) -> None:
        if self.sim.faults.start_delay > 0:
            await self._sleep_or_kill(self.sim.faults.start_delay)
        if self.kill_requested.is_set():
            return self._killed_before_start()
        self.report("Task Setup", "Building Task Directory", Message="Building Task Directory")
        dirs = self._make_dirs()
        env = self._environment(dirs)
        if self.task.get("Artifacts"):
            self.report("Downloading Artifacts", "Client is downloading artifacts")
            for artifact in self.task["Artifacts"]:
                await self._download(artifact, dirs["task"], env)
        for template in self.task.get("Templates") or []:
            await self._render(template, dirs["task"], env)
        if self.kill_requested.is_set():
            return self._killed_before_start()
        config = self._config(env)
        image = config["image"]
        await self._ensure_image(image, config)
        if self.kill_requested.is_set():
            return self._killed_before_start()
        await self._create(config, env, dirs)
        attempts: list[int] = []
        while True:
            await self._start()
            outcome = await self._wait()
            if outcome is None:  # killed by the server
                return
            exit_code, oom = outcome
            await self._capture_logs()
            display = f"Exit Code: {exit_code}" + (', Exit Message: "OOM Killed"' if oom else "")
            details = {"exit_code": str(exit_code)}
            if oom:
                details["oom_killed"] = "true"
            self.report(
                "Terminated",
                display,
                ExitCode=exit_code,
                Signal=0,
                details=details,
                Message="OOM Killed" if oom else "",
            )
            if self.job_type == "batch" and exit_code == 0 and not oom:
                self.sim.cluster.client_update(
                    self.alloc_id, task=self.name, State="dead", Failed=False, FinishedAt=rfc3339()
                )
                return
            delay = self._restart_delay(attempts)
            if delay is None:
                policy = self.group["RestartPolicy"]
                if int(policy["Attempts"]) == 0:
                    why = "Policy allows no restarts"
                else:
                    why = (
                        f"Exceeded allowed attempts {policy['Attempts']} in interval "
                        f'{int(policy["Interval"]) // SECOND}s and mode is "fail"'
                    )
                self.fail(task_event("Not Restarting", why, FailsTask=True, RestartReason=why))
                return
            self.report(
                "Restarting",
                f"Task restarting in {delay / SECOND:g}s",
                StartDelay=delay,
                RestartReason="Restart within policy",
                state={"State": "pending"},
            )
            await self._sleep_or_kill(delay / SECOND)
            if self.kill_requested.is_set():
                return self._killed_before_start()
            attempts.append(now_ns())
            state = self.sim.cluster.allocs[self.alloc_id]["TaskStates"][self.name]
            state["Restarts"] = state.get("Restarts", 0) + 1
            state["LastRestart"] = rfc3339()

    def _restart_delay(self, attempts: list[int]) -> int | None:
        policy = self.group["RestartPolicy"]
        limit, interval, delay = (
            int(policy["Attempts"]),
            int(policy["Interval"]),
            int(policy["Delay"]),
        )
        now = now_ns()
        recent = [t for t in attempts if now - t <= interval]
        if len(recent) < limit:
            return delay
        if policy["Mode"] == "delay" and recent:
            attempts.clear()
            return max(delay, recent[0] + interval - now)
        return None

    def _killed_before_start(self) -> None:
        self.report(
            "Killed",
            "Task successfully killed",
            state={"State": "dead", "Failed": False, "FinishedAt": rfc3339()},
        )

    async def _sleep_or_kill(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.kill_requested.wait(), seconds)
        except TimeoutError:
            pass

    # -- setup -----------------------------------------------------------------------------------

    def _make_dirs(self) -> dict[str, Path]:
        root = self.sim.work_dir / self.alloc_id
        alloc_dir = root / "alloc"
        task_dir = root / self.name
        dirs = {
            "alloc": alloc_dir,
            "task": task_dir,
            "local": task_dir / "local",
            "secrets": task_dir / "secrets",
        }
        for sub in ("data", "logs", "tmp"):
            (alloc_dir / sub).mkdir(parents=True, exist_ok=True)
        for key in ("local", "secrets"):
            dirs[key].mkdir(parents=True, exist_ok=True)
        return dirs

    def _environment(self, dirs: dict[str, Path]) -> dict[str, str]:
        alloc, job, task = self.alloc, self.alloc["Job"], self.task
        res = alloc["AllocatedResources"]["Tasks"][self.name]
        env = {
            "NOMAD_ALLOC_DIR": "/alloc",
            "NOMAD_TASK_DIR": "/local",
            "NOMAD_SECRETS_DIR": "/secrets",
            "NOMAD_ALLOC_ID": alloc["ID"],
            "NOMAD_SHORT_ALLOC_ID": alloc["ID"][:8],
            "NOMAD_ALLOC_NAME": alloc["Name"],
            "NOMAD_ALLOC_INDEX": alloc["Name"].rsplit("[", 1)[-1].rstrip("]"),
            "NOMAD_JOB_ID": job["ID"],
            "NOMAD_JOB_NAME": job["Name"],
            "NOMAD_JOB_PARENT_ID": job.get("ParentID") or "",
            "NOMAD_GROUP_NAME": alloc["TaskGroup"],
            "NOMAD_TASK_NAME": self.name,
            "NOMAD_NAMESPACE": alloc["Namespace"],
            "NOMAD_REGION": job["Region"],
            "NOMAD_DC": self.node["Datacenter"],
            "NOMAD_CPU_LIMIT": str(res["Cpu"]["CpuShares"]),
            "NOMAD_MEMORY_LIMIT": str(res["Memory"]["MemoryMB"]),
        }
        if res["Memory"]["MemoryMaxMB"]:
            env["NOMAD_MEMORY_MAX_LIMIT"] = str(res["Memory"]["MemoryMaxMB"])
        meta: dict[str, str] = {}
        for source in (job.get("Meta"), self.group.get("Meta"), task.get("Meta")):
            meta.update(source or {})
        for key, value in meta.items():
            env[f"NOMAD_META_{key}"] = str(value)
            env[f"NOMAD_META_{key.upper()}"] = str(value)
        for port in alloc["AllocatedResources"]["Shared"]["Ports"] or []:
            label = port["Label"].replace("-", "_")
            inside = port["To"] if port["To"] and port["To"] > 0 else port["Value"]
            env[f"NOMAD_IP_{label}"] = port["HostIP"]
            env[f"NOMAD_PORT_{label}"] = str(inside)
            env[f"NOMAD_HOST_PORT_{label}"] = str(port["Value"])
            env[f"NOMAD_ADDR_{label}"] = f"{port['HostIP']}:{port['Value']}"
            env[f"NOMAD_HOST_IP_{label}"] = port["HostIP"]
            env[f"NOMAD_HOST_ADDR_{label}"] = f"{port['HostIP']}:{port['Value']}"
            env[f"NOMAD_ALLOC_PORT_{label}"] = str(inside)
        for key, value in (task.get("Env") or {}).items():
            env[key] = self.interpolate(str(value), env)
        return env

    def interpolate(self, text: str, env: dict[str, str]) -> str:
        node = self.node

        def value(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            if name in env:
                return env[name]
            if name.startswith("env."):
                return env.get(name[4:], match.group(0))
            found: str
            if name.startswith("attr."):
                found = node["Attributes"].get(name[5:], match.group(0))
                return found
            if name.startswith("meta."):
                found = (node.get("Meta") or {}).get(name[5:], match.group(0))
                return found
            known = {
                "node.unique.id": node["ID"],
                "node.unique.name": node["Name"],
                "node.datacenter": node["Datacenter"],
                "node.class": node["NodeClass"],
                "node.region": self.alloc["Job"]["Region"],
                "node.pool": node["NodePool"],
            }
            found = known.get(name, match.group(0))
            return found

        return _INTERPOLATION.sub(value, text)

    def _config(self, env: dict[str, str]) -> dict[str, Any]:
        config = dict(self.task.get("Config") or {})
        if self.task["Driver"] != "docker":
            raise TaskFailed(
                task_event(
                    "Failed Validation",
                    f"driver {self.task['Driver']!r} is not run by the stand-in",
                    ValidationError="unsupported driver",
                    FailsTask=True,
                )
            )
        unknown = sorted(set(config) - KNOWN_CONFIG)
        problems = [
            f'Unsupported argument; An argument named "{key}" is not expected here.'
            for key in unknown
        ]
        if not config.get("image"):
            problems.append(
                'Missing required argument; The argument "image" is required, but no definition was found.'
            )
        if config.get("network_mode") == "host":
            problems.append(
                'network_mode "host" is refused by the stand-in: its traffic stays on loopback addresses'
            )
        if problems:
            text = "; ".join(problems)
            raise TaskFailed(
                task_event("Failed Validation", text, ValidationError=text, FailsTask=True)
            )
        for key in ("image", "command", "entrypoint", "work_dir", "hostname"):
            if isinstance(config.get(key), str):
                config[key] = self.interpolate(config[key], env)
        for key in ("args", "entrypoint"):
            if isinstance(config.get(key), list):
                config[key] = [self.interpolate(str(a), env) for a in config[key]]
        return config

    async def _download(
        self, artifact: dict[str, Any], task_dir: Path, env: dict[str, str]
    ) -> None:
        source = self.interpolate(artifact["GetterSource"], env)
        options = dict(artifact.get("GetterOptions") or {})
        mode = artifact.get("GetterMode") or "any"

        def failed(reason: str) -> TaskFailed:
            text = f"GET error: error downloading '{source}': {reason}"
            return TaskFailed(
                task_event("Failed Artifact Download", text, DownloadError=text, FailsTask=True)
            )

        if urlsplit(source).scheme not in ("http", "https"):
            raise failed("the stand-in downloads only http and https artifacts")
        dest_rel = PurePosixPath(self.interpolate(artifact.get("RelativeDest") or "local/", env))
        dest = (task_dir / dest_rel).resolve()
        if not str(dest).startswith(str(task_dir.resolve())):
            raise failed(f"artifact destination {dest_rel} escapes the task directory")
        checksum = options.pop("checksum", None)
        archive = options.pop("archive", "true") not in ("false", "0")
        digest = None
        if checksum:
            kind, _, expected = checksum.partition(":")
            if kind not in _CHECKSUMS or not expected:
                raise failed(f"invalid checksum {checksum!r}")
            digest = _CHECKSUMS[kind]()
        filename = PurePosixPath(urlsplit(source).path).name or "index.html"
        target = dest if mode == "file" else dest / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            async with self.sim.http.stream(
                "GET", source, params=options or None, headers=artifact.get("GetterHeaders") or None
            ) as response:
                if response.status_code != 200:
                    raise failed(f"bad response code: {response.status_code}")
                with open(target, "wb") as out:
                    async for chunk in response.aiter_bytes():
                        out.write(chunk)
                        if digest is not None:
                            digest.update(chunk)
        except httpx.HTTPError as exc:
            raise failed(str(exc) or type(exc).__name__) from exc
        if digest is not None:
            got = digest.hexdigest()
            if got != expected.lower():
                target.unlink(missing_ok=True)
                raise failed(f"checksums did not match: expected {expected}, got {got}")
        if archive and mode != "file":
            name = filename.lower()
            if name.endswith(".zip"):
                with zipfile.ZipFile(target) as zf:
                    zf.extractall(dest)
                target.unlink()
            elif name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
                with tarfile.open(target) as tf:
                    try:
                        tf.extractall(dest, filter="data")  # no links or paths out of dest
                    except (
                        TypeError
                    ):  # a Python without extraction filters: keep plain members inside dest
                        tf.extractall(
                            dest,
                            members=[
                                m
                                for m in tf.getmembers()
                                if (m.isfile() or m.isdir())
                                and not m.name.startswith("/")
                                and ".." not in PurePosixPath(m.name).parts
                            ],
                        )
                target.unlink()

    async def _render(self, template: dict[str, Any], task_dir: Path, env: dict[str, str]) -> None:
        """Write a template into the task directory (:mod:`rock_nomad.testing._template` says what
        the stand-in renders; anything else fails the task). A Nomad Variable it reads that does
        not exist yet holds the task back until it does, as in Nomad."""
        left, right = template.get("LeftDelim") or "{{", template.get("RightDelim") or "}}"

        def failed(reason: str) -> TaskFailed:
            text = f"Template failed: {template.get('DestPath')}: {reason}"
            return TaskFailed(task_event("Setup Failure", text, SetupError=text, FailsTask=True))

        text = template.get("EmbeddedTmpl") or ""
        if not text and template.get("SourcePath"):
            source = (task_dir / self.interpolate(template["SourcePath"], env)).resolve()
            if not str(source).startswith(str(task_dir.resolve())):
                raise failed("the source escapes the task directory")
            try:
                text = source.read_text()
            except OSError as exc:
                raise failed(f"cannot read the source: {exc}") from exc
        told_missing = False
        while True:
            try:
                rendered = render(
                    text,
                    env=env,
                    variable=self._variable,
                    namespace=self.alloc["Namespace"],
                    left=left,
                    right=right,
                )
                break
            except TemplateError as exc:
                raise failed(str(exc)) from None
            except VariableMissing as missing:
                if not told_missing:
                    told_missing = True
                    region = self.alloc["Job"]["Region"]
                    self.report(
                        "Template",
                        f"Missing: nomad.var.block({missing.path}@{missing.namespace}.{region})",
                    )
                changed = self.sim.cluster.changed
                waiting = asyncio.ensure_future(changed.wait())
                killed = asyncio.ensure_future(self.kill_requested.wait())
                try:
                    await asyncio.wait({waiting, killed}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiting.cancel()
                    killed.cancel()
                if self.kill_requested.is_set():
                    return
        dest = (task_dir / self.interpolate(template["DestPath"], env)).resolve()
        if not str(dest).startswith(str(task_dir.resolve())):
            raise failed("the destination escapes the task directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(rendered)
        dest.chmod(int(str(template.get("Perms") or "0644"), 8))
        if template.get("Envvars"):
            for line in rendered.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() and not key.lstrip().startswith("#"):
                    env[key.strip()] = value.strip()

    def _variable(self, path: str, namespace: str) -> dict[str, str] | None:
        """A variable's items as this task's workload identity reads them: its own job's paths
        in its job's namespace, nothing else."""
        own_namespace = self.alloc["Namespace"]
        if namespace != own_namespace or not workload_may_read(
            path, job_id=self.alloc["JobID"], group=self.alloc["TaskGroup"], task=self.name
        ):
            raise TemplateError(
                f"nomad.var.block({path}@{namespace}): Permission denied: the task's workload "
                f"identity reads only nomad/jobs/{self.alloc['JobID']} (and below) in {own_namespace!r}"
            )
        var = self.sim.cluster.variables.get(namespace, path)
        return dict(var["Items"]) if var is not None else None

    async def _ensure_image(self, image: str, config: dict[str, Any]) -> None:
        for pattern, reason in list(self.sim.faults.image_pull_failures.items()):
            if fnmatch.fnmatchcase(image, pattern):
                self.report(
                    "Driver",
                    f"Downloading image {image}",
                    DriverMessage=f"Downloading image {image}",
                )
                text = f"Failed to pull `{image}`: {reason}"
                raise TaskFailed(
                    task_event("Driver Failure", text, DriverError=text, FailsTask=True)
                )
        present = await self.sim.call(_image_present, self.sim.docker, image)
        if present and not config.get("force_pull"):
            return
        self.report(
            "Driver", f"Downloading image {image}", DriverMessage=f"Downloading image {image}"
        )
        timeout = parse_duration(str(config.get("image_pull_timeout") or "5m"))
        try:
            await asyncio.wait_for(self.sim.call(self.sim.docker.images.pull, image), timeout)
        except TimeoutError:
            text = f"Failed to pull `{image}`: image pull did not finish within {timeout:g}s"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from None
        except docker.errors.DockerException as exc:
            text = f"Failed to pull `{image}`: {_docker_text(exc)}"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from exc

    async def _create(
        self, config: dict[str, Any], env: dict[str, str], dirs: dict[str, Path]
    ) -> None:
        res = self.alloc["AllocatedResources"]["Tasks"][self.name]
        cpu = max(2, int(res["Cpu"]["CpuShares"]))
        memory = int(res["Memory"]["MemoryMB"])
        memory_max = int(res["Memory"]["MemoryMaxMB"] or 0)
        hard = int(config.get("memory_hard_limit") or 0)
        kwargs: dict[str, Any] = {
            "name": f"{self.name}-{self.alloc_id}",
            "environment": env,
            "labels": self._labels(config),
            "detach": True,
            "cpu_shares": cpu,
            "volumes": {
                str(dirs["alloc"]): {"bind": "/alloc", "mode": "rw"},
                str(dirs["local"]): {"bind": "/local", "mode": "rw"},
                str(dirs["secrets"]): {"bind": "/secrets", "mode": "rw"},
            },
        }
        if memory_max > 0 or hard > 0:
            limit = max(hard, memory_max)
            kwargs.update(
                mem_limit=f"{limit}m", memswap_limit=f"{limit}m", mem_reservation=f"{memory}m"
            )
        else:
            kwargs.update(mem_limit=f"{memory}m", memswap_limit=f"{memory}m")
        if config.get("cpu_hard_limit"):
            period = int(config.get("cpu_cfs_period") or 100_000)
            share = cpu / max(1, self.spec.cpu_mhz)
            kwargs.update(
                cpu_period=period, cpu_quota=max(1000, int(share * period * self.spec.cores))
            )
        command = config.get("command")
        args = list(config.get("args") or [])
        cmd = ([command] if command else []) + args
        if cmd:
            kwargs["command"] = cmd
        if config.get("entrypoint"):
            kwargs["entrypoint"] = config["entrypoint"]
        if config.get("work_dir"):
            kwargs["working_dir"] = config["work_dir"]
        if config.get("hostname"):
            kwargs["hostname"] = config["hostname"]
        kwargs["network_mode"] = await self._network_mode(config.get("network_mode") or "")
        if self.task.get("KillSignal"):
            kwargs["stop_signal"] = self.task["KillSignal"]
        if self.task.get("User"):
            kwargs["user"] = self.task["User"]
        for key, arg in (
            ("cap_add", "cap_add"),
            ("cap_drop", "cap_drop"),
            ("init", "init"),
            ("tty", "tty"),
            ("interactive", "stdin_open"),
            ("pids_limit", "pids_limit"),
            ("security_opt", "security_opt"),
            ("readonly_rootfs", "read_only"),
            ("dns_servers", "dns"),
            ("runtime", "runtime"),
            ("oom_score_adj", "oom_score_adj"),
            ("shm_size", "shm_size"),
            ("group_add", "group_add"),
            ("ipc_mode", "ipc_mode"),
            ("pid_mode", "pid_mode"),
            ("uts_mode", "uts_mode"),
            ("userns_mode", "userns_mode"),
        ):
            if config.get(key) is not None:
                kwargs[arg] = config[key]
        if config.get("sysctl"):
            kwargs["sysctls"] = _one_map(config["sysctl"])
        if config.get("extra_hosts"):
            kwargs["extra_hosts"] = dict(h.split(":", 1) for h in config["extra_hosts"])
        if config.get("privileged"):
            text = "Docker privileged mode is disabled on this Nomad agent"
            raise TaskFailed(task_event("Driver Failure", text, DriverError=text, FailsTask=True))
        for volume in config.get("volumes") or []:
            parts = volume.split(":")
            host = parts[0] if parts[0].startswith("/") else str(dirs["task"] / parts[0])
            kwargs["volumes"][host] = {
                "bind": parts[1],
                "mode": parts[2] if len(parts) > 2 else "rw",
            }
        ports = {}
        published = config.get("ports") or []
        by_label = {
            p["Label"]: p for p in self.alloc["AllocatedResources"]["Shared"]["Ports"] or []
        }
        for label in published:
            port = by_label.get(label)
            if port is None:
                text = f'Port "{label}" not found, check network block'
                raise TaskFailed(
                    task_event("Driver Failure", text, DriverError=text, FailsTask=True)
                )
            inside = port["To"] if port["To"] and port["To"] > 0 else port["Value"]
            ports[f"{inside}/tcp"] = (
                port["HostIP"],
                port["Value"],
            )  # Nomad also publishes udp; tcp is enough here
        if ports and config.get("network_mode") != "none":
            kwargs["ports"] = ports
        try:
            container_id = await self.sim.call(
                _create_container, self.sim.docker, config["image"], kwargs
            )
        except docker.errors.DockerException as exc:
            text = f"failed to create container: {_docker_text(exc)}"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from exc
        self.container_id = container_id
        self.sim.containers[container_id] = self

    async def _network_mode(self, mode: str) -> str:
        """The Docker network mode of the task's container on this node (see the module docstring)."""
        if mode == "none" or mode.startswith("container:"):
            return mode
        name = DEFAULT_NETWORK if mode in ("", "default", DEFAULT_NETWORK) else mode
        if name != DEFAULT_NETWORK and name not in self.spec.docker_networks:
            text = f"failed to create container: API error (404): network {name} not found"
            raise TaskFailed(task_event("Driver Failure", text, DriverError=text, FailsTask=True))
        try:
            return await self.sim.node_network(
                self.node["Name"], name, self.spec.docker_networks.get(name, {})
            )
        except docker.errors.DockerException as exc:
            text = f"failed to create container: network {name}: {_docker_text(exc)}"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from exc

    def _labels(self, config: dict[str, Any]) -> dict[str, str]:
        labels: dict[str, str] = {}
        for key, value in _one_map(config.get("labels") or {}).items():
            if not key.startswith(
                "rock."
            ):  # rock's reapers own rock.* labels; never copy them here
                labels[key] = str(value)
        job = self.alloc["Job"]
        labels.update(
            {
                "com.hashicorp.nomad.alloc_id": self.alloc_id,
                "com.hashicorp.nomad.job_id": job["ID"],
                "com.hashicorp.nomad.job_name": job["Name"],
                "com.hashicorp.nomad.task_group_name": self.alloc["TaskGroup"],
                "com.hashicorp.nomad.task_name": self.name,
                "com.hashicorp.nomad.namespace": self.alloc["Namespace"],
                "com.hashicorp.nomad.node_id": self.node["ID"],
                "com.hashicorp.nomad.node_name": self.node["Name"],
                LABEL_SERVER: self.sim.server_id,
                LABEL_OWNER: self.sim.owner,
            }
        )
        return labels

    async def _start(self) -> None:
        self.exited = asyncio.get_running_loop().create_future()
        self.injected = None
        self.oom_seen = False
        try:
            await self.sim.call(self.sim.docker.api.start, self.container_id)
        except docker.errors.DockerException as exc:
            text = f"failed to start container {self.container_id}: {_docker_text(exc)}"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from exc
        self.report(
            "Started", "Task started by client", state={"State": "running", "StartedAt": rfc3339()}
        )

    async def _wait(self) -> tuple[int, bool] | None:
        assert self.exited is not None
        killer = asyncio.ensure_future(self.kill_requested.wait())
        try:
            waiting: set[asyncio.Future[Any]] = {self.exited, killer}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            killer.cancel()
        if self.kill_requested.is_set():
            await self._kill()
            return None
        exit_code = self.exited.result()
        oom = self.oom_seen
        if self.injected is not None:
            kind, code = self.injected
            exit_code, oom = code, kind == "oom"
        elif not oom:
            oom = await self.sim.call(_oom_killed, self.sim.docker, self.container_id)
        return exit_code, oom

    async def _kill(self) -> None:
        timeout = int(self.task.get("KillTimeout") or 5 * SECOND)
        self.report(
            "Killing",
            f"Sent interrupt. Waiting {timeout / SECOND:g}s before force killing",
            KillTimeout=timeout,
        )
        if self.exited is not None and not self.exited.done():
            try:
                await self.sim.call(
                    self.sim.docker.api.stop, self.container_id, timeout=max(1, timeout // SECOND)
                )
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as exc:
                log.warning("stand-in: stopping %s: %s", self.container_id, _docker_text(exc))
            try:  # Docker's die event tells the exit code the kill gave
                exit_code = await asyncio.wait_for(asyncio.shield(self.exited), 5)
            except TimeoutError:
                pass
            else:
                # As Nomad's docker driver: the exit result says whether the kernel OOM-killed a
                # process of the container, whatever ended it.
                oom = self.oom_seen or await self.sim.call(
                    _oom_killed, self.sim.docker, self.container_id
                )
                details = {"exit_code": str(exit_code)}
                if oom:
                    details["oom_killed"] = "true"
                self.report(
                    "Terminated",
                    f"Exit Code: {exit_code}" + (', Exit Message: "OOM Killed"' if oom else ""),
                    ExitCode=exit_code,
                    details=details,
                    Message="OOM Killed" if oom else "",
                )
        await self._capture_logs()
        self.report(
            "Killed",
            "Task successfully killed",
            state={"State": "dead", "Failed": False, "FinishedAt": rfc3339()},
        )

    async def _capture_logs(self) -> None:
        if self.container_id is None:
            return
        for kind in ("stdout", "stderr"):
            try:
                data = await self.sim.call(
                    self.sim.docker.api.logs,
                    self.container_id,
                    stdout=kind == "stdout",
                    stderr=kind == "stderr",
                )
            except docker.errors.DockerException:
                continue
            self.logs[kind] = data[-_LOG_KEEP:]

    async def live_logs(self, kind: str) -> bytes:
        if self.container_id is not None and self.exited is not None and not self.exited.done():
            await self._capture_logs()
        return self.logs[kind]

    async def _remove_container(self) -> None:
        if self.container_id is None:
            return
        container_id, self.container_id = self.container_id, None
        try:
            await self.sim.call(
                self.sim.docker.api.remove_container, container_id, force=True, v=True
            )
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            log.warning("stand-in: removing %s: %s", container_id, _docker_text(exc))
        self.sim.containers.pop(container_id, None)

    # -- docker events and injected faults -----------------------------------------------------

    def on_event(self, action: str, attributes: dict[str, str]) -> None:
        if action == "oom":
            self.oom_seen = True
        elif action == "die" and self.exited is not None and not self.exited.done():
            self.exited.set_result(int(attributes.get("exitCode", "0") or 0))

    def inject(self, kind: str, code: int) -> bool:
        if self.container_id is None or self.exited is None or self.exited.done():
            return False
        self.injected = (kind, code)
        return True


class DockerClientSim:
    """The client half of every simulated node: runs allocations' tasks on the local Docker."""

    def __init__(
        self,
        cluster: Cluster,
        docker_client: docker.DockerClient,
        *,
        server_id: str,
        owner: str,
        work_dir: Path,
        faults: Faults,
    ) -> None:
        self.cluster = cluster
        self.docker = docker_client
        self.server_id = server_id
        self.owner = owner
        self.work_dir = work_dir
        self.faults = faults
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="stand-in-docker")
        self._http: httpx.AsyncClient | None = None
        self.runners: dict[str, list[TaskRunner]] = {}
        self.tasks: dict[str, list[asyncio.Task[None]]] = {}
        self.containers: dict[str, TaskRunner] = {}
        #: (node name, network name) → the real Docker network made for it.
        self.networks: dict[tuple[str, str], str] = {}
        self._network_locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def http(self) -> httpx.AsyncClient:
        """The nodes' one HTTP client for artifacts (made on first use). One client, not one per
        download: making an httpx client builds a TLS context, some 20 ms of CPU here, which
        was a quarter of the stand-in's CPU when 100 tasks started at once."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=30,
                follow_redirects=True,
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
            )
        return self._http

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    async def node_network(self, node: str, name: str, options: dict[str, str]) -> str:
        """The real Docker network that stands for network ``name`` of node ``node``, made on
        first use with ``options`` (Docker's defaults for the node's ``bridge``)."""
        key = (node, name)
        lock = self._network_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self.networks:
                real = f"nomad-stand-in-{self.server_id}-{node}-{name}"
                labels = {
                    LABEL_SERVER: self.server_id,
                    LABEL_OWNER: self.owner,
                    "nomad-stand-in.node": node,
                    "nomad-stand-in.network": name,
                }
                # The bridge's interface name is the host's to choose (two nodes would clash).
                driver_options = {
                    k: v for k, v in options.items() if k != "com.docker.network.bridge.name"
                }
                await self.call(
                    self.docker.api.create_network,
                    real,
                    driver="bridge",
                    options=driver_options,
                    labels=labels,
                    check_duplicate=True,
                )
                self.networks[key] = real
            return self.networks[key]

    def run(self, alloc: dict[str, Any], node: dict[str, Any], spec: NodeSpec) -> None:
        group = next(g for g in alloc["Job"]["TaskGroups"] if g["Name"] == alloc["TaskGroup"])
        runners = [TaskRunner(self, alloc, task, node, spec) for task in group["Tasks"]]
        self.runners[alloc["ID"]] = runners
        loop = asyncio.get_running_loop()
        self.tasks[alloc["ID"]] = [
            loop.create_task(self._run_task(alloc["ID"], r), name=f"task {r.name}") for r in runners
        ]

    async def _run_task(self, alloc_id: str, runner: TaskRunner) -> None:
        await runner.run()
        alloc = self.cluster.allocs.get(alloc_id)
        if alloc is None:
            return
        state = alloc["TaskStates"][runner.name]
        if state["State"] == "dead" and state["Failed"]:
            for sibling in self.runners.get(alloc_id, []):
                if sibling is not runner and not sibling.kill_requested.is_set():
                    sibling.kill_requested.set()

    def kill(self, alloc_id: str) -> None:
        for runner in self.runners.get(alloc_id, []):
            runner.kill_requested.set()

    def forget(self, alloc_id: str) -> None:
        """The alloc's node is lost: its containers go, with no events (nobody is left to report)."""
        for task in self.tasks.pop(alloc_id, []):
            task.cancel()
        for runner in self.runners.pop(alloc_id, []):
            if runner.container_id is not None:
                container_id, runner.container_id = runner.container_id, None
                self.containers.pop(container_id, None)
                asyncio.get_running_loop().create_task(self._force_remove(container_id))

    async def _force_remove(self, container_id: str) -> None:
        try:
            await self.call(self.docker.api.remove_container, container_id, force=True, v=True)
        except docker.errors.DockerException:
            pass

    def inject(self, alloc_id: str, kind: str, code: int, task: str | None = None) -> None:
        runners = [r for r in self.runners.get(alloc_id, []) if task is None or r.name == task]
        for runner in runners:
            if runner.inject(kind, code):
                asyncio.get_running_loop().create_task(
                    self.call(self.docker.api.kill, runner.container_id, signal="SIGKILL")
                )
                return
        raise KeyError(
            f"allocation {alloc_id} has no running task{'' if task is None else ' ' + task}"
        )

    def on_docker_event(self, event: dict[str, Any]) -> None:
        actor = event.get("Actor") or {}
        runner = self.containers.get(actor.get("ID") or event.get("id") or "")
        if runner is not None:
            runner.on_event(
                event.get("Action") or event.get("status") or "", actor.get("Attributes") or {}
            )

    def runner(self, alloc_id: str, task: str) -> TaskRunner | None:
        return next((r for r in self.runners.get(alloc_id, []) if r.name == task), None)

    async def close(self) -> None:
        for tasks in self.tasks.values():
            for task in tasks:
                task.cancel()
        for tasks in list(self.tasks.values()):
            for task in tasks:
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
        self.tasks.clear()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()


def _create_container(client: docker.DockerClient, image: str, kwargs: dict[str, Any]) -> str:
    """``containers.create(image, **kwargs)`` without the inspect that docker's SDK makes of the
    new container to return a model object: its id is all the stand-in keeps (one API call less
    per task, which counted when 100 tasks start at once)."""
    from rock_nomad.testing._docker_private import create_container_args

    return str(client.api.create_container(**create_container_args(client, image, kwargs))["Id"])


def _image_present(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def _oom_killed(client: docker.DockerClient, container_id: str | None) -> bool:
    if container_id is None:
        return False
    try:
        return bool(client.api.inspect_container(container_id)["State"].get("OOMKilled"))
    except docker.errors.DockerException:
        return False


def _docker_text(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


def _one_map(value: Any) -> dict[str, Any]:
    """Nomad's JSON form of a map block is a list of maps; accept both."""
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            out.update(item or {})
        return out
    return dict(value)


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
