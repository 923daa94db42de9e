"""Drives rock's admin with E2B's unmodified SDK (async): prints one JSON object."""

import asyncio
import json

from e2b import AsyncSandbox


async def main() -> None:
    sbx = await AsyncSandbox.create(template="python:3.11", timeout=300)
    seen: list[str] = []
    r = await sbx.commands.run("echo one; echo two >&2; exit 0", on_stdout=seen.append)
    await sbx.files.write("/tmp/async.txt", "async text")
    text = await sbx.files.read("/tmp/async.txt")
    names = [e.name for e in await sbx.files.list("/tmp")]
    killed = await sbx.kill()
    print(
        json.dumps(
            {
                "stdout": r.stdout,
                "stderr": r.stderr,
                "seen": "".join(seen),
                "text": text,
                "listed": "async.txt" in names,
                "killed": killed,
            }
        )
    )


asyncio.run(main())
