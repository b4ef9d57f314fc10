"""The last resort of discovery: a Jupyter server with only this extension, in this process.

It runs on loopback with a random token, in a daemon thread with its own event loop, is started
at most once per process, and is stopped when the interpreter exits.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import secrets
import socket
import threading
import time

from jupyter_server.serverapp import ServerApp

from ._errors import ServiceUnreachable
from ._location import ServiceLocation, answers

#: How long the server has to start (the first start may index the machine's models).
START_SECONDS = 120.0

_lock = threading.Lock()
_started: ServiceLocation | None = None


class InProcessServerApp(ServerApp):
    """A Jupyter server that can run in a thread of a process that is not its own."""

    def init_signal(self) -> None:
        """Leave signals alone: only the main thread may handle them, and they are its host's."""

    def write_server_info_file(self) -> None:
        """Write no runtime file: this server is private to its process and dies with it."""


def start_inprocess_service() -> ServiceLocation:
    """Start the in-process service once; return where it answers."""
    global _started
    with _lock:
        if _started is None:
            _started = _start()
        return _started


def _start() -> ServiceLocation:
    token = secrets.token_urlsafe(32)
    argv = [
        "--ip=127.0.0.1",
        f"--port={_free_port()}",
        f"--IdentityProvider.token={token}",
        "--no-browser",
        "--log-level=WARN",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    handover: queue.Queue[ServerApp | BaseException] = queue.Queue()
    thread = threading.Thread(
        target=_serve, args=(argv, handover), name="lmsp-inprocess-service", daemon=True
    )
    thread.start()
    app = handover.get(timeout=START_SECONDS)
    if isinstance(app, BaseException):
        raise ServiceUnreachable(f"the in-process LMSP service did not start: {app!r}") from app
    atexit.register(_stop, app, thread)
    location = ServiceLocation(f"http://127.0.0.1:{app.port}{app.base_url}lmsp/v1", token)
    deadline = time.monotonic() + START_SECONDS
    while not answers(location):
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ServiceUnreachable(
                f"the in-process LMSP service at {location.base_url} is silent"
            )
        time.sleep(0.1)
    return location


def _serve(argv: list[str], handover: queue.Queue[ServerApp | BaseException]) -> None:
    """The thread: initialize the server on a new event loop, hand it over, run the loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        app = InProcessServerApp(
            jpserver_extensions={"lmsp_jupyter": True}, no_browser_open_file=True
        )

        async def initialize() -> None:  # Tornado wants a running loop to bind to
            app.initialize(argv=argv, find_extensions=False)

        loop.run_until_complete(initialize())
        app.start_app()
    except BaseException as error:  # initialize() raises SystemExit on bad config
        handover.put(error)
        loop.close()
        return
    handover.put(app)
    try:
        app.start_ioloop()
    finally:
        loop.close()


def _stop(app: ServerApp, thread: threading.Thread) -> None:
    """Stop the server from another thread: its extensions, kernels and loop; then wait."""
    app.io_loop.add_callback(app.stop)
    thread.join(30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
