"""Reading files that may be hostile or odd: regular files only, never a hang, never an unbounded read.

* `open_regular_file` opens read-only and non-blocking (a FIFO or a device cannot hang the open), then checks on
  the opened descriptor (not on the path, which a link swap could change in between) that it is a regular file.
* `read_json_file` reads at most `max_bytes` of such a file and parses it; deep nesting, a file too large, bad
  UTF-8 or bad JSON are one `ValueError`, never a RecursionError or a MemoryError.
* `package_text` reads a file bundled with fitplan (`fitplan/data/...`).
"""

from __future__ import annotations

import os
import stat
from typing import Any

from fitplan.core.base.numbers import loads_json

__all__ = [
    "NotRegularFileError",
    "expand_home",
    "open_regular_file",
    "package_text",
    "read_json_file",
    "read_regular_file",
]

#: the `fitplan` package's folder
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def package_text(relpath: str) -> str:
    """A text file bundled with fitplan (`relpath` under the package, e.g. "data/gpu_catalog.json"): read from the
    package's folder, as `importlib.resources.files("fitplan")` finds it for a package that is a folder, without
    importing `importlib.resources` (its zip and temporary-file support) at every start; through
    `importlib.resources` where the package is not a folder (imported from a zip)."""
    try:
        with open(os.path.join(_PACKAGE_DIR, *relpath.split("/")), encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        from importlib import resources

        return resources.files("fitplan").joinpath(relpath).read_text(encoding="utf-8")


def expand_home(path: str | os.PathLike[str]) -> str:
    """`~` and `~user` expanded where they can be; `~nosuchuser/x` stays as written (then it is not found), where
    `Path.expanduser()` raises. Every path from the user, the environment or another tool's settings goes here."""
    text = os.fspath(path)
    try:
        return os.path.expanduser(text)
    except (RuntimeError, KeyError, ValueError, OSError):
        return text


class NotRegularFileError(OSError):
    """The path is a folder, pipe, socket or device, not a regular file."""


def open_regular_file(path: str | os.PathLike[str]) -> int:
    """A read-only, blocking descriptor of `path`, which must be a regular file (else `NotRegularFileError`)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"not a regular file: {os.fspath(path)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (a larger file is a `ValueError`)."""
    fd = open_regular_file(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise ValueError(f"file of {size} bytes is larger than the {max_bytes} bytes allowed")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"file is larger than the {max_bytes} bytes allowed")
    return data


def read_json_file(path: str | os.PathLike[str], max_bytes: int) -> Any:
    """The parsed JSON of a regular file of at most `max_bytes`. OSError when it cannot be opened; ValueError
    when it is not a JSON document fitplan can hold (too large, too deeply nested, not UTF-8, not JSON).
    Numbers too large for a float parse as infinity: callers check each field."""
    return loads_json(read_regular_file(path, max_bytes))
