"""Before a stand-in task's container: its task directory, its environment (with Nomad's
``${...}`` interpolation), its driver config, its artifacts downloaded and checksummed, and its
templates rendered (reading Nomad Variables the task's workload identity may read)."""

from __future__ import annotations

import asyncio
import logging
import re
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from rock_nomad.testing._state import task_event
from rock_nomad.testing._task import (
    CHECKSUMS,
    INTERPOLATION,
    KNOWN_CONFIG,
    TaskBase,
    TaskFailed,
)
from rock_nomad.testing._template import TemplateError, VariableMissing, render
from rock_nomad.testing._variables import workload_may_read

if TYPE_CHECKING:
    pass

log = logging.getLogger("rock_nomad.testing")

__all__ = ["TaskSetup"]


class TaskSetup(TaskBase):
    """The task's directory, environment, config, artifacts and templates."""

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

        return INTERPOLATION.sub(value, text)

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
            if kind not in CHECKSUMS or not expected:
                raise failed(f"invalid checksum {checksum!r}")
            digest = CHECKSUMS[kind]()
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
