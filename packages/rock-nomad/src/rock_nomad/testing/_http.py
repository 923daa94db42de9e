"""The stand-in's HTTP API: Nomad's ``/v1`` routes, envelopes, errors and blocking queries.

One ASGI app (:meth:`~rock_nomad.testing._http_envelope.ApiEnvelope.asgi`, on starlette's
requests and responses) routes every request itself, so that Nomad's own answers for unknown
paths (``404 page not found``) and wrong methods (405 ``Invalid method``) come out as Nomad
gives them. Errors are plain text; successes are JSON with ``X-Nomad-Index``,
``X-Nomad-KnownLeader`` and ``X-Nomad-LastContact``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rock_nomad.testing.server import StandInNomad


from rock_nomad.testing._http_cluster import ClusterRoutes
from rock_nomad.testing._http_envelope import Handler
from rock_nomad.testing._http_jobs import JobRoutes
from rock_nomad.testing._http_variables import VariableRoutes

__all__ = ["Api"]


class Api(JobRoutes, ClusterRoutes, VariableRoutes):
    """Routes and handlers of the stand-in's HTTP API: its route table, over the handlers of
    :mod:`~rock_nomad.testing._http_jobs`, :mod:`~rock_nomad.testing._http_cluster` and
    :mod:`~rock_nomad.testing._http_variables` on the envelope of
    :mod:`~rock_nomad.testing._http_envelope`."""

    def __init__(self, stand_in: StandInNomad) -> None:
        super().__init__(stand_in)
        c = r"(?P<id>[^/]+)"
        j = r"(?P<id>.+)"
        table: list[tuple[str, dict[str, tuple[Handler, str]]]] = [
            (
                r"jobs",
                {
                    "GET": (self.list_jobs, "read"),
                    "PUT": (self.register, "write"),
                    "POST": (self.register, "write"),
                },
            ),
            (rf"job/{j}/allocations", {"GET": (self.job_allocations, "read")}),
            (rf"job/{j}/evaluations", {"GET": (self.job_evaluations, "read")}),
            (rf"job/{j}/summary", {"GET": (self.job_summary, "read")}),
            (rf"job/{j}/versions", {"GET": (self.job_versions, "read")}),
            (
                rf"job/{j}/evaluate",
                {"PUT": (self.job_evaluate, "write"), "POST": (self.job_evaluate, "write")},
            ),
            (
                rf"job/{j}",
                {
                    "GET": (self.get_job, "read"),
                    "PUT": (self.register, "write"),
                    "POST": (self.register, "write"),
                    "DELETE": (self.deregister, "write"),
                },
            ),
            (
                rf"allocation/{c}/stop",
                {"PUT": (self.stop_alloc, "write"), "POST": (self.stop_alloc, "write")},
            ),
            (rf"allocation/{c}", {"GET": (self.get_alloc, "read")}),
            (r"allocations", {"GET": (self.list_allocs, "read")}),
            (rf"evaluation/{c}/allocations", {"GET": (self.eval_allocations, "read")}),
            (rf"evaluation/{c}", {"GET": (self.get_eval, "read")}),
            (r"evaluations", {"GET": (self.list_evals, "read")}),
            (r"nodes", {"GET": (self.list_nodes, "read")}),
            (rf"node/{c}/allocations", {"GET": (self.node_allocations, "read")}),
            (
                rf"node/{c}/eligibility",
                {"PUT": (self.node_eligibility, "write"), "POST": (self.node_eligibility, "write")},
            ),
            (rf"node/{c}", {"GET": (self.get_node, "read")}),
            (r"namespaces", {"GET": (self.list_namespaces, "read")}),
            (rf"namespace/{c}", {"GET": (self.get_namespace, "read")}),
            (r"regions", {"GET": (self.regions, "read")}),
            (r"status/leader", {"GET": (self.leader, "none")}),
            (r"status/peers", {"GET": (self.peers, "none")}),
            (r"agent/self", {"GET": (self.agent_self, "read")}),
            (r"agent/health", {"GET": (self.agent_health, "none")}),
            (r"acl/token/self", {"GET": (self.token_self, "token")}),
            (rf"client/fs/logs/{c}", {"GET": (self.logs, "read")}),
            (r"event/stream", {"GET": (self.event_stream, "read")}),
            (r"vars", {"GET": (self.list_variables, "var-list")}),
            # Nomad answers a wrong method here with 400, not 405: the handler checks it.
            (
                r"var/(?P<path>.*)",
                {
                    m: (self.variable, "none")
                    for m in ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS")
                },
            ),
        ]
        self.routes = [(re.compile(rf"/v1/{pattern}"), methods) for pattern, methods in table]
        self.routes_by_segment = {}
        for route in self.routes:
            # Every pattern's first segment is literal: a path can only match the routes of its own.
            segment = route[0].pattern[len("/v1/") :].partition("/")[0]
            self.routes_by_segment.setdefault(segment, []).append(route)
        self.app = self.asgi
