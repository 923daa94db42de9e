"""The stand-in's Nomad Variables: the store behind ``/v1/var/<path>`` and ``/v1/vars``, and
what a task's own workload identity may read of it.

Written from Nomad's documented Variables API: a variable is ``Items`` (string to string, at
most 64 KiB in all) at a ``Path`` of a namespace; a write may be check-and-set (``cas``: the
``ModifyIndex`` it expects, ``0`` for "only if absent") and a conflict answers 409 with the
variable as it is; an unchanged write changes nothing; deleting an absent variable is fine.
Paths are 1 to 128 of ``a-z A-Z 0-9 - _ ~ /``, and under the top-level ``nomad`` only
``nomad/jobs`` (and below) and ``nomad/job-templates/<name>`` may be written.

A task reads variables through its implicit workload identity: the paths of its own job in its
job's namespace (``nomad/jobs/<job>``, ``nomad/jobs/<job>/<group>``,
``nomad/jobs/<job>/<group>/<task>``), nothing else.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from rock_nomad.testing._model import NomadError

__all__ = ["MAX_VARIABLE_SIZE", "VariableStore", "workload_may_read"]

#: Items' keys and values together, in bytes.
MAX_VARIABLE_SIZE = 65536
_VALID_PATH = re.compile(r"[a-zA-Z0-9\-_~/]{1,128}")


def path_problem(path: str) -> str | None:
    """Why Nomad refuses to store a variable at ``path``; ``None`` when it may."""
    if not path:
        return "variable requires path"
    if not _VALID_PATH.fullmatch(path):
        return f'invalid path "{path}"'
    parts = path.split("/")
    if parts[0] != "nomad":
        return None
    if len(parts) == 1:
        return (
            '"nomad" is a reserved top-level directory path, but you may write variables to "nomad/jobs", '
            '"nomad/job-templates", or below'
        )
    if parts[1] == "jobs" or parts[1] == "job-templates" and len(parts) == 3:
        return None
    if parts[1] == "job-templates":
        return '"nomad/job-templates" is a reserved directory path, but you may write variables at the level below it'
    return 'only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths under the top-level "nomad" directory'


def workload_may_read(path: str, *, job_id: str, group: str, task: str) -> bool:
    """Whether a task's implicit workload identity may read the variable at ``path`` (in its
    job's namespace): only its own job's paths."""
    own = f"nomad/jobs/{job_id}"
    return path in (own, f"{own}/{group}", f"{own}/{group}/{task}")


class VariableStore:
    """Variables by ``(namespace, path)``; every write raises the cluster's index through ``bump``."""

    def __init__(self, bump: Callable[[], int]) -> None:
        self._bump = bump
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    @staticmethod
    def metadata(var: dict[str, Any]) -> dict[str, Any]:
        """A variable as ``/v1/vars`` lists it: everything but its ``Items``."""
        return {k: v for k, v in var.items() if k != "Items"}

    def get(self, namespace: str, path: str) -> dict[str, Any] | None:
        return self.items.get((namespace, path))

    def list(self, namespace: str, prefix: str) -> list[dict[str, Any]]:
        """Metadata of the variables of ``namespace`` (``*``: all) whose path starts with ``prefix``,
        by namespace and path."""
        found = [
            self.metadata(v)
            for (ns, path), v in self.items.items()
            if (namespace == "*" or ns == namespace) and path.startswith(prefix)
        ]
        return sorted(found, key=lambda v: (v["Namespace"], v["Path"]))

    def put(
        self, namespace: str, path: str, items: Any, *, cas: int | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Write ``items`` at ``path``: ``(the variable written, None)``, or ``(None, the
        conflicting variable)`` when ``cas`` does not match.

        :raises NomadError: 400 without items; 500 for what Nomad's validation refuses.
        """
        if not isinstance(items, dict) or not items:
            raise NomadError(400, "variable missing required Items object")
        if any(not isinstance(k, str) or not isinstance(v, str) for k, v in items.items()):
            raise NomadError(400, "json: cannot unmarshal a variable item that is not a string")
        if namespace == "*":
            raise NomadError(500, 'can not target wildcard ("*")namespace')
        if sum(len(k) + len(v) for k, v in items.items()) > MAX_VARIABLE_SIZE:
            raise NomadError(500, "variables are limited to 64KiB in total size")
        problem = path_problem(path)
        if problem is not None:
            raise NomadError(500, problem)
        key = (namespace, path)
        existing = self.items.get(key)
        conflict = self._conflict(namespace, path, existing, cas)
        if conflict is not None:
            return None, conflict
        if existing is not None and existing["Items"] == items:
            return dict(existing), None  # unchanged: nothing is written, its index stays
        index = self._bump()
        now = time.time_ns()
        var = {
            "Namespace": namespace,
            "Path": path,
            "Lock": None,
            "CreateIndex": existing["CreateIndex"] if existing else index,
            "CreateTime": existing["CreateTime"] if existing else now,
            "ModifyIndex": index,
            "ModifyTime": now,
            "Items": dict(items),
        }
        self.items[key] = var
        return dict(var), None

    def delete(self, namespace: str, path: str, *, cas: int | None) -> dict[str, Any] | None:
        """Delete the variable at ``path`` (absent is fine); the conflicting variable when ``cas``
        does not match, else ``None``."""
        key = (namespace, path)
        existing = self.items.get(key)
        conflict = self._conflict(namespace, path, existing, cas)
        if conflict is not None:
            return conflict
        if existing is not None:
            del self.items[key]
            self._bump()
        return None

    @staticmethod
    def _conflict(
        namespace: str, path: str, existing: dict[str, Any] | None, cas: int | None
    ) -> dict[str, Any] | None:
        """What a check-and-set against ``cas`` conflicts with (``0``: "only if absent"); ``None``
        when it may go ahead."""
        if cas is None:
            return None
        if existing is None:
            if cas == 0:
                return None
            # Expected a variable that is not there: a zero value is the conflict.
            return {
                "Namespace": namespace,
                "Path": path,
                "Lock": None,
                "CreateIndex": 0,
                "CreateTime": 0,
                "ModifyIndex": 0,
                "ModifyTime": 0,
                "Items": None,
            }
        if existing["ModifyIndex"] != cas:
            return dict(existing)
        return None
