"""A Python client of LMSP 1.0: blocking and asyncio, typed results, resumable task streams.

``LmspClient()`` finds the service by itself (:func:`discover`): in a kernel started by a Jupyter
server with the extension, no URL or token is ever needed. :class:`SseParser` is the incremental
``text/event-stream`` parser the clients read streams with, for code that reads raw bytes itself
(the benchmarks do). ``mcp=[labels]`` offers the tools of MCP servers the service runs, and
:meth:`LmspClient.answer_approvals` (or :func:`approval_request`) answers their approval
requests. ``URL_VARIABLE``, ``TOKEN_VARIABLE``, ``ROOT_VARIABLE`` and
``MODEL_VARIABLE`` name the environment variables the server extension exports to its kernels
(:mod:`lmsp_jupyter.protocol.environment`; discovery reads the first two, the ``%lmsp`` magic
the last).
"""

from ..protocol.environment import MODEL_VARIABLE, ROOT_VARIABLE, TOKEN_VARIABLE, URL_VARIABLE
from ..protocol.events import ResponseEvent
from ._client import AsyncLmspClient, LmspClient
from ._discovery import discover
from ._errors import LmspClientError, ProblemError, ProtocolViolation, ServiceUnreachable
from ._location import ServiceLocation
from ._sse import ServerSentEvent, SseParser
from ._wire import approval_request

__all__ = [
    "MODEL_VARIABLE",
    "ROOT_VARIABLE",
    "TOKEN_VARIABLE",
    "URL_VARIABLE",
    "AsyncLmspClient",
    "LmspClient",
    "LmspClientError",
    "ProblemError",
    "ProtocolViolation",
    "ResponseEvent",
    "ServerSentEvent",
    "ServiceLocation",
    "ServiceUnreachable",
    "SseParser",
    "approval_request",
    "discover",
]
