"""What the Nomad API contract's tests stand on: the target (:class:`NomadTarget`), a thin
HTTP client with blocking waits and cleanup (:class:`NomadApi`), the sandbox-like job they
register, the artifacts they serve, and readers of what Nomad answers."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = [
    "GUARD_SECONDS",
    "ArtifactServer",
    "ContractFixtures",
    "NomadApi",
    "NomadTarget",
    "event_types",
    "events",
    "fetch_when_listening",
    "is_plain_text",
    "new_job_id",
    "sandbox_job",
]

#: How long a contract test waits for one state before it fails. Not a performance bound: a
#: guard so that a broken target fails the test instead of hanging it.
GUARD_SECONDS = 90.0


@dataclass
class NomadTarget:
    """A Nomad API to check: its address, token and what its nodes can run."""

    address: str
    token: str | None = None
    image: str = "rock-test/python:3.11"
    namespace: str = "default"
    artifact_host: str = "127.0.0.1"
    acl: bool = False
    label: str = "nomad"
    extra: dict[str, Any] = field(default_factory=dict)


class NomadApi:
    """A thin HTTP client for the contract: requests, blocking waits, and job cleanup."""

    def __init__(self, target: NomadTarget) -> None:
        self.target = target
        headers = {"X-Nomad-Token": target.token} if target.token else {}
        self.http = httpx.Client(
            base_url=target.address, headers=headers, timeout=GUARD_SECONDS + 30
        )
        self.jobs: set[str] = set()
        self.variables: set[str] = set()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        assert response.status_code == 200, (
            f"{method} {path}: {response.status_code} {response.text}"
        )
        return response.json()

    def register(self, job: dict[str, Any], **body: Any) -> dict[str, Any]:
        self.jobs.add(job["ID"])
        answer: dict[str, Any] = self.ok("POST", "/v1/jobs", json={"Job": job, **body})
        return answer

    def purge(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/job/{job_id}", params={"purge": "true"})

    def put_variable(self, path: str, items: dict[str, str], **params: Any) -> httpx.Response:
        """``PUT /v1/var/<path>`` (deleted again when the test ends)."""
        self.variables.add(path)
        return self.request(
            "PUT", f"/v1/var/{path}", params=params, json={"Path": path, "Items": items}
        )

    def close(self) -> None:
        for job_id in self.jobs:
            try:
                self.purge(job_id)
            except httpx.HTTPError:
                pass
        for path in self.variables:
            try:
                self.request("DELETE", f"/v1/var/{path}")
            except httpx.HTTPError:
                pass
        self.http.close()

    def wait(
        self,
        path: str,
        until: Callable[[Any], bool],
        what: str,
        *,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """Blocking queries on ``path`` until ``until(body)`` holds; the body."""
        index = 0
        deadline = time.monotonic() + GUARD_SECONDS
        last: Any = None
        while True:
            response = self.get(path, params={**(params or {}), "index": index, "wait": "5s"})
            if response.status_code == 200:
                last = response.json()
                if until(last):
                    return last
                index = int(response.headers["X-Nomad-Index"])
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what} did not happen within {GUARD_SECONDS:g}s; last answer: {last!r}"
                )
            if response.status_code != 200:
                time.sleep(0.2)

    def wait_alloc(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """The newest allocation of ``job_id`` once ``until`` holds for it (full object)."""

        def newest_ok(allocs: list[dict[str, Any]]) -> bool:
            return bool(allocs) and until(max(allocs, key=lambda a: a["CreateIndex"]))

        allocs = self.wait(f"/v1/job/{job_id}/allocations", newest_ok, f"{what} ({job_id})")
        newest = max(allocs, key=lambda a: a["CreateIndex"])
        answer: dict[str, Any] = self.ok("GET", f"/v1/allocation/{newest['ID']}")
        return answer

    def wait_eval(
        self, eval_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self.wait(f"/v1/evaluation/{eval_id}", until, what)
        return answer

    def wait_job(
        self, job_id: str, until: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self.wait(f"/v1/job/{job_id}", until, what)
        return answer


def new_job_id(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sandbox_job(
    job_id: str,
    image: str,
    *,
    command: str = "sleep",
    args: list[str] | None = None,
    job_type: str = "service",
    memory: int = 64,
    cpu: int = 100,
    ports: list[str] | None = None,
    artifacts: list[dict[str, Any]] | None = None,
    meta: dict[str, str] | None = None,
    driver: str = "docker",
    count: int = 1,
) -> dict[str, Any]:
    """A job shaped as a rock sandbox's: one group of ``count``, one docker task, no restarts,
    no rescheduling, a short kill timeout."""
    config: dict[str, Any] = {
        "image": image,
        "command": command,
        "args": args if args is not None else ["3600"],
    }
    group: dict[str, Any] = {
        "Name": "sandbox",
        "Count": count,
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "EphemeralDisk": {"SizeMB": 10},
        "Tasks": [
            {
                "Name": "main",
                "Driver": driver,
                "Config": config,
                "KillTimeout": 1_000_000_000,
                "Resources": {"CPU": cpu, "MemoryMB": memory},
                "Artifacts": artifacts,
            }
        ],
    }
    if ports:
        config["ports"] = ports
        group["Networks"] = [{"Mode": "host", "DynamicPorts": [{"Label": p} for p in ports]}]
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Meta": meta, "TaskGroups": [group]}


def events(alloc: dict[str, Any], task: str = "main") -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = alloc["TaskStates"][task]["Events"]
    return answer


def event_types(alloc: dict[str, Any], task: str = "main") -> list[str]:
    return [e["Type"] for e in events(alloc, task)]


def is_plain_text(response: httpx.Response) -> bool:
    answer: bool = response.headers.get("content-type", "").startswith("text/plain")
    return answer


class ArtifactServer:
    """Files served over HTTP from a temporary directory, for tasks' ``artifact`` blocks."""

    def __init__(self, root: Path, host: str) -> None:
        self.root = root
        handler = lambda *a, **k: _QuietHandler(*a, directory=str(root), **k)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer((host, 0), handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, name: str, data: bytes) -> tuple[str, str]:
        """Serve ``data`` as ``name``; its URL and ``sha256:<hex>`` checksum."""
        (self.root / name).write_bytes(data)
        return f"{self.url}/{name}", "sha256:" + hashlib.sha256(data).hexdigest()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def fetch_when_listening(url: str) -> bytes:
    """GET ``url`` once something listens there (the task's server starts after its container)."""
    deadline = time.monotonic() + GUARD_SECONDS
    while True:
        try:
            response = httpx.get(url, timeout=10)
            if response.status_code == 200:
                return response.content
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing answered at {url} within {GUARD_SECONDS:g}s")
        time.sleep(0.1)


class ContractFixtures:
    """The fixtures every contract test takes: a client of the target and an artifact server."""

    @pytest.fixture
    def api(self, nomad_target: NomadTarget) -> Iterator[NomadApi]:
        client = NomadApi(nomad_target)
        try:
            yield client
        finally:
            client.close()

    @pytest.fixture
    def artifacts(self, nomad_target: NomadTarget, tmp_path: Path) -> Iterator[ArtifactServer]:
        server = ArtifactServer(tmp_path, nomad_target.artifact_host)
        try:
            yield server
        finally:
            server.close()
