"""A loopback HTTP proxy that notes every request head and cuts connections as a network would.

It forwards bytes unchanged in both directions (so a browser sees the proxy's origin, and the
server sees the client's requests as they are) and notes the request heads each connection
carries. Two ways to cut:

* at a marker (``cut_at=Marker(...)``): when the response to a request whose path ends with
  ``path_suffix`` contains ``marker``, the proxy forwards the bytes up to the end of the marker
  and then aborts both sides; it does so for the first ``drops`` such responses;
* on demand: :meth:`LoopbackProxy.cut` aborts every open connection at once, on both sides.

Either way it keeps accepting new connections. It runs an asyncio loop in a daemon thread; use
it as a context manager. It is bounded: at most ``max_connections`` at a time, each upstream
connect within ``connect_timeout``, and it stops by itself after ``lifetime`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field

_CHUNK = 64 * 1024


@dataclass
class Request:
    """A request head the client sent (its body is not kept)."""

    method: str
    target: str
    #: Header names in lower case; a repeated header keeps its last value.
    headers: dict[str, str]
    received_at: float = field(default_factory=time.monotonic)
    #: The bytes of its response forwarded so far.
    response: bytearray = field(default_factory=bytearray)
    #: Whether the client, not the server, closed the connection this request came on.
    closed_by_client: bool = False

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
    #: The requests the client sent on it, in order.
    requests: list[Request] = field(default_factory=list)
    #: Whether a cut ended it.
    cut: bool = False
    _pending: bytes = b""
    _body_left: int = 0

    def note(self, data: bytes) -> list[Request]:
        """Find the request heads in what the client sent, skipping bodies; return the new ones."""
        found: list[Request] = []
        self._pending += data
        while True:
            if self._body_left:
                skipped = min(self._body_left, len(self._pending))
                self._pending = self._pending[skipped:]
                self._body_left -= skipped
                if self._body_left:
                    break
            head, complete, rest = self._pending.partition(b"\r\n\r\n")
            if not complete:
                break
            self._pending = rest
            line, *lines = head.decode("latin-1").split("\r\n")
            method, target, _ = line.split(" ", 2)
            headers = {}
            for header in lines:
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
            found.append(Request(method, target, headers))
            self._body_left = int(headers.get("content-length", "0"))
        self.requests.extend(found)
        return found


@dataclass
class Marker:
    """Cut the first ``drops`` responses to a path ending with ``path_suffix`` after ``marker``."""

    path_suffix: str
    marker: bytes
    drops: int = 1


class LoopbackProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port``, cutting as it is told."""

    def __init__(
        self,
        target_port: int,
        *,
        target_host: str = "127.0.0.1",
        cut_at: Marker | None = None,
        max_connections: int = 64,
        connect_timeout: float = 10.0,
        lifetime: float = 600.0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.cut_at = cut_at
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.lifetime = lifetime
        self.port = 0
        self.connections: list[Connection] = []
        #: Every request head, in arrival order.
        self.requests: list[Request] = []
        #: When each cut happened (``time.monotonic()``).
        self.cut_times: list[float] = []
        self._lock = threading.Lock()
        self._open: dict[int, tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loopback-proxy", daemon=True)

    # -- control, from the test's thread ------------------------------------------------------

    def __enter__(self) -> LoopbackProxy:
        """Listen on a free loopback port (``self.port``) and start forwarding."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start in 10 s")
        if self._error is not None:
            raise RuntimeError("the proxy failed to start") from self._error
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the listener and every connection, and end the thread."""
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(15)

    @property
    def cuts(self) -> int:
        """How many cuts have happened."""
        return len(self.cut_times)

    def cut(self) -> int:
        """Abort every open connection, both directions; return how many were cut."""
        assert self._loop is not None, "the proxy is not running"
        return asyncio.run_coroutine_threadsafe(self._cut_all(), self._loop).result(10)

    def requests_to(self, suffix: str) -> list[Request]:
        """The requests whose path ends with ``suffix``, in arrival order."""
        with self._lock:
            snapshot = list(self.requests)
        return [request for request in snapshot if request.path.endswith(suffix)]

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

    # -- the loop's side ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported by __enter__ if it happens before ready
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
            await self._abort(list(self._open))
            await server.wait_closed()

    async def _cut_all(self) -> int:
        self.cut_times.append(time.monotonic())
        numbers = list(self._open)
        for number in numbers:
            self.connections[number - 1].cut = True
        await self._abort(numbers)
        return len(numbers)

    async def _abort(self, numbers: list[int]) -> None:
        for number in numbers:
            client, upstream = self._open.pop(number)
            client.transport.abort()
            if upstream is not None:
                upstream.transport.abort()
        await asyncio.sleep(0)  # let the pumps see it

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= self.max_connections:
            writer.transport.abort()
            return
        with self._lock:
            connection = Connection(len(self.connections) + 1, self.cuts)
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
            asyncio.ensure_future(self._up(reader, up_writer, connection)),
            asyncio.ensure_future(self._down(up_reader, writer, connection)),
        ]
        try:
            # When either side is done, the other is of no use to HTTP: close both.
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pumps[0] in done and not pumps[1].done() and connection.requests:
                connection.requests[-1].closed_by_client = True
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._open.pop(connection.number, None)
            for side in (writer, up_writer):
                side.transport.abort()

    async def _up(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: Connection
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(_CHUNK):
                found = connection.note(data)
                with self._lock:
                    self.requests.extend(found)
                sink.write(data)
                await sink.drain()

    async def _down(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: Connection
    ) -> None:
        seen = b""  # what this connection's current response sent so far
        answering: Request | None = None
        with contextlib.suppress(OSError):
            while data := await source.read(_CHUNK):
                if connection.requests and connection.requests[-1] is not answering:
                    answering, seen = connection.requests[-1], b""
                seen += data
                if answering is not None:
                    answering.response += data
                    end = self._cut_end(answering, seen)
                    if end is not None:  # forward up to the marker's end, then cut
                        sink.write(data[: len(data) - (len(seen) - end)])
                        await sink.drain()
                        connection.cut = True
                        self.cut_times.append(time.monotonic())
                        return
                sink.write(data)
                await sink.drain()

    def _cut_end(self, request: Request, seen: bytes) -> int | None:
        """Where in ``seen`` the marker of a response to cut ends, if it is there."""
        rule = self.cut_at
        if rule is None or rule.drops <= 0 or not request.path.endswith(rule.path_suffix):
            return None
        at = seen.find(rule.marker)
        if at < 0:
            return None
        rule.drops -= 1
        return at + len(rule.marker)
