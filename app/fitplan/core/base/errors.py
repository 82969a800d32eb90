"""The exceptions the core raises. Every user-facing failure is one of these, with a message a person can act on."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fitplan.core.gguf.header import GGUFHeader


#: At most this many items (missing shards...) are listed in one error line.
MAX_LISTED = 3


class FitplanError(Exception):
    """Base class of every error fitplan reports to the user."""


class GGUFError(FitplanError):
    """A GGUF file (or remote header) could not be read. The message names the offset and the problem."""

    def __init__(self, problem: str, offset: int | None = None, source: str | None = None) -> None:
        self.problem = problem
        self.offset = offset
        self.source = source
        where = f" at offset {offset}" if offset is not None else ""
        src = f"{source}: " if source else ""
        super().__init__(f"{src}{problem}{where}")


class IncompleteModelError(GGUFError):
    """The file is shorter than its declared tensor data (an interrupted download)."""

    def __init__(
        self, source: str, expected_size: int, actual_size: int, header: GGUFHeader | None = None
    ) -> None:
        self.expected_size = expected_size
        self.actual_size = actual_size
        self.header = header  # the header as read, for showing partial downloads
        missing = expected_size - actual_size
        super().__init__(
            f"incomplete download: {actual_size} of {expected_size} bytes present, {missing} bytes missing",
            None,
            source,
        )


class MissingShardError(GGUFError):
    """A split model lacks one or more of its shards."""

    def __init__(self, source: str, missing: tuple[str, ...]) -> None:
        self.missing = missing
        shown = ", ".join(os.path.basename(m) or m for m in missing[:MAX_LISTED])
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        super().__init__(f"missing shard(s): {shown}{more}", None, source)


class SettingsError(FitplanError):
    """A launch setting llama.cpp would refuse (for example a quantized V cache with flash attention off)."""


class FlagError(FitplanError):
    """A command-line flag that fitplan cannot parse."""


class HeaderValueError(GGUFError):
    """A hyper-parameter in a header that llama.cpp would refuse or that no model can have (names the key)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"{key}: {problem}", None, source)


class FileAccessError(GGUFError):
    """The operating system would not let a file be read (missing, permission, not a regular file). Never cached:
    it may be gone after a chmod or once a download finishes."""


class SettingsSaveError(FitplanError, OSError):
    """The settings could not be written (a read-only or full config folder); the settings in memory are kept."""
