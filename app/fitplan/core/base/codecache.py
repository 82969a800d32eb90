"""The methods `dataclasses` writes for fitplan's classes, compiled once and kept beside the bytecode.

`@dataclass` writes the source of each class's `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__` and
`__delattr__` and compiles it at import time, one `exec` each: about a thousand compilations for the core's frozen
dataclasses, most of the start of `fitplan plan`. The compiled code depends only on that source text (and on the
interpreter), as a module's bytecode depends only on its file, so it is cached the same way: keyed by the exact
text, in one `marshal` file per interpreter (`sys.implementation.cache_tag`) in this package's `__pycache__`. A
source seen for the first time is compiled as `dataclasses` would compile it (same file name, no inherited
`__future__` flags) and the file is rewritten at exit, unless Python writes no bytecode either
(`PYTHONDONTWRITEBYTECODE`, `-B`). Where the file cannot be read or written (a read-only install, a frozen app, a
damaged file) every method is compiled as before; the classes are the same either way.

`dataclasses` finds `exec` by name in its module globals before the builtins, which is the one seam used: `install`
sets `dataclasses.exec` to the cache's `exec`, for the whole process (a dataclass of another package imported
later goes through it too, to the same effect). Nothing else in the standard library is touched. The file is
trusted as the bytecode beside it is: it lives in the same folder, written by the same user. `fitplan.core`
installs it on import, so `fitplan --version` and `--help` (which import no core) load nothing.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

__all__ = ["CodeCache", "default_path", "install"]

#: Entries kept when the file is rewritten; past this the entries this process did not use are dropped.
MAX_ENTRIES = 8000


def default_path() -> Path | None:
    """`core/base/__pycache__/dataclass-methods.<cache tag>.marshal`; None for an interpreter without a cache tag
    and in a frozen app (which, like Python itself there, writes no bytecode into its bundle)."""
    tag = sys.implementation.cache_tag
    if tag is None or getattr(sys, "frozen", False):
        return None
    return Path(__file__).resolve().parent / "__pycache__" / f"dataclass-methods.{tag}.marshal"


class CodeCache:
    """Source text -> code object, loaded from and saved to one file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.loaded: dict[str, CodeType] = _load(path)
        self.used: dict[str, CodeType] = {}
        self.compiled = 0  # sources compiled by this process (cache misses)

    def exec(self, source: object, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        """`exec` as `dataclasses` calls it, a source string's compiled code taken from the cache."""
        if not isinstance(source, str):
            builtins.exec(source, globals, locals)  # type: ignore[arg-type]
            return
        code = self.used.get(source) or self.loaded.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[source] = code
        builtins.exec(code, globals, locals)

    def save(self) -> None:
        """Rewrite the file when this process compiled something; keep the older entries up to MAX_ENTRIES."""
        if not self.compiled or self.path is None or sys.dont_write_bytecode:
            return
        entries = {**self.loaded, **self.used}
        if len(entries) > MAX_ENTRIES:
            entries = dict(self.used)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(marshal.dumps(entries))
            os.replace(tmp, self.path)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _load(path: Path | None) -> dict[str, CodeType]:
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            data = marshal.loads(f.read())  # one read: `marshal.load` reads a file in many small pieces
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, CodeType)}


_installed: CodeCache | None = None


def install(path: Path | None = None) -> CodeCache:
    """Route `dataclasses`' compilations through one process-wide cache (once), saved at exit."""
    global _installed
    if _installed is None:
        _installed = CodeCache(path if path is not None else default_path())
        setattr(dataclasses, "exec", _installed.exec)  # noqa: B010 - dataclasses looks `exec` up in its globals
        atexit.register(_installed.save)
    return _installed
