"""Where rock-sdk leans on what a library does not promise, each in one module, checked here so a
release that changes it fails loudly, naming the library and its version:

- anyio: an asyncio socket stream's ``_transport`` (:mod:`rock.admin._anyio_private`);
- httpx: importing ``httpx._main`` lazily, stubbed by ``rock`` to keep its CLI out (:mod:`rock.cli`);
- uvicorn: the httptools protocol :mod:`rock.admin.http_limits` subclasses and the methods and
  attributes it overrides and reads.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import subprocess
import sys

import anyio
import anyio.abc
import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rock.admin._anyio_private import close_now

HANG = 30  # a guard against a hang; nothing waits for it to pass


def _version(dist: str) -> str:
    return f"{dist} {importlib.metadata.version(dist)}"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_anyio_socket_streams_keep_their_asyncio_transport_and_close_now_closes_them() -> (
    None
):
    closed = anyio.Event()

    async def serve(stream: anyio.abc.ByteStream) -> None:
        try:
            await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            closed.set()

    with anyio.fail_after(HANG):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, serve)
            stream = await anyio.connect_tcp("127.0.0.1", port)
            transport = getattr(stream, "_transport", None)
            assert isinstance(transport, asyncio.Transport), (
                f"{_version('anyio')}: an asyncio socket stream has no _transport; "
                "rock.admin._anyio_private needs replacing"
            )
            close_now(stream)
            await closed.wait()
            tg.cancel_scope.cancel()


def test_httpx_imports_without_its_command_line_behind_rocks_stub() -> None:
    code = (
        "import sys, rock.cli, httpx\n"
        "assert sys.modules['httpx._main'].__dict__.get('main') is None\n"
        "assert httpx.main.__module__ == 'httpx', httpx.main.__module__\n"
        "httpx.AsyncClient\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        f"{_version('httpx')}: rock.cli's httpx._main stub no longer works:\n{done.stderr}"
    )


def test_uvicorn_httptools_protocol_has_what_http_limits_overrides() -> None:
    where = f"{_version('uvicorn')}: HttpToolsProtocol"
    for name in (
        "connection_made",
        "connection_lost",
        "data_received",
        "on_message_begin",
        "on_headers_complete",
    ):
        assert callable(getattr(HttpToolsProtocol, name, None)), (
            f"{where} has no {name}; rock.admin.http_limits needs changing"
        )
    assert list(inspect.signature(HttpToolsProtocol.connection_made).parameters) == [
        "self",
        "transport",
    ], where
    assert list(inspect.signature(HttpToolsProtocol.data_received).parameters) == [
        "self",
        "data",
    ], where
    assert "self.loop" in inspect.getsource(HttpToolsProtocol.__init__), f"{where} keeps no loop"
    assert "self.transport" in inspect.getsource(HttpToolsProtocol.connection_made), (
        f"{where} keeps no transport"
    )
