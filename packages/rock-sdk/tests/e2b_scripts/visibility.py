"""E2B's SDK and a sandbox ROCK's API made (argv: its id, a metadata tag): lists it by metadata,
connects, runs a command in it; then makes one of its own for rock's CLI (left running).
Prints one JSON object, with the E2B sandbox's access token for the data-plane checks."""

import json
import sys

from e2b import Sandbox, SandboxQuery

rock_made, tag = sys.argv[1], sys.argv[2]
out: dict = {}
out["listed"] = [
    s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
]
try:
    sbx = Sandbox.connect(rock_made)
    out["ran"] = sbx.commands.run("cat /tmp/from-rock.txt").stdout
except Exception as exc:  # noqa: BLE001
    out["ran"] = f"{type(exc).__name__}: {exc}"
mine = Sandbox.create(template="python:3.11", timeout=120, metadata={"suite": tag, "by": "e2b"})
mine.files.write("/tmp/from-e2b.txt", "written by e2b")
out["e2b_made"] = mine.sandbox_id
pager = Sandbox.list(query=SandboxQuery(metadata={"suite": tag}), limit=1)
out["pages"] = []
while pager.has_next:
    out["pages"].append([s.sandbox_id for s in pager.next_items()])
out["token"] = mine._envd_access_token
print(json.dumps(out))
