"""A loopback HTTP proxy that cuts response streams at a marker, and notes every request head.

Each connection is forwarded byte for byte. When the response to a request whose path ends with
``path_suffix`` contains ``marker``, the proxy forwards the bytes up to the end of the marker and
then aborts both sides, as a network drop would; it does so for the first ``drops`` such
responses. It runs an asyncio loop in a daemon thread; use it as a context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType


@dataclass
class Request:
    """A request head the client sent."""

    method: str
    path: str
    #: Header names in lower case.
    headers: dict[str, str]
    received_at: float = field(default_factory=time.monotonic)
    #: The bytes of its response forwarded so far.
    response: bytearray = field(default_factory=bytearray)
    #: Whether the client, not the server, closed the connection this request came on.
    closed_by_client: bool = False


@dataclass
class _Connection:
    requests: list[Request] = field(default_factory=list)
    pending: bytes = b""
    body_left: int = 0

    def note(self, data: bytes) -> None:
        """Find the request heads in what the client sent, skipping bodies."""
        self.pending += data
        while True:
            if self.body_left:
                skipped = min(self.body_left, len(self.pending))
                self.pending, self.body_left = self.pending[skipped:], self.body_left - skipped
                if self.body_left:
                    return
            head, found, rest = self.pending.partition(b"\r\n\r\n")
            if not found:
                return
            self.pending = rest
            line, *lines = head.decode("latin-1").split("\r\n")
            method, target, _ = line.split(" ", 2)
            headers = {}
            for header in lines:
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.requests.append(Request(method, target.split("?", 1)[0], headers))
            self.body_left = int(headers.get("content-length", "0"))


class DroppingProxy:
    """Forwards ``127.0.0.1:<port>`` to a loopback server; cuts matching streams at ``marker``."""

    def __init__(
        self, target_port: int, *, path_suffix: str, marker: bytes, drops: int = 1
    ) -> None:
        self.target_port = target_port
        self.path_suffix = path_suffix
        self.marker = marker
        self.drops = drops
        self.port = 0
        #: Every request head, in arrival order.
        self.requests: list[Request] = []
        #: When each cut happened.
        self.cut_at: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._run, name="dropping-proxy", daemon=True)

    def requests_to(self, suffix: str) -> list[Request]:
        """The requests whose path ends with ``suffix``."""
        return [request for request in list(self.requests) if request.path.endswith(suffix)]

    def __enter__(self) -> DroppingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start in 10 s")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(15)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), 600)
        server.close()
        for writer in self._writers:
            writer.transport.abort()
        await server.wait_closed()
        await asyncio.sleep(0.1)  # let the handlers see their connections end

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        connection = _Connection()
        pumps = [
            asyncio.ensure_future(self._up(reader, up_writer, connection)),
            asyncio.ensure_future(self._down(up_reader, writer, connection)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pumps[0] in done and not pumps[1].done() and connection.requests:
                connection.requests[-1].closed_by_client = True
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            writer.transport.abort()
            up_writer.transport.abort()

    async def _up(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                before = len(connection.requests)
                connection.note(data)
                self.requests.extend(connection.requests[before:])
                sink.write(data)
                await sink.drain()

    async def _down(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        seen = b""  # what this connection's current response sent so far
        answering: Request | None = None
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                if connection.requests and connection.requests[-1] is not answering:
                    answering, seen = connection.requests[-1], b""
                seen += data
                if answering is not None:
                    answering.response += data
                at = seen.find(self.marker)
                if (
                    self.drops > 0
                    and answering is not None
                    and answering.path.endswith(self.path_suffix)
                    and at >= 0
                ):
                    self.drops -= 1
                    sink.write(data[: len(data) - (len(seen) - at - len(self.marker))])
                    await sink.drain()
                    self.cut_at.append(time.monotonic())
                    return
                sink.write(data)
                await sink.drain()
