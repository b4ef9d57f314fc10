"""lmsp-jupyter: a Jupyter server as a local model service speaking LMSP 1.0."""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import LmspApp

    return [{"module": "lmsp_jupyter", "app": LmspApp}]
