"""E2B's sync SDK's directory watchers (CreateWatcher) on rock, as many as a caller asks for: each
is a listing of the directory every 0.25 s by the admin, so a sandbox has a bounded number of
them. Prints one JSON object: how many were made, the refusal, and one made after a stop."""

import json

from e2b import Sandbox

out: dict = {}
sbx = Sandbox.create(template="python:3.11", timeout=120)
handles = []
out["refused"] = None
for _ in range(40):
    try:
        handles.append(sbx.files.watch_dir("/tmp"))
    except Exception as exc:  # noqa: BLE001
        out["refused"] = f"{type(exc).__name__}: {exc}"
        break
out["made"] = len(handles)
handles.pop(0).stop()
handles.append(sbx.files.watch_dir("/tmp"))
out["after_stop"] = "made"
sbx.kill()
print(json.dumps(out))
