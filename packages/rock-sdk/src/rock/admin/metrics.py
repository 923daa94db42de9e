"""The admin's ``GET /metrics``: its figures for Prometheus (``prometheus_client``).

Counters and the start-time histogram are kept by the admin as requests and starts happen; the
engine's figures (sandboxes by state, the start queue, warm pools, the running sandboxes' sampled
usage) are read from it at each scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rock_core.engine.manager import SandboxManager
from rock_core.states import State

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


# No `_created` series: they double the exposition and no dashboard of rock's uses them.
disable_created_metrics()


class Metrics:
    """The admin's figures for Prometheus (``prometheus_client``, a registry of its own).

    Counters and the start-time histogram are cumulative for the life of the process: they never
    go backwards. Request counts are labelled by route *template* (``.../processes/{process_id}``)
    and outcome, so their number of series is bounded. Sandbox counts, the start queue and warm
    pools are read from the engine at each scrape, and so are the running sandboxes' summed
    usage and (``per_sandbox``) each one's gauges: a sandbox's series go when it stops.
    """

    #: The ``Content-Type`` of :meth:`render`'s text.
    media_type = CONTENT_TYPE_LATEST

    def __init__(self, *, per_sandbox: bool = False) -> None:
        #: Whether each running sandbox's usage is exposed as gauges of its own (``sandbox_id`` label).
        self.per_sandbox = per_sandbox
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = PromCounter(
            "rock_http_requests",
            "Requests answered, by route template and outcome.",
            ["route", "outcome"],
            registry=self.registry,
        )
        self.start_seconds = Histogram(
            "rock_sandbox_start_seconds",
            "Seconds from a start request to running.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._manager: SandboxManager | None = None
        self.registry.register(_EngineFigures(self))

    def count(self, route: str, outcome: str) -> None:
        """Count one request of ``route`` (a template) that ended with ``outcome``
        (``success``, ``failed``, ``invalid``, ``error``, ``too_large`` or ``unauthorized``)."""
        self.requests.labels(route, outcome).inc()

    def attach(self, manager: SandboxManager | None) -> None:
        """Read the engine's figures from ``manager`` (``None``: the engine stopped); observe its starts."""
        if manager is not None and self.start_seconds.observe not in manager.start_observers:
            manager.start_observers.append(self.start_seconds.observe)
        self._manager = manager

    def render(self) -> bytes:
        """The Prometheus text exposition of the admin's figures."""
        return generate_latest(self.registry)


class _EngineFigures:
    """A collector of what the engine knows at scrape time (sandboxes by state, queue, pools)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        manager = self._metrics._manager
        if manager is None:
            return
        by_state = manager.count_by_state()
        sandboxes = GaugeMetricFamily(
            "rock_sandboxes", "Sandboxes known to the admin, by state.", labels=["state"]
        )
        for state in State:
            sandboxes.add_metric([state.value], by_state.get(state, 0))
        yield sandboxes
        yield GaugeMetricFamily(
            "rock_start_queue_depth",
            "Starts waiting for a slot in the start queue.",
            value=manager.queue.depth,
        )
        yield GaugeMetricFamily(
            "rock_start_queue_active", "Starts holding a slot now.", value=manager.queue.active
        )
        pools = manager.warm_pools()
        for name, family, help_text in (
            ("ready", GaugeMetricFamily, "Started sandboxes waiting in a warm pool."),
            ("size", GaugeMetricFamily, "Target size of a warm pool."),
            ("claimed", CounterMetricFamily, "Starts served from a warm pool."),
            ("failures", CounterMetricFamily, "Warm-pool members that failed to start."),
        ):
            metric = family(f"rock_warm_pool_{name}", help_text, labels=["pool", "image"])
            for pool in pools:
                metric.add_metric([pool.key, pool.image], getattr(pool, name))
            yield metric
        yield from _usage_figures(manager, per_sandbox=self._metrics.per_sandbox)


_USAGE_GAUGES = (
    ("cpu_percent", "CPU use in percent of one core over the last sample."),
    ("memory_bytes", "Memory in use (less reclaimable file cache)."),
    ("memory_limit_bytes", "Memory limit."),
    ("network_rx_bytes", "Bytes received since the sandbox started."),
    ("network_tx_bytes", "Bytes sent since the sandbox started."),
    ("pids", "Processes and threads."),
    ("oom_kills", "Processes the OOM killer ended."),
    ("egress_refused", "Connections the sandbox's egress policy refused."),
)


def _usage_figures(manager: SandboxManager, *, per_sandbox: bool) -> Iterator[Any]:
    """The running sandboxes' sampled usage: totals always, one series per sandbox when asked
    (bounded by the running sandboxes: a sandbox's series go with it)."""
    sampled = list(manager.usages().items())
    yield GaugeMetricFamily(
        "rock_sandboxes_cpu_percent",
        "Summed CPU use of the running sandboxes, in percent of one core.",
        value=sum(u.cpu_percent for _, u in sampled),
    )
    yield GaugeMetricFamily(
        "rock_sandboxes_memory_bytes",
        "Summed memory in use by the running sandboxes.",
        value=sum(u.memory_bytes for _, u in sampled),
    )
    yield GaugeMetricFamily(
        "rock_sandboxes_near_memory_limit",
        "Running sandboxes whose memory is near their limit.",
        value=sum(1 for _, u in sampled if any(w.startswith("memory at") for w in u.warnings)),
    )
    yield GaugeMetricFamily(
        "rock_sandboxes_egress_refused",
        "Connections the running sandboxes' egress policies refused, summed.",
        value=sum(u.egress_refused or 0 for _, u in sampled),
    )
    if not per_sandbox:
        return
    for field, help_text in _USAGE_GAUGES:
        metric = GaugeMetricFamily(f"rock_sandbox_{field}", help_text, labels=["sandbox_id"])
        for sandbox_id, usage in sampled:
            value = getattr(usage, field)
            if value is not None:
                metric.add_metric([sandbox_id], value)
        yield metric
