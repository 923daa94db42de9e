"""The docker runtime's egress policies (capability ``egress``): a mixin of
:class:`~rock_docker.runtime.DockerRuntime` over :class:`~rock_docker._firewall.Firewall`,
its blocking calls run through the runtime's ``_run``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import docker
import docker.errors

from rock_core.egress import EgressPolicy
from rock_core.models import UnitStats
from rock_core.runtime import UnitHandle
from rock_docker._firewall import Firewall
from rock_docker._options import DockerOptions

__all__ = ["EgressRules", "host_resolvers"]


def host_resolvers(path: str = "/etc/resolv.conf") -> tuple[str, ...]:
    """The host's IPv4 name servers but loopback ones (what Docker gives a container)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return ()
    found = [
        line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1
    ]
    return tuple(s for s in found if "." in s and not s.startswith("127."))


class EgressRules:
    """``set_egress``, ``sync_egress`` and the rules' removal with a unit's stop or removal."""

    options: DockerOptions
    _run: Callable[..., Any]
    _docker: Callable[[], docker.DockerClient]
    _firewall_made: Firewall | None = None

    @property
    def _firewall(self) -> Firewall:
        if self._firewall_made is None:
            dns = self.options.egress_dns
            self._firewall_made = Firewall(
                (dns,) if dns else host_resolvers(), self.options.egress_resolve_interval
            )
        return self._firewall_made

    async def set_egress(self, handle: UnitHandle, policy: EgressPolicy | None) -> None:
        """The container's chains written again for ``policy`` (``None``: removed), in one
        atomic ``iptables-restore`` (:mod:`rock_docker._firewall`)."""
        await self._run(
            lambda: self._firewall.apply(self._docker().api, handle.unit_id, policy),
            attempted="egress",
            sandbox_id=handle.sandbox_id,
        )

    async def sync_egress(self, wanted: Mapping[str, tuple[UnitHandle, EgressPolicy]]) -> None:
        """Rules put back, domains followed, leftovers (of containers not running) removed."""

        def running() -> set[str]:
            # A paused container keeps its address, and its rules.
            filters = {"status": ["running", "paused"]}
            rows = self._docker().api.containers(quiet=True, filters=filters)
            return {str(row["Id"]) for row in rows}

        policies = {unit_id: policy for unit_id, (_handle, policy) in wanted.items()}
        if not policies and not self._firewall.usable():
            # No policy here, and a host where this process cannot use iptables has no rules of
            # rock's to sweep either: nothing to do, and no warning every interval.
            return
        await self._run(
            lambda: self._firewall.sync(self._docker().api, policies, running),
            attempted="egress",
        )

    def _with_refusals(self, samples: Mapping[str, UnitStats]) -> Mapping[str, UnitStats]:
        """``samples`` with each policed unit's refused connections (one ``iptables-save``)."""
        firewall = self._firewall_made
        if firewall is None or not firewall.policed():
            return samples
        counts = firewall.refused()
        return {
            unit_id: attrs.evolve(stats, egress_refused=counts[unit_id[:16]])
            if unit_id[:16] in counts
            else stats
            for unit_id, stats in samples.items()
        }

    async def _drop_stale_egress(self, handle: UnitHandle) -> None:
        """Another unit's rules keyed by the address ``handle``'s container just got go, before
        its rocklet is asked anything (policy or not): without, a container removed in the
        background left its policy on whichever container got its address next. Nothing is
        asked of the host when no other unit has rules (it is read once per process)."""
        firewall = self._firewall
        if firewall.clear_of_others(handle.unit_id):
            return
        await self._run(
            lambda: firewall.drop_stale(self._docker().api, handle.unit_id),
            attempted="egress",
            sandbox_id=handle.sandbox_id,
        )

    async def _forget_egress_of(self, handles: Sequence[UnitHandle]) -> None:
        """The rules of units handed to the reaper go now, in one change (their sandboxes are
        ended; the reaper removes the containers without this process)."""
        firewall = self._firewall_made
        if firewall is not None:
            keys = [h.unit_id for h in handles if firewall.knows(h.unit_id)]
            if keys:
                await self._run(lambda: firewall.drop_all(keys), attempted="egress")

    async def _forget_egress(self, handle: UnitHandle) -> None:
        """A stopped or removed container's rules go (its address may be given to another)."""
        firewall = self._firewall_made
        if firewall is not None and firewall.knows(handle.unit_id):
            await self._run(lambda: firewall.drop(handle.unit_id), attempted="egress")
