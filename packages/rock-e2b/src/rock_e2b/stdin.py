"""A command's stdin (E2B's ``stdin=True``, ``send_stdin``, ``close_stdin``) on rock, whose
rocklet runs commands with stdin from ``/dev/null``: the command reads a named pipe in the
sandbox instead, held open by a ``sleep`` of its own so it sees no end of input between two
writes. ``send_stdin`` writes to the pipe (a rocklet command per write, in order);
``close_stdin`` ends the holder, so the command reads the end of its input; the pipe goes when
the command ends.
"""

from __future__ import annotations

import base64
import secrets

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from rock_core.actions import Command
from rock_e2b.dataplane import Target

__all__ = ["close", "new_pipe", "send", "wrap"]

#: Runs ``"$@"`` with stdin from the pipe ``$1`` (made here), held open until ``close``. The
#: shell opens the pipe read-write first (no wait for a reader) and the holder inherits that
#: end when it is forked, before the command opens the pipe: the holder once opened it itself,
#: in the background, and a ``send`` that came first was the only writer, so the command read
#: the end of its input after the first write and was gone before ``close_stdin``.
_WRAPPER = """f=$1; shift
mkfifo -m 600 "$f" || exit 127
exec 3<>"$f"
sh -c 'echo $$ > "$1.pid"; exec sleep 2147483647' holder "$f" >&3 3>&- 2>/dev/null &
exec 3>&-
"$@" < "$f"; code=$?
[ -s "$f.pid" ] && kill "$(cat "$f.pid")" 2>/dev/null
rm -f "$f" "$f.pid"; exit $code"""

#: Writes base64 ``$2`` to the pipe ``$1``, if the command still reads it.
_SEND = '[ -p "$1" ] || { echo "stdin is closed" >&2; exit 3; }; printf %s "$2" | base64 -d > "$1"'

#: Ends the pipe's holder: the command reads the end of its input once the pipe is drained.
_CLOSE = """for i in 1 2 3 4 5 6 7 8 9 10; do [ -s "$1.pid" ] && break; sleep 0.1; done
[ -s "$1.pid" ] || { echo "stdin is closed" >&2; exit 3; }
kill "$(cat "$1.pid")\""""

#: Bytes per write: their base64 stays well within one argument's limit (128 KiB).
_CHUNK = 48 * 1024


def new_pipe() -> str:
    return f"/tmp/.rock-e2b-stdin-{secrets.token_hex(8)}"


def wrap(argv: list[str], pipe: str) -> list[str]:
    """``argv`` run with its stdin from ``pipe``."""
    return ["/bin/sh", "-c", _WRAPPER, "rock-e2b-stdin", pipe, *argv]


async def _run(where: Target, script: str, *args: str) -> None:
    client = where.engine.rocklet(where.sandbox_id, "e2b stdin")
    answer = await client.execute(
        Command(command=["/bin/sh", "-c", script, "sh", *args], timeout=30)
    )
    if answer.exit_code == 3:
        raise ConnectError(Code.FAILED_PRECONDITION, f"the command's {answer.stderr.strip()}")
    if answer.exit_code != 0:
        raise ConnectError(
            Code.INTERNAL, f"writing the command's stdin failed: {answer.stderr.strip()}"
        )


async def send(where: Target, pipe: str, data: bytes) -> None:
    for start in range(0, len(data), _CHUNK) or [0]:
        chunk = base64.b64encode(data[start : start + _CHUNK]).decode()
        await _run(where, _SEND, pipe, chunk)


async def close(where: Target, pipe: str) -> None:
    await _run(where, _CLOSE, pipe)
