"""The model library: where models are on this machine, and a cached, cancellable, streaming scan of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fitplan.core.gguf.header import HEADER_ONLY_KEY
from fitplan.core.library.index import (
    INDEX_SCHEMA,
    IndexEntry,
    JsonScanIndex,
    MemoryScanIndex,
    ScanIndex,
    default_index_path,
)
from fitplan.core.library.locations import dedupe_roots, default_roots, hf_hub_cache, llamacpp_legacy_cache
from fitplan.core.library.model import (
    FileSummary,
    LibraryModel,
    LibraryRoot,
    RootKind,
    ScanProgress,
    ScanResult,
    SkippedFile,
)

if TYPE_CHECKING:
    from fitplan.core.library.scanner import HeaderReader, LibraryScanner, ScanEvent, summarise_header

#: Loaded on first use: the scanner brings the GGUF reader, which a window listing models does not need to paint.
_FROM_SCANNER = frozenset({"HeaderReader", "LibraryScanner", "ScanEvent", "summarise_header"})


def __getattr__(name: str) -> object:
    if name in _FROM_SCANNER:
        from fitplan.core.library import scanner

        return getattr(scanner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "HEADER_ONLY_KEY",
    "INDEX_SCHEMA",
    "FileSummary",
    "HeaderReader",
    "IndexEntry",
    "JsonScanIndex",
    "LibraryModel",
    "LibraryRoot",
    "LibraryScanner",
    "MemoryScanIndex",
    "RootKind",
    "ScanEvent",
    "ScanIndex",
    "ScanProgress",
    "ScanResult",
    "SkippedFile",
    "dedupe_roots",
    "default_index_path",
    "default_roots",
    "hf_hub_cache",
    "llamacpp_legacy_cache",
    "summarise_header",
]
