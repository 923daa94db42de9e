"""What one call of a record store costs: put and get medians (and 99th percentiles), for
rock-postgres over the test server's unix socket and, beside it, rock-core's SQLite in memory and
in a file; and what the hand-over to rock-postgres's own event-loop thread adds to each call.

    .venv/bin/python packages/rock-postgres/benchmarks/store_calls.py [--calls N] [--url URL]

``--url`` defaults to the server of ``scripts/ensure-postgres.sh`` (``.rock-state/postgres/url``);
the benchmark makes a database of its own there and drops it at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs

from rock_core.engine.store import SqliteRecordStore
from rock_core.records import RecordStore
from rock_core.states import State
from rock_core.testing import sample_record
from rock_postgres._loop import LoopThread
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import database_url, run_sql


def _timed(call: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return times


def measure(name: str, store: RecordStore, calls: int) -> None:
    record = sample_record()
    states = [State.PENDING, State.RUNNING, State.STOPPED]
    versions = [attrs.evolve(record, state=states[i % 3]) for i in range(calls)]
    store.put(record)
    _timed(lambda: store.get(record.sandbox_id), 50)  # warm up
    it = iter(versions)
    puts = _timed(lambda: store.put(next(it)), calls)
    gets = _timed(lambda: store.get(record.sandbox_id), calls)
    for what, times in (("put", puts), ("get", gets)):
        ordered = sorted(times)
        print(
            f"{name:<24} {what}  p50 {statistics.median(times) * 1e3:7.3f} ms"
            f"  p99 {ordered[int(len(ordered) * 0.99) - 1] * 1e3:7.3f} ms  ({calls} calls)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    url = args.url
    if url is None:
        found = Path(__file__).resolve().parents[3] / ".rock-state" / "postgres" / "url"
        if not found.is_file():
            print(
                "no PostgreSQL server: run scripts/ensure-postgres.sh or give --url",
                file=sys.stderr,
            )
            return 2
        url = found.read_text(encoding="utf-8").strip()
    name = f"rock_bench_{uuid.uuid4().hex[:12]}"
    run_sql(url, f'CREATE DATABASE "{name}"')
    try:
        store = PostgresRecordStore(database_url(url, name))
        store.open()
        try:
            measure("postgres (unix socket)", store, args.calls)
        finally:
            store.close()
    finally:
        run_sql(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    loop = LoopThread("bench")

    async def nothing() -> None:
        return None

    hops = _timed(lambda: loop.run(nothing(), 5), args.calls)
    loop.close()
    print(
        f"{'hand-over to the thread':<24} p50 {statistics.median(hops) * 1e3:7.3f} ms"
        f"  (what the store's own thread adds to each call)"
    )
    memory = SqliteRecordStore()
    measure("sqlite (memory)", memory, args.calls)
    memory.close()
    with tempfile.TemporaryDirectory() as folder:
        file = SqliteRecordStore(Path(folder) / "rock.db")
        measure("sqlite (file, WAL)", file, args.calls)
        file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
