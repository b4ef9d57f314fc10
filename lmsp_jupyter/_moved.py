"""Module paths that moved, still importable for one release, with a ``DeprecationWarning``.

``import lmsp_jupyter.engine.scheduler`` (an old path) gives the module now at its new path, the
same module object, so both names see one set of globals. A package lists its moved modules
with :func:`keep_old_paths` when it is imported, which every import of a module under it does.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths, and loads each as the module at its new path."""

    def __init__(self) -> None:
        self.moved: dict[str, str] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path; ``None`` (not ours) for every other."""
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def exec_module(self, module: ModuleType) -> None:
        """Warn, and put the new module in the old path's place (the import returns it)."""
        new = self.moved[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        sys.modules[module.__name__] = importlib.import_module(new)


_finder = _OldPaths()
sys.meta_path.append(_finder)


def keep_old_paths(moved: Mapping[str, str]) -> None:
    """Keep each old module path of ``moved`` (old → new, full names) importable."""
    _finder.moved.update(moved)
