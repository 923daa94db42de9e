"""E2B's network settings on rock (argv: an address outside the sandbox and its port, where a
server says hello): allow_out, deny_out, allow_internet_access and update_network, probed from
inside. Prints one JSON object of outcomes (answered / refused / ...)."""

import json
import sys

from e2b import Sandbox

target, port = sys.argv[1], sys.argv[2]
PROBE = f"""
import socket
s = socket.socket(); s.settimeout(20)
try:
    s.connect(({target!r}, {port})); print("answered" if s.recv(16).startswith(b"hello") else "silent")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
except OSError as exc:
    print("error", exc.errno)
"""


def probe(sbx):
    sbx.files.write("/tmp/probe.py", PROBE)
    return sbx.commands.run("python3 /tmp/probe.py").stdout.strip()


out = {}
allowed = Sandbox.create(
    template="python:3.11", timeout=120, network={"deny_out": ["0.0.0.0/0"], "allow_out": [target]}
)
out["allow_out"] = probe(allowed)
allowed.update_network({"deny_out": [target]})
out["updated_deny"] = probe(allowed)
allowed.kill()
closed = Sandbox.create(template="python:3.11", timeout=120, allow_internet_access=False)
out["no_internet"] = probe(closed)
closed.update_network({"allow_out": [target]})
out["updated_allow"] = probe(closed)
closed.kill()
try:
    Sandbox.create(template="python:3.11", timeout=60, network={"deny_out": ["example.com"]})
    out["deny_domain"] = None
except Exception as exc:  # noqa: BLE001
    out["deny_domain"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
