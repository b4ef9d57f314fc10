"""engine/remote/: the remote engine, which serves the models of OpenAI-compatible servers."""

from .engine import RemoteEngine
from .server import RemoteServer

__all__ = ["RemoteEngine", "RemoteServer"]
