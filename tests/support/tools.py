"""The repository's tool scripts (tools/...), imported by path once per test run."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from support.models import REPO


@functools.cache
def load_tool(relpath: str) -> ModuleType:
    """The module at `REPO / relpath` (e.g. "tools/accuracy_report.py"), registered under its file name."""
    path = REPO / relpath
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses in the module look themselves up here
    spec.loader.exec_module(mod)
    return mod
