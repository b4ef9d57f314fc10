"""A Python client of LMSP 1.0: blocking and asyncio, typed results, resumable task streams.

``LmspClient()`` finds the service by itself (:func:`discover`): in a kernel started by a Jupyter
server with the extension, no URL or token is ever needed.
"""

from ..protocol.events import ResponseEvent
from ._client import AsyncLmspClient, LmspClient
from ._discovery import ServiceLocation, discover
from ._errors import LmspClientError, ProblemError, ProtocolViolation, ServiceUnreachable

__all__ = [
    "AsyncLmspClient",
    "LmspClient",
    "LmspClientError",
    "ProblemError",
    "ProtocolViolation",
    "ResponseEvent",
    "ServiceLocation",
    "ServiceUnreachable",
    "discover",
]
