"""A loopback TCP proxy whose connections a test can cut, while it keeps accepting new ones.

The proxy runs an asyncio loop in a daemon thread. It forwards bytes unchanged in both
directions (so a browser sees the proxy's origin, and the server sees the browser's requests
as they are), notes the HTTP request heads each connection carries, and on :meth:`cut` aborts
every open connection on both sides at once. It is bounded: at most ``max_connections`` at a
time, each upstream connect within ``connect_timeout``, and the whole proxy stops by itself
after ``lifetime`` seconds if nobody stops it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType

_REQUEST_LINE = re.compile(rb"(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (\S+) HTTP/1\.[01]")
_MAX_LINE = 16 * 1024
_CHUNK = 64 * 1024


@dataclass
class Request:
    """An HTTP request head the client sent (the body, if any, is not kept)."""

    target: str
    #: Header names in lower case; a repeated header keeps its last value.
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.split("?", 1)[0]


@dataclass
class Connection:
    """One accepted client connection and what the proxy saw of it."""

    number: int
    #: How many cuts had happened when it was accepted.
    cuts_before: int
    accepted_at: float
    #: The HTTP requests the client sent on it, in order.
    requests: list[Request] = field(default_factory=list)
    #: Bytes forwarded from the server to the client.
    bytes_down: int = 0
    #: Whether a cut ended it.
    cut: bool = False
    _partial: bytes = b""
    _in_head: bool = False

    def _note_upstream_bytes(self, data: bytes) -> None:
        """Find request lines and their headers in what the client sent (bounded buffer)."""
        lines = (self._partial + data).split(b"\r\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE:
            self._partial = b""
        for line in lines:
            match = _REQUEST_LINE.fullmatch(line)
            if match is not None:
                self.requests.append(Request(match[2].decode("latin-1")))
                self._in_head = True
            elif self._in_head and not line:
                self._in_head = False
            elif self._in_head:
                name, _, value = line.decode("latin-1").partition(":")
                self.requests[-1].headers[name.strip().lower()] = value.strip()


class CuttableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``; :meth:`cut` drops everything.

    Use it as a context manager: entering starts it, leaving stops it and closes every
    connection.
    """

    def __init__(
        self,
        target_port: int,
        *,
        target_host: str = "127.0.0.1",
        max_connections: int = 64,
        connect_timeout: float = 10.0,
        lifetime: float = 600.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.lifetime = lifetime
        self.port = 0
        self.cuts = 0
        self.connections: list[Connection] = []
        self._lock = threading.Lock()
        self._open: dict[int, tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- control, from the test's thread ------------------------------------------------------

    def start(self) -> CuttableProxy:
        """Listen on a free loopback port (``self.port``) and start forwarding."""
        self._thread = threading.Thread(target=self._run, name="cuttable-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start in 10 s")
        if self._error is not None:
            raise RuntimeError("the proxy failed to start") from self._error
        return self

    def cut(self) -> int:
        """Abort every open connection, both directions; return how many were cut.

        New connections are accepted as before.
        """
        return self._call(self._cut)

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread."""
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(15)

    def connections_for(self, path: str, *, after_cut: int | None = None) -> list[Connection]:
        """Connections that carried a request for ``path`` (query ignored).

        With ``after_cut=k``, only those accepted after the k-th cut.
        """
        with self._lock:
            snapshot = list(self.connections)
        return [
            connection
            for connection in snapshot
            if any(request.path == path for request in connection.requests)
            and (after_cut is None or connection.cuts_before >= after_cut)
        ]

    def __enter__(self) -> CuttableProxy:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the loop's side ----------------------------------------------------------------------

    def _call(self, function: Callable[[], Coroutine[object, object, int]]) -> int:
        assert self._loop is not None, "the proxy is not running"
        return asyncio.run_coroutine_threadsafe(function(), self._loop).result(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported to start() if it happens before ready
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.lifetime)
        finally:
            server.close()
            await self._cut(count=False)
            await server.wait_closed()

    async def _cut(self, *, count: bool = True) -> int:
        if count:
            self.cuts += 1
        pairs = list(self._open.items())
        for number, (client, upstream) in pairs:
            self.connections[number - 1].cut = count
            client.transport.abort()
            if upstream is not None:
                upstream.transport.abort()
        self._open.clear()
        await asyncio.sleep(0)  # let the pumps see it
        return len(pairs)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= self.max_connections:
            writer.transport.abort()
            return
        with self._lock:
            connection = Connection(len(self.connections) + 1, self.cuts, time.monotonic())
            self.connections.append(connection)
        self._open[connection.number] = (writer, None)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(self.target_host, self.target_port), self.connect_timeout
            )
        except (OSError, TimeoutError):
            self._open.pop(connection.number, None)
            writer.transport.abort()
            return
        if connection.number not in self._open:  # cut while connecting
            up_writer.transport.abort()
            return
        self._open[connection.number] = (writer, up_writer)
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, connection, upstream=True)),
            asyncio.ensure_future(self._pump(up_reader, writer, connection, upstream=False)),
        ]
        try:
            # When either side is done, the other is of no use to HTTP: close both.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._open.pop(connection.number, None)
            for side in (writer, up_writer):
                side.transport.abort()

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        connection: Connection,
        *,
        upstream: bool,
    ) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await source.read(_CHUNK):
                if upstream:
                    connection._note_upstream_bytes(data)
                else:
                    connection.bytes_down += len(data)
                sink.write(data)
                await sink.drain()
