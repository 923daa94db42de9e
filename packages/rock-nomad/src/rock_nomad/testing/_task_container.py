"""A stand-in task's container on the local Docker engine: its image found or pulled, its
network, labels and creation with the task's resources, its start, its exit (Docker's ``die``
and ``oom`` events, or an injected fault), its kill, its logs and its removal."""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors

from rock_nomad.testing._model import SECOND, parse_duration
from rock_nomad.testing._state import rfc3339, task_event
from rock_nomad.testing._task import (
    DEFAULT_NETWORK,
    LABEL_OWNER,
    LABEL_SERVER,
    LOG_KEEP,
    TaskBase,
    TaskFailed,
    create_container,
    docker_text,
    image_present,
    one_map,
    oom_killed,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger("rock_nomad.testing")

__all__ = ["TaskContainer"]


class TaskContainer(TaskBase):
    """The task's container and what Docker says of it."""

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
        present = await self.sim.call(image_present, self.sim.docker, image)
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
            text = f"Failed to pull `{image}`: {docker_text(exc)}"
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
            kwargs["sysctls"] = one_map(config["sysctl"])
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
                create_container, self.sim.docker, config["image"], kwargs
            )
        except docker.errors.DockerException as exc:
            text = f"failed to create container: {docker_text(exc)}"
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
            text = f"failed to create container: network {name}: {docker_text(exc)}"
            raise TaskFailed(
                task_event("Driver Failure", text, DriverError=text, FailsTask=True)
            ) from exc

    def _labels(self, config: dict[str, Any]) -> dict[str, str]:
        labels: dict[str, str] = {}
        for key, value in one_map(config.get("labels") or {}).items():
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
            text = f"failed to start container {self.container_id}: {docker_text(exc)}"
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
            oom = await self.sim.call(oom_killed, self.sim.docker, self.container_id)
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
                log.warning("stand-in: stopping %s: %s", self.container_id, docker_text(exc))
            try:  # Docker's die event tells the exit code the kill gave
                exit_code = await asyncio.wait_for(asyncio.shield(self.exited), 5)
            except TimeoutError:
                pass
            else:
                # As Nomad's docker driver: the exit result says whether the kernel OOM-killed a
                # process of the container, whatever ended it.
                oom = self.oom_seen or await self.sim.call(
                    oom_killed, self.sim.docker, self.container_id
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
            self.logs[kind] = data[-LOG_KEEP:]

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
            log.warning("stand-in: removing %s: %s", container_id, docker_text(exc))
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
