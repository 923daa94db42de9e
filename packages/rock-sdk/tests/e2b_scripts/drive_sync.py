"""Drives rock's admin with E2B's unmodified SDK (sync), run in the SDK's own venv. Prints one
JSON object of what each call answered; the test reads it."""

import json
import sys

from e2b import CommandExitException, NotFoundException, Sandbox, SandboxQuery

out: dict = {}
tag = sys.argv[1]
sbx = Sandbox.create(
    template="python:3.11", timeout=600, metadata={"suite": tag}, envs={"GREETING": "hi"}
)
out["sandbox_id"] = sbx.sandbox_id
out["info_state"] = str(sbx.get_info().state.value)
out["listed"] = [
    s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
]
out["listed_other"] = [
    s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"suite": "nope"})).next_items()
]

stdout, stderr = [], []
r = sbx.commands.run(
    "echo out-$GREETING-$X; echo err >&2; pwd",
    envs={"X": "y"},
    cwd="/tmp",
    on_stdout=stdout.append,
    on_stderr=stderr.append,
)
out["fg"] = {
    "exit": r.exit_code,
    "stdout": r.stdout,
    "stderr": r.stderr,
    "cb_out": "".join(stdout),
    "cb_err": "".join(stderr),
}
try:
    sbx.commands.run("exit 3")
    out["exit3"] = None
except CommandExitException as exc:
    out["exit3"] = exc.exit_code

bg = sbx.commands.run("sleep 0.2; echo done-bg", background=True)
out["bg_listed"] = bg.pid in [p.pid for p in sbx.commands.list()]
res = bg.wait()
out["bg"] = {"exit": res.exit_code, "stdout": res.stdout}

long = sbx.commands.run("sleep 300", background=True)
out["killed"] = sbx.commands.kill(long.pid)
try:
    long.wait()
    out["killed_exit"] = 0
except CommandExitException as exc:
    out["killed_exit"] = exc.exit_code

try:
    sbx.commands.send_stdin(long.pid, "x")
    out["stdin"] = "served"
except Exception as exc:  # noqa: BLE001
    out["stdin"] = f"{type(exc).__name__}: {exc}"

fs = sbx.files
fs.write("/tmp/e2b/a.txt", "hello text")
fs.write("/tmp/e2b/b.bin", b"\x00\x01bytes")
fs.write_files([{"path": "/tmp/e2b/c.txt", "data": "c"}, {"path": "/tmp/e2b/d.txt", "data": "d"}])
out["read_text"] = fs.read("/tmp/e2b/a.txt")
out["read_bytes"] = list(fs.read("/tmp/e2b/b.bin", format="bytes"))
out["list"] = sorted(e.name for e in fs.list("/tmp/e2b"))
out["exists"] = [fs.exists("/tmp/e2b/a.txt"), fs.exists("/tmp/e2b/zzz")]
info = fs.get_info("/tmp/e2b/a.txt")
out["info"] = {"name": info.name, "type": str(info.type.value), "size": info.size}
out["mkdir"] = [fs.make_dir("/tmp/e2b/sub"), fs.make_dir("/tmp/e2b/sub")]
moved = fs.rename("/tmp/e2b/c.txt", "/tmp/e2b/sub/c2.txt")
out["renamed"] = moved.path
fs.remove("/tmp/e2b/d.txt")
out["after_remove"] = sorted(e.name for e in fs.list("/tmp/e2b"))
try:
    fs.read("/tmp/e2b/missing.txt")
    out["missing"] = None
except NotFoundException as exc:
    out["missing"] = str(exc)

sbx.set_timeout(300)
same = Sandbox.connect(sbx.sandbox_id)
out["connected_run"] = same.commands.run("cat /tmp/e2b/a.txt").stdout
try:
    Sandbox.connect("no-such-sandbox")
    out["unknown"] = None
except Exception as exc:  # noqa: BLE001
    out["unknown"] = type(exc).__name__
try:
    Sandbox.create(template="rock-no-such-template-e2b:none", timeout=60)
    out["bad_template"] = None
except Exception as exc:  # noqa: BLE001
    out["bad_template"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
