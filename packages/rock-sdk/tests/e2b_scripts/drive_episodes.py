"""E2B's SDK (sync) on rock: pause/connect, snapshots, fork, metrics, set_timeout, commands.connect,
bad input, and a sandbox killed mid-stream (argv: a tag for metadata). Prints one JSON object."""

import json
import sys
import threading
import time

from e2b import CommandExitException, Sandbox, SandboxQuery

out: dict = {}
tag = sys.argv[1]


def refusal(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


sbx = Sandbox.create(template="python:3.11", timeout=120, metadata={"suite": tag})
out["sandbox_id"] = sbx.sandbox_id

# commands.connect: a second handle on a running command gets its later output and exit.
proc = sbx.commands.run("sleep 1; echo later; exit 4", background=True)
again = sbx.commands.connect(proc.pid)
try:
    again.wait()
    out["connected"] = None
except CommandExitException as exc:
    out["connected"] = {"exit": exc.exit_code, "stdout": exc.stdout}

# pause keeps the processes: a counter started before goes on after connect.
sbx.commands.run(
    "sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done'", background=True
)
sbx.commands.run("sleep 0.5")
out["pause"] = sbx.pause()
out["paused_state"] = [
    s.state.value for s in Sandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
]
out["pause_again"] = Sandbox.pause(sbx.sandbox_id)
resumed = Sandbox.connect(sbx.sandbox_id)
before = int(resumed.commands.run("cat /tmp/n").stdout)
resumed.commands.run("sleep 0.5")
out["counter_goes_on"] = int(resumed.commands.run("cat /tmp/n").stdout) > before

# snapshots: a filesystem snapshot starts a new sandbox with the files; a full one is refused.
sbx.files.write("/opt/marker.txt", "from the snapshot")
snap = sbx.create_snapshot(name=f"e2b-{tag}", mode="filesystem")
out["snapshot_id"] = snap.snapshot_id
out["snapshots_listed"] = [
    s.snapshot_id for s in Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
]
child = Sandbox.create(template=snap.snapshot_id, timeout=60)
out["child_file"] = child.files.read("/opt/marker.txt")
child.kill()
out["full_snapshot"] = refusal(lambda: sbx.create_snapshot())
out["fork"] = refusal(lambda: sbx.fork(count=1))

metrics = sbx.get_metrics()
out["metrics"] = {
    "n": len(metrics),
    "mem_total": metrics[0].mem_total > 0,
    "cpus": metrics[0].cpu_count,
}
out["long_timeout"] = refusal(lambda: sbx.set_timeout(3600))
sbx.set_timeout(60)

# bad input
out["read_dir"] = refusal(lambda: sbx.files.read("/tmp"))
out["list_file"] = refusal(lambda: sbx.files.list("/etc/hostname"))
out["read_missing"] = refusal(lambda: sbx.files.read("/no/such/file"))
# stdin: written in order, then closed, so the command reads its end.
reader = sbx.commands.run("cat; echo end", background=True, stdin=True)
sbx.commands.send_stdin(reader.pid, "hello ")
sbx.commands.send_stdin(reader.pid, b"world\n")
sbx.commands.close_stdin(reader.pid)
out["stdin"] = reader.wait().stdout
no_stdin = sbx.commands.run("sleep 30", background=True)
out["no_stdin"] = refusal(lambda: sbx.commands.send_stdin(no_stdin.pid, "x"))
sbx.commands.kill(no_stdin.pid)

# watch_dir (sync: the watcher polled with get_new_events)
sbx.files.make_dir("/tmp/watched")
watcher = sbx.files.watch_dir("/tmp/watched")
sbx.files.write("/tmp/watched/new.txt", "x")
seen = []
for _ in range(200):
    seen += [(e.name, e.type.value) for e in watcher.get_new_events()]
    if ("new.txt", "create") in seen:
        break
    time.sleep(0.05)
sbx.files.remove("/tmp/watched/new.txt")
for _ in range(200):
    seen += [(e.name, e.type.value) for e in watcher.get_new_events()]
    if ("new.txt", "remove") in seen:
        break
    time.sleep(0.05)
watcher.stop()
out["watched"] = seen
out["user"] = refusal(lambda: sbx.commands.run("id", user="user"))
out["file_user"] = refusal(lambda: sbx.files.read("/etc/hostname", user="user"))
out["list_user"] = refusal(lambda: sbx.files.list("/tmp", user="user"))
out["kill_unknown_pid"] = sbx.commands.kill(999999)

# a sandbox killed mid-stream: the waiting command ends with an error, not a hang.
long = sbx.commands.run("echo started; sleep 600", background=True, timeout=0)
threading.Timer(1.0, lambda: Sandbox.kill(sbx.sandbox_id)).start()
try:
    long.wait()
    out["mid_stream"] = None
except CommandExitException as exc:
    out["mid_stream"] = {"stdout": exc.stdout, "exit": exc.exit_code, "error": exc.error}
out["after_kill"] = refusal(lambda: sbx.commands.run("true"))
Sandbox.delete_snapshot(snap.snapshot_id)
out["snapshot_deleted"] = snap.snapshot_id not in [
    s.snapshot_id for s in Sandbox.list_snapshots().next_items()
]
print(json.dumps(out))
