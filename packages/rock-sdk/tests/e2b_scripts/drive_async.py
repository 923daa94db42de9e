"""Drives rock's admin with E2B's unmodified SDK (async): prints one JSON object."""

import asyncio
import json
import os
import sys

from e2b import AsyncSandbox


async def main() -> None:
    sbx = await AsyncSandbox.create(template="python:3.11", timeout=300)
    seen: list[str] = []
    r = await sbx.commands.run("echo one; echo two >&2; exit 0", on_stdout=seen.append)
    await sbx.files.write("/tmp/async.txt", "async text")
    text = await sbx.files.read("/tmp/async.txt")
    names = [e.name for e in await sbx.files.list("/tmp")]
    # watch_dir (async: envd's WatchDir stream, events to a callback)
    await sbx.files.make_dir("/tmp/watched")
    events: list = []
    created = asyncio.Event()

    def on_event(event) -> None:
        events.append([event.name, event.type.value])
        created.set()

    handle = await sbx.files.watch_dir("/tmp/watched", on_event=on_event)
    await sbx.files.write("/tmp/watched/made.txt", "x")
    await asyncio.wait_for(created.wait(), 60)
    await handle.stop()
    reader = await sbx.commands.run("cat", background=True, stdin=True)
    await sbx.commands.send_stdin(reader.pid, "typed\n")
    await sbx.commands.close_stdin(reader.pid)
    typed = (await reader.wait()).stdout
    killed = await sbx.kill()
    print(
        json.dumps(
            {
                "stdout": r.stdout,
                "stderr": r.stderr,
                "seen": "".join(seen),
                "text": text,
                "listed": "async.txt" in names,
                "watched": events,
                "stdin": typed,
                "killed": killed,
            }
        )
    )


asyncio.run(main())
# Leave without the interpreter's teardown: E2B's async SDK's native HTTP layer (pyqwest) was
# seen to abort (SIGABRT) there now and then, after all of the above had been answered.
sys.stdout.flush()
os._exit(0)
