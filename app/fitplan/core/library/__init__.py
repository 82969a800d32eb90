"""The model library: where models are on this machine, and a cached, cancellable, streaming scan of them."""

from __future__ import annotations

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
from fitplan.core.library.scanner import HeaderReader, LibraryScanner, ScanEvent, summarise_header

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
