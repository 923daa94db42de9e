"""E2B's network settings through E2B's unmodified SDK against a real admin with API keys and real
Docker sandboxes (issue #29): ``allow_out``, ``deny_out``, ``allow_internet_access`` and
``update_network`` are rock's egress policies, enforced on the host, probed from inside."""

from __future__ import annotations

import socketserver
import threading
from typing import Any

from rock_core.testing.fixtures import bridge_gateway

from .test_e2b_sdk import KEY_A, e2b, e2b_python, keyed_admin  # noqa: F401 - fixtures


class _Hello(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"hello\n")


def test_e2b_network_settings_are_rock_egress_policies_enforced_from_inside(
    e2b_python: str, keyed_admin: Any, docker_client: Any
) -> None:
    # The bridge's gateway: a host address, refused to sandboxes unless a rule names it.
    gateway = bridge_gateway(docker_client)
    server = socketserver.ThreadingTCPServer((gateway, 0), _Hello)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    ).start()
    try:
        port = str(server.server_address[1])
        out = e2b(e2b_python, keyed_admin, KEY_A, gateway, port, script="drive_network.py")
    finally:
        server.shutdown()
        server.server_close()
    assert out["allow_out"] == "answered"
    assert out["updated_deny"] == "refused"
    assert out["no_internet"] == "refused"
    assert out["updated_allow"] == "answered"
    assert "rock denies addresses and CIDRs, not domain names" in out["deny_domain"]
