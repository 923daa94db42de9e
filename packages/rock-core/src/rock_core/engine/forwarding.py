"""Host ports for a sandbox's ports, served by the engine through the sandbox's rocklet.

A runtime that publishes no host port for a sandbox's ports (Docker since rock stopped using
``docker-proxy``: the rocklet is reached on a unix socket) lists them in
:attr:`~rock_core.models.RuntimeStatus.forwarded_ports`. For each such port the engine listens
on ``127.0.0.1`` (a free port, or the one the record already names, so a restarted admin gives
clients the same address) and carries every connection it accepts through the rocklet: to the
rocklet itself for ROCK's port 22555, and through a tunnel (:meth:`RockletClient.open_tunnel`)
to ``127.0.0.1:N`` inside the sandbox for any other port. That is what ``port_mapping`` shows.

Why: publishing a port costs the Docker engine a ``docker-proxy`` process (about 1.5 MB each)
and its packet-filter rules at every start, where a listening socket here costs nothing until a
client connects. The forward lives as long as the sandbox runs and the engine holds it.

On an asyncio loop, a sandbox's listening sockets are watched by the loop itself
(``loop.add_reader``): no task waits on them, and a connection becomes a task only once it is
accepted. anyio's listeners cost a task group, a task per port and their cancel scope per
sandbox: about 0.4 ms of CPU at each start and as much at each close (measured with 2,000
sandboxes of 2 ports), where the sockets themselves cost some 35 us.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable, Mapping
from typing import cast

import anyio
import anyio.abc

from rock_core.errors import RockError
from rock_core.models import ROCKLET_PORT, Port
from rock_core.rocklet_client import RockletClient

__all__ = ["PortForwards", "raise_open_files_limit"]

log = logging.getLogger("rock.engine.forwarding")

_CHUNK = 65536
#: The listen backlog (anyio's own for ``create_tcp_listener``; the kernel caps it).
_BACKLOG = 65536


#: How long a listening socket is left unwatched after an accept failed (out of files, say),
#: so that a failing accept does not spin the loop.
_ACCEPT_PAUSE = 0.5


def _ip_family(host: str) -> socket.AddressFamily | None:
    """``AF_INET`` or ``AF_INET6`` for an IP address, ``None`` for a host name."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return None


class _Watched:
    """One sandbox's forwards on an asyncio loop: its listening sockets, watched by the loop,
    and the cancel scopes of the connections they carry. ``cancel`` closes it all."""

    __slots__ = ("carrying", "client", "loop", "sockets", "tg")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        tg: anyio.abc.TaskGroup,
        sockets: list[tuple[Port, socket.socket]],
        client: list[RockletClient],
    ) -> None:
        self.loop = loop
        self.tg = tg
        self.sockets = sockets
        self.client = client
        self.carrying: set[anyio.CancelScope] = set()
        for port, sock in sockets:
            self.watch(port, sock)

    def watch(self, port: Port, sock: socket.socket) -> None:
        fd = sock.fileno()
        if fd != -1:  # not closed meanwhile (by its number: a socket's repr costs more)
            self.loop.add_reader(fd, self._accept, port, sock)

    def _accept(self, port: Port, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("forwarded port %s stops accepting for a moment: %s", port, exc)
                self.loop.remove_reader(sock.fileno())
                self.loop.call_later(_ACCEPT_PAUSE, self.watch, port, sock)
                return
            self.tg.start_soon(self._carry, conn, port)

    async def _carry(self, conn: socket.socket, port: Port) -> None:
        with anyio.CancelScope() as scope:
            if not self.sockets:  # closed before this connection's turn came
                conn.close()
                return
            self.carrying.add(scope)
            try:
                try:
                    stream = await anyio.abc.SocketStream.from_socket(conn)
                except BaseException:
                    conn.close()
                    raise
                await _carry(stream, self.client[0], port)
            finally:
                self.carrying.discard(scope)

    def cancel(self) -> None:
        """Stop listening and cut the connections carried (idempotent)."""
        sockets, self.sockets = self.sockets, []
        for _, sock in sockets:
            self.loop.remove_reader(sock.fileno())
            sock.close()
        for scope in list(self.carrying):
            scope.cancel()


class PortForwards:
    """The forwarded ports of every running sandbox of one engine.

    :param task_group: where the listeners and their connections run (the engine's); may be
        given later with :meth:`serve_in`, before the first :meth:`open`.
    :param host: the address listened on.
    """

    def __init__(
        self, task_group: anyio.abc.TaskGroup | None = None, host: str = "127.0.0.1"
    ) -> None:
        self._tg = task_group
        self.host = host
        self._scopes: dict[str, anyio.CancelScope | _Watched] = {}
        self._mappings: dict[str, dict[Port, Port]] = {}
        self._clients: dict[str, list[RockletClient]] = {}  # the rocklet each carries to
        self._closer: anyio.abc.TaskGroup | None = None  # the group whose end closes them all

    def __len__(self) -> int:
        return len(self._scopes)

    def serve_in(self, task_group: anyio.abc.TaskGroup) -> None:
        """Run listeners and connections in ``task_group`` from now on (the engine's, once open).

        Also lifts this process's soft limit of open files to its hard limit: two listening
        sockets a sandbox, a thousand sandboxes, would not fit in the common default of 1024.
        """
        self._tg = task_group
        raise_open_files_limit()

    def mapping(self, sandbox_id: str) -> dict[Port, Port]:
        """The forwarded ports of ``sandbox_id`` (container port → host port); empty if none."""
        return dict(self._mappings.get(sandbox_id, {}))

    async def open(
        self,
        sandbox_id: str,
        client: RockletClient,
        ports: Iterable[int],
        preferred: Mapping[Port, Port] | None = None,
    ) -> dict[Port, Port]:
        """Listen for each of ``ports`` of ``sandbox_id`` and return container port → host port.

        A port in ``preferred`` keeps its host port when that is still free; otherwise, and for
        the others, the system chooses one. Forwards already open for the sandbox are closed
        first.
        """
        if self._tg is None:
            raise RuntimeError("PortForwards.open before serve_in: the engine is not open")
        self.close(sandbox_id)
        preferred = dict(preferred or {})
        family = _ip_family(self.host)
        if family is not None and _on_asyncio():
            return self._open_watched(sandbox_id, client, ports, preferred, family)
        listeners: list[tuple[Port, anyio.abc.SocketListener]] = []
        try:
            for port in ports:
                listener = await self._listen(preferred.get(Port(port), 0))
                listeners.append((Port(port), listener))
        except BaseException:
            for _, listener in listeners:
                await listener.aclose()
            raise
        scope = anyio.CancelScope()
        mapping = {
            port: Port(listener.extra(anyio.abc.SocketAttribute.local_port))
            for port, listener in listeners
        }
        self._scopes[sandbox_id] = scope
        self._mappings[sandbox_id] = mapping
        cell = self._clients[sandbox_id] = [client]
        self._tg.start_soon(self._serve, scope, listeners, cell, name=f"forwards of {sandbox_id}")
        return dict(mapping)

    def _open_watched(
        self,
        sandbox_id: str,
        client: RockletClient,
        ports: Iterable[int],
        preferred: Mapping[Port, Port],
        family: socket.AddressFamily,
    ) -> dict[Port, Port]:
        """:meth:`open`'s work on an asyncio loop: sockets bound here, watched by the loop."""
        assert self._tg is not None
        if self._closer is not self._tg:
            # No task holds a watched socket: one task of the group closes them when it ends.
            self._closer = self._tg
            self._tg.start_soon(self._close_at_end, name="port forwards' close")
        sockets: list[tuple[Port, socket.socket]] = []
        try:
            for port in ports:
                sockets.append((Port(port), self._bound(family, preferred.get(Port(port), 0))))
        except BaseException:
            for _, sock in sockets:
                sock.close()
            raise
        mapping = {port: Port(sock.getsockname()[1]) for port, sock in sockets}
        cell = self._clients[sandbox_id] = [client]
        self._scopes[sandbox_id] = _Watched(asyncio.get_running_loop(), self._tg, sockets, cell)
        self._mappings[sandbox_id] = mapping
        return dict(mapping)

    async def _close_at_end(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            self.close_all()

    def _bound(self, family: socket.AddressFamily, port: int) -> socket.socket:
        """A socket listening on ``self.host`` (an IP address): on ``port``, or a port the
        system chooses when that one is taken."""
        try:
            return _bind(family, self.host, port)
        except OSError:
            if port == 0:
                raise
            log.info("host port %s is taken; forwarding from a new one", port)
            return _bind(family, self.host, 0)

    def retarget(self, sandbox_id: str, client: RockletClient) -> dict[Port, Port]:
        """Carry the new connections of ``sandbox_id``'s forwards to ``client`` from now on (a
        reset's new unit), on the same host ports; its mapping (empty: it has no forwards)."""
        cell = self._clients.get(sandbox_id)
        if cell is None:
            return {}
        cell[0] = client
        return self.mapping(sandbox_id)

    def close(self, sandbox_id: str) -> None:
        """Stop listening for ``sandbox_id`` and cut its forwarded connections (idempotent)."""
        scope = self._scopes.pop(sandbox_id, None)
        self._mappings.pop(sandbox_id, None)
        self._clients.pop(sandbox_id, None)
        if scope is not None:
            scope.cancel()

    def close_all(self) -> None:
        """Close every forward (the engine is closing)."""
        for sandbox_id in list(self._scopes):
            self.close(sandbox_id)

    async def _listen(self, port: int) -> anyio.abc.SocketListener:
        try:
            return await self._listen_on(port)
        except OSError:
            if port == 0:
                raise
            log.info("host port %s is taken; forwarding from a new one", port)
            return await self._listen_on(0)

    async def _listen_on(self, port: int) -> anyio.abc.SocketListener:
        """A listener on ``self.host``: an IP address is bound here, in the loop's thread
        (``anyio.create_tcp_listener`` resolves even an address through ``getaddrinfo`` in a
        worker thread: two thread hops a sandbox, every start); a host name, or an anyio
        without ``SocketListener.from_socket``, goes through anyio."""
        family = _ip_family(self.host)
        from_socket = getattr(anyio.abc.SocketListener, "from_socket", None)
        if family is not None and from_socket is not None:
            sock = _bind(family, self.host, port)
            try:
                return cast(anyio.abc.SocketListener, await from_socket(sock))
            except BaseException:
                sock.close()
                raise
        multi = await anyio.create_tcp_listener(local_host=self.host, local_port=port)
        # One address: one listener, a SocketListener (anyio types it as the Listener it extends).
        return cast(anyio.abc.SocketListener, multi.listeners[0])

    @staticmethod
    async def _serve(
        scope: anyio.CancelScope,
        listeners: list[tuple[Port, anyio.abc.SocketListener]],
        client: list[RockletClient],
    ) -> None:
        """Accept on every listener of one sandbox until ``scope`` is cancelled, then close them
        (and the connections they carry)."""

        async def accept(
            port: Port, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup
        ) -> None:
            async with listener:
                while True:
                    stream = await listener.accept()
                    tg.start_soon(_carry, stream, client[0], port)

        with scope:
            async with anyio.create_task_group() as tg:
                for port, listener in listeners:
                    tg.start_soon(accept, port, listener, tg)
        for _, listener in listeners:  # cancelled before the first accept: still open
            with anyio.CancelScope(shield=True):
                await listener.aclose()


def _bind(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host`` (an IP address) and ``port`` (0: any)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _on_asyncio() -> bool:
    """Whether the running loop is asyncio's (whose ``add_reader`` watches the listening
    sockets) and anyio can wrap an accepted socket (``SocketStream.from_socket``, anyio 4.10)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio's
        return False
    return hasattr(anyio.abc.SocketStream, "from_socket")


async def _carry(stream: anyio.abc.SocketStream, client: RockletClient, port: Port) -> None:
    """Carry one accepted connection to ``port`` of the sandbox until either side is done."""
    async with stream:
        try:
            stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
            )
        except (OSError, anyio.TypedAttributeLookupError):
            pass
        try:
            upstream = await (
                client.connect() if port == ROCKLET_PORT else client.open_tunnel(int(port))
            )
        except (RockError, OSError) as exc:
            log.debug("forward to port %s of %s failed: %s", port, client.sandbox_id, exc)
            return
        async with upstream, anyio.create_task_group() as pipes:

            async def pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
                if not await _pipe(source, sink):
                    pipes.cancel_scope.cancel()  # a side broke off: the other will not finish

            pipes.start_soon(pipe, stream, upstream)
            pipes.start_soon(pipe, upstream, stream)


async def _pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> bool:
    """Copy ``source`` to ``sink``; at ``source``'s end, half-close ``sink``. ``False`` when
    either side broke off instead of ending cleanly."""
    try:
        while True:
            data = await source.receive(_CHUNK)
            await sink.send(data)
    except anyio.EndOfStream:
        pass
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return False
    try:
        await sink.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NotImplementedError):
        return False
    return True


def raise_open_files_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` of this process to its hard limit; return the new soft
    limit (``None`` where the platform has no such limit). Never lowers it."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard
