"""Trajectories: one JSONL line per model call (:class:`TrajectoryRecorder`) and the replay of a
recorded file (:class:`SequentialCursor`), ROCK's names and schema.

A line holds ``request``, ``response`` (a stream aggregated into one ChatCompletion), ``status``
(``success`` / ``failure`` / ``session_end`` ...), ``response_time`` (seconds), ``start_time``,
``end_time``, ``model``, ``stream``, ``error``, and rock's ``usage`` (the token counts the
answer reported), ``attempts`` (proxy) and ``index`` (local).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Optional, Union


class TrajectoryRecorder:
    """Appends one line per call to ``traj_file`` (truncated at start unless ``append``)."""

    def __init__(self, traj_file: Union[str, os.PathLike], append: bool = True) -> None:
        self.traj_file = Path(traj_file)
        self.traj_file.parent.mkdir(parents=True, exist_ok=True)
        if not append:
            self.traj_file.write_text("", encoding="utf-8")
        self._lock = threading.Lock()

    def record(
        self,
        *,
        request: Any,
        response: Any,
        status: str,
        start_time: float,
        end_time: float,
        error: Optional[str] = None,
        **extra: Any,
    ) -> None:
        payload = {
            "model": request.get("model") if isinstance(request, dict) else None,
            "stream": bool(request.get("stream")) if isinstance(request, dict) else False,
            "status": status,
            "response_time": end_time - start_time,
            "start_time": start_time,
            "end_time": end_time,
            "request": request,
            "response": response,
            "error": error,
            "usage": response.get("usage") if isinstance(response, dict) else None,
            **extra,
        }
        self._write(payload)

    def record_call(self, call: dict[str, Any]) -> None:
        """A local-mode call as :meth:`LocalBackend.trajectory` gives it."""
        self._write({**call, "error": None})

    def _write(self, payload: dict[str, Any]) -> None:
        line = json.dumps(payload, ensure_ascii=False, default=str) + "\n"
        with self._lock, self.traj_file.open("a", encoding="utf-8") as f:
            f.write(line)


class TrajectoryExhausted(Exception):
    """Every recorded call has been served."""

    def __init__(self, position: int, total: int) -> None:
        super().__init__(f"trajectory exhausted at step {position} (total recorded steps={total})")
        self.position = position
        self.total = total


class SequentialCursor:
    """Hands out a recorded trajectory's calls in order."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self._idx = 0

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> SequentialCursor:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"traj file not found: {file}")
        records = []
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{file}, line {number}: not JSON ({exc})") from None
        return cls(records)

    def next(self, expected_model: Optional[str] = None) -> dict[str, Any]:
        if self._idx >= len(self.records):
            raise TrajectoryExhausted(self._idx, len(self.records))
        record = self.records[self._idx]
        self._idx += 1
        recorded = record.get("model")
        if expected_model and recorded and recorded != expected_model:
            print(
                f"[traj-replay] step {self._idx - 1} model mismatch: recorded={recorded!r} "
                f"requested={expected_model!r}",
                flush=True,
            )
        return record

    def reset(self) -> None:
        self._idx = 0

    @property
    def position(self) -> int:
        return self._idx

    @property
    def total(self) -> int:
        return len(self.records)
