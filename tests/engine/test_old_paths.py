"""The engine's and the kernel's module paths before engine/local/, engine/remote/ and
kernel/throttle.py still import, for one release: the same modules, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

from lmsp_jupyter.engine.local import engine as local_engine
from lmsp_jupyter.engine.local.engine import LocalEngine

MOVED = {
    "lmsp_jupyter.engine.scheduler": "lmsp_jupyter.engine.local.engine",
    "lmsp_jupyter.engine.llama": "lmsp_jupyter.engine.local.llama",
    "lmsp_jupyter.engine.work": "lmsp_jupyter.engine.local.worker_inputs",
    "lmsp_jupyter.engine.remote_tokens": "lmsp_jupyter.engine.remote.tokens",
    "lmsp_jupyter.kernel.batching": "lmsp_jupyter.kernel.throttle",
}


@pytest.mark.parametrize(("old", "new"), MOVED.items())
def test_an_old_path_is_the_new_module_with_a_warning(
    old: str, new: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh: it warns
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_old_class_name_is_the_local_engine_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="Engine is now LocalEngine"):
        assert local_engine.Engine is LocalEngine  # type: ignore[attr-defined]


def test_the_remote_engine_imports_from_its_package_as_before() -> None:
    from lmsp_jupyter.engine.remote import RemoteEngine, RemoteServer
    from lmsp_jupyter.engine.remote.engine import RemoteEngine as Moved
    from lmsp_jupyter.engine.remote.server import RemoteServer as MovedServer

    assert (RemoteEngine, RemoteServer) == (Moved, MovedServer)
