"""The real engine on the bundled model, for the service tests that need it (the others run on
the scripted double of ``tests/doubles.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.service.responses import ResponseService
from tests.service.helpers import real_engine, service_of


@pytest.fixture(scope="module")
def context_size() -> int:
    """The real engine's context window; a module overrides this fixture to change it."""
    return 512


@pytest.fixture(scope="module")
def engine(context_size: int, bundled_model_path: Path) -> Iterator[LocalEngine]:
    """The real engine on the bundled model, loaded on first use and closed after the module."""
    with real_engine(context_size) as engine:
        yield engine


@pytest.fixture(scope="module")
def service(engine: LocalEngine) -> ResponseService:
    """A response service on the real engine."""
    return service_of(engine)
